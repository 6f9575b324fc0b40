#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that every #include of nicmr's source tree runs down the layers.

The layers and what each folder may include are the table of doc/architecture.md
("Layers"), repeated in LAYERS below; this test and that table change together. A quoted
include ("x.h") is resolved to the folder of the one project file with that name (every
header's name is unique in the tree; a second file of the same name fails the check); an
angle include (<x.h>) of a third-party header is checked against EXTERNAL. The tests,
benchmarks and fuzz targets look at any layer, so they are not checked.

Usage: check-layers.py <source root>. Prints each offending include as
<file>:<line>: <folder> may not include <header> (<its folder>), and exits 1 if there is one.
"""
import os
import re
import sys

# Folder -> the folders its files may include, besides its own.
LAYERS = {
    'include': [],
    'lib/common': ['include'],
    'lib/mem': ['lib/common', 'include'],
    'lib/mr': ['lib/common', 'include'],
    # drivers/common/mlx5 (the PRM layout table) and drivers/common/roce (the RoCEv2 layout
    # table, built on the PRM table's Field accessors) are one level: either may include the
    # other's headers, and every folder that sees one sees both.
    'drivers/common': ['lib/common'],
    'drivers/bus': ['lib/mem', 'lib/common'],
    # The device model sees the layout table and its bus, never the driver.
    'drivers/emu': ['drivers/common', 'drivers/bus', 'lib/mem', 'lib/common'],
    # The driver implements lib/mr's device seam and cannot see the device model.
    'drivers/mlx5': ['drivers/common', 'drivers/bus', 'lib/mr', 'lib/mem', 'lib/common'],
    'api': ['drivers/common', 'drivers/bus', 'drivers/emu', 'drivers/mlx5', 'lib/mr',
            'lib/mem', 'lib/common', 'include'],
    # The provider sits on the native C API alone.
    'fabric': ['include'],
    'app': ['api', 'drivers/common', 'drivers/bus', 'drivers/emu', 'drivers/mlx5', 'lib/mr',
            'lib/mem', 'lib/common', 'include'],
    # Example applications are programs to copy: the installed headers alone.
    'examples': ['include'],
}
# Within a folder, files that alone may include a folder below: in api/, only the file that
# wires objects together (api_device.cpp, through api_wiring.h) sees the buses and the device
# model; the rest of the API is glue over the engine and the driver.
WIRING = {
    ('api', 'drivers/bus'): {'api/api_wiring.h', 'api/api_device.cpp'},
    ('api', 'drivers/emu'): {'api/api_wiring.h', 'api/api_device.cpp'},
}
UNCHECKED = {'test', 'bench', 'fuzz', 'devtools', 'doc', 'subprojects'}

# Third-party header prefixes -> the folders that may include them. libfabric's vocabulary
# stops at the provider (it maps FI_* onto NICMR_ACCESS_* once); verbs and mlx5dv are the
# driver's (the DEVX transport, rdma-core's layouts for the self-test of the layout table).
EXTERNAL = {
    'rdma/': ['fabric', 'app', 'include'],  # include: fi_nicmr.h, the provider's extension
    'infiniband/': ['drivers/common', 'drivers/mlx5', 'drivers/emu', 'app'],
}

# Includes that still run against the layers, each with the change that removes it; the check
# fails when one of them is gone from its file (so the list only shrinks) or a new one appears.
PENDING = set()

SOURCE_SUFFIXES = ('.h', '.hpp', '.c', '.cpp', '.cc')
QUOTED = re.compile(r'\s*#\s*include\s*"([^"]+)"')
ANGLED = re.compile(r'\s*#\s*include\s*<([^>]+)>')


def folder_of(rel):
    """The layer folder of a path relative to the root, or None when outside every layer."""
    parts = rel.split('/')
    for depth in (2, 1):
        key = '/'.join(parts[:depth])
        if len(parts) > depth and (key in LAYERS or key in UNCHECKED):
            return key
    return None


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == '.':
            # Build trees (build, build-rel, ...) and VCS data are not source.
            dirnames[:] = [d for d in dirnames if not d.startswith(('build', '.'))]
        for name in filenames:
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.normpath(os.path.join(rel_dir, name))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write('usage: check-layers.py <source root>\n')
        return 2
    root = argv[1]
    files = sorted(source_files(root))
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)

    errors = []
    checked = 0
    pending_seen = set()
    for rel in files:
        here = folder_of(rel)
        if here is None or here in UNCHECKED:
            continue
        allowed = set(LAYERS[here]) | {here}
        with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
            for lineno, line in enumerate(f, 1):
                quoted = QUOTED.match(line)
                angled = ANGLED.match(line)
                if quoted:
                    name = os.path.basename(quoted.group(1))
                    owners = [o for o in by_name.get(name, []) if folder_of(o) not in UNCHECKED]
                    if not owners:
                        continue  # generated (nicmr_config.h) or a system header in quotes
                    if len(owners) > 1:
                        errors.append(f'{rel}:{lineno}: "{name}" is ambiguous: '
                                      f'{", ".join(owners)}')
                        continue
                    there = folder_of(owners[0])
                    checked += 1
                    if there not in allowed:
                        errors.append(f'{rel}:{lineno}: {here} may not include {name} '
                                      f'({there})')
                    elif (here, there) in WIRING and rel not in WIRING[(here, there)]:
                        errors.append(f'{rel}:{lineno}: only '
                                      f'{", ".join(sorted(WIRING[(here, there)]))} '
                                      f'may include {name} ({there})')
                elif angled:
                    name = angled.group(1)
                    for prefix, users in EXTERNAL.items():
                        if name.startswith(prefix):
                            checked += 1
                            if here in users:
                                continue
                            if (rel, name) in PENDING:
                                pending_seen.add((rel, name))
                                continue
                            errors.append(f'{rel}:{lineno}: {here} may not include '
                                          f'<{name}> (only {", ".join(users)})')
    for rel, name in sorted(PENDING - pending_seen):
        if rel in files:  # gone or renamed: a renamed file's include shows up as new
            errors.append(f'{rel}: no longer includes <{name}>: take it out of PENDING')
    for e in errors:
        print(e)
    print(f'check-layers: {checked} includes checked in {len(files)} files, '
          f'{len(errors)} running against the layers')
    return 1 if errors or checked == 0 else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
