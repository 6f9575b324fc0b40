#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""libnicmr.so exports exactly the functions that its public headers (include/nicmr/nicmr.h, and
nicmr_dpdk.h in a build with DPDK) declare, each under the version node of api/libnicmr.map, and
nothing else.

    check-exports.py HEADER... MAP LIBRARY
    check-exports.py --list HEADER        (the header's functions, one a line)

A failure names each symbol and what to do about it: a function added to nicmr.h needs a line
in the map's global list, and a map or library symbol that the header does not declare is an
internal that leaked (or a declaration that was removed).
"""
import re
import subprocess
import sys


def header_functions(path):
    """The functions a C header declares: top-level declarations whose declarator is
    name(...), without static or typedef. Function pointers in structures and typedefs are
    not functions the library defines."""
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    text = text.replace('\\\n', ' ')
    # The C++ linkage wrapper: #ifdef __cplusplus extern "C" { #endif and its closing brace.
    text = re.sub(r'#\s*ifdef\s+__cplusplus.*?#\s*endif', ' ', text, flags=re.S)
    text = re.sub(r'^\s*#[^\n]*', ' ', text, flags=re.M)
    names = set()
    depth = 0
    stmt = []
    for ch in text:
        if ch == '{':
            depth += 1
            continue
        if ch == '}':
            depth -= 1
            if depth == 0 and re.search(r'\)\s*$', ''.join(stmt)):
                stmt = []  # the end of a function body (a static inline definition)
            continue
        if depth:
            continue
        if ch == ';':
            decl = ' '.join(''.join(stmt).split())
            stmt = []
            words = re.findall(r'\w+', decl)
            if 'typedef' in words or 'static' in words:
                continue
            m = re.search(r'\b(\w+)\s*\(', decl)
            if m and not re.match(r'\s*\(\s*\*', decl[m.end() - 1:]):
                names.add(m.group(1))
            continue
        stmt.append(ch)
    return names


def map_globals(path):
    """The version node and the names of its global list (DPDK's version.map form:
    NODE { global: a; b; local: *; };)."""
    text = re.sub(r'/\*.*?\*/', ' ', open(path, encoding='utf-8').read(), flags=re.S)
    m = re.search(r'(\w[\w.]*)\s*\{\s*global\s*:(.*?)local\s*:\s*\*\s*;\s*\}\s*;', text, re.S)
    if not m:
        sys.exit(f'{path}: expected "NODE {{ global: ...; local: *; }};"')
    return m.group(1), {s.strip() for s in m.group(2).split(';') if s.strip()}


def library_exports(path):
    """Defined dynamic symbols of a shared library: {name: (type, version)}."""
    out = subprocess.run(['readelf', '--dyn-syms', '--wide', path], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].rstrip(':').isdigit() or f[6] == 'UND':
            continue
        name, _, version = f[7].partition('@')
        syms[name] = (f[3], version.lstrip('@'))
    return syms


def main(argv):
    if len(argv) == 3 and argv[1] == '--list':
        print('\n'.join(sorted(header_functions(argv[2]))))
        return 0
    if len(argv) < 4:
        sys.exit(__doc__)
    headers, map_path, lib = argv[1:-2], argv[-2], argv[-1]
    declared = set()
    for h in headers:
        found = header_functions(h)
        if not found:
            sys.exit(f'{h}: no function declarations found (parser out of step?)')
        declared |= found
    header = ' or '.join(headers)
    node, listed = map_globals(map_path)
    exports = library_exports(lib)
    # The version node is a symbol of its own (absolute, no code).
    exports.pop(node, None)
    problems = []
    for s in sorted(declared - listed):
        problems.append(f'{s}: declared in {header} but not in {map_path}: add "{s};" to '
                        f'its global list')
    for s in sorted(listed - declared):
        problems.append(f'{s}: in {map_path} but not declared in {header}: remove it from '
                        'the map (or declare it)')
    for s in sorted(declared - exports.keys()):
        problems.append(f'{s}: declared in {header} but {lib} does not export it')
    for s in sorted(exports.keys() - declared):
        problems.append(f'{s}: exported by {lib} but not declared in {header} (an internal '
                        'that leaked)')
    for s in sorted(exports.keys() & declared):
        kind, version = exports[s]
        if kind != 'FUNC':
            problems.append(f'{s}: exported as {kind}, not FUNC')
        if version != node:
            problems.append(f'{s}: version "{version}", expected "{node}"')
    if problems:
        print(f'{len(problems)} problem(s) with the exports of {lib}:')
        for p in problems:
            print('  ' + p)
        return 1
    print(f'{lib}: exports the {len(declared)} functions of {header} under {node}, and '
          'nothing else')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
