#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The command line of every script and program users run: --help prints the usage and exits 0;
an unknown option, an unknown name or a bad value exits 2 with a message that names it; both
before any work (doc/development.md).

Scripts run on a PATH whose first directory holds stand-ins for every tool that does work
(apt-get, sudo, meson, ninja, git, tee, qemu, ...): each records its name and fails. A run that
reached one went past its argument check, and the test fails whatever the exit status. Every run
must also end within a few seconds (nothing here measures or builds).

usage: test_cli_args.py --top SOURCE_ROOT [--testmr PATH]     the scripts and testmr
       test_cli_args.py --bench PROGRAM...                    the benchmark programs
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Tools the scripts use to do their work; none may run while arguments are checked.
WORKERS = ["apt-get", "apt", "apt-cache", "dpkg-query", "dpkg-deb", "sudo", "meson", "ninja",
           "git", "tee", "clang-format", "clang-tidy", "qemu-system-x86_64", "timeout", "find",
           "mkdir", "nproc"]
# Generous for a loaded, shared machine; a run that builds or measures takes minutes.
TIME_LIMIT_S = 5.0

failures = []


class Sandbox:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="nicmr-cli-")
        self.bin = os.path.join(self.dir, "bin")
        self.log = os.path.join(self.dir, "called")
        os.makedirs(self.bin)
        for tool in WORKERS:
            path = os.path.join(self.bin, tool)
            with open(path, "w") as f:
                f.write("#!/bin/sh\necho %s >> '%s'\nexit 97\n" % (tool, self.log))
            os.chmod(path, 0o755)
        self.env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ.get("PATH", ""),
                        NICMR_SYSFS=os.path.join(self.dir, "no-sysfs"))

    def called(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            names = f.read().split()
        os.remove(self.log)
        return names

    def close(self):
        shutil.rmtree(self.dir)


def check(box, cmd, status, says=None, stream="stderr", env=None, must_not_say=None):
    """Runs cmd; its exit status must be `status` and `says` (a regex) must be in `stream`."""
    name = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))
    run_env = dict(box.env, **(env or {}))
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=60)
    except subprocess.TimeoutExpired:
        failures.append("%s: still running after 60 s" % name)
        return
    took = time.monotonic() - t0
    out = p.stdout if stream == "stdout" else p.stderr
    problems = []
    if p.returncode != status:
        problems.append("exit status %d, expected %d" % (p.returncode, status))
    if says is not None and not re.search(says, out, re.M):
        problems.append("%s does not match %r" % (stream, says))
    if must_not_say is not None and re.search(must_not_say, p.stdout + p.stderr, re.M):
        problems.append("output matches %r: it went past its argument check" % must_not_say)
    tools = box.called()
    if tools:
        problems.append("ran %s before refusing or helping" % ", ".join(sorted(set(tools))))
    if took > TIME_LIMIT_S:
        problems.append("took %.1f s" % took)
    if problems:
        failures.append("%s: %s\n    stdout: %s\n    stderr: %s" % (
            name, "; ".join(problems), p.stdout[-400:], p.stderr[-400:]))
    else:
        print("ok   %-60s -> %d" % (name[:60], p.returncode))


def bench_names(top):
    """The benchmark programs the build files make (executable('bench-...'))."""
    names = set()
    for dirpath, _, files in os.walk(os.path.join(top, "bench")):
        if "meson.build" in files:
            with open(os.path.join(dirpath, "meson.build")) as f:
                names.update(re.findall(r"executable\('(bench-[a-z0-9-]+)'", f.read()))
    return sorted(names)


def scripts(box, top, testmr):
    dev = os.path.join(top, "devtools")
    guest = os.path.join(dev, "vfio-guest")
    py = sys.executable
    usage = r"^usage: "

    bench = os.path.join(dev, "bench.sh")
    check(box, [bench, "--help"], 0, usage + "devtools/bench.sh", "stdout")
    names = bench_names(top)
    if not names:
        failures.append("no bench-* executable found in bench/*/meson.build")
    for n in names + ["vfio"]:
        check(box, [bench, "--help"], 0, r"\b%s\b" % re.escape(n), "stdout")
    check(box, [bench, "--bogus"], 2, "unknown option '--bogus'")
    check(box, [bench, "bench-mrr"], 2, "unknown benchmark 'bench-mrr'")
    check(box, [bench, "bench-mem", "mem"], 2, "unknown benchmark 'mem'")

    test = os.path.join(dev, "test.sh")
    check(box, [test, "--help"], 0, usage + "devtools/test.sh", "stdout")
    check(box, [test, "-h"], 0, usage + "devtools/test.sh", "stdout")
    check(box, [test, "--bogus"], 2, "unknown argument '--bogus'")
    check(box, [test, "all"], 2, "unknown argument 'all'")
    # (An empty NICMR_FUZZ_SECONDS is the default, as unset.)
    for bad in ["abc", "0", "-1", "1x", " 5"]:
        check(box, [test], 2, "NICMR_FUZZ_SECONDS='%s' is not a number" % re.escape(bad),
              env={"NICMR_FUZZ_SECONDS": bad})

    demo = os.path.join(dev, "demo.sh")
    check(box, [demo, "--help"], 0, usage + "devtools/demo.sh", "stdout")
    check(box, [demo, "--bogus"], 2, "unknown option '--bogus'")
    check(box, [demo, "--provider"], 2, "unknown option '--provider'")
    check(box, [demo, "-i", "x"], 2, "unexpected argument 'x'")

    fmt = os.path.join(dev, "check-format.sh")
    check(box, [fmt, "--help"], 0, usage + "devtools/check-format.sh", "stdout")
    check(box, [fmt, "--bogus"], 2, "unknown option '--bogus'")
    check(box, [fmt, "--tidy"], 2, "--tidy needs a build directory")
    check(box, [fmt, "--tidy", "/nonexistent/build"], 2, "/nonexistent/build: no compile_commands")
    check(box, [fmt, "--fix", "extra"], 2, "unexpected argument 'extra'")

    devbind = os.path.join(dev, "nicmr-devbind")
    check(box, [py, devbind, "--help"], 0, usage + "nicmr-devbind", "stdout")
    check(box, [py, devbind, "--bogus"], 2, "unrecognized arguments: --bogus")
    check(box, [py, devbind, "--unbind", "3:00.0"], 2, "'3:00.0' is not a PCI address")
    check(box, [py, devbind, "--bind"], 2, "--bind")

    run_guest = os.path.join(guest, "run-guest.sh")
    check(box, [run_guest, "--help"], 0, usage + "run-guest.sh", "stdout")
    check(box, [run_guest, "--bogus"], 2, "unknown option '--bogus'")
    check(box, [run_guest, "vmlinuz", "initrd"], 2, "needs VMLINUZ, INITRD and TIMEOUT_S")
    for bad in ["abc", "0", "-1", "1x"]:
        check(box, [run_guest, "vmlinuz", "initrd", bad], 2,
              "TIMEOUT_S '%s' is not a number" % re.escape(bad))

    fetch = os.path.join(guest, "fetch-kernel.sh")
    check(box, [fetch, "--help"], 0, usage + "fetch-kernel.sh", "stdout")
    check(box, [fetch, "--bogus"], 2, "unknown option '--bogus'")
    check(box, [fetch, "a", "b"], 2, "unexpected argument 'b'")

    mkinit = os.path.join(guest, "mkinitramfs.py")
    check(box, [py, mkinit, "--help"], 0, usage + "mkinitramfs.py", "stdout")
    check(box, [py, mkinit, "--bogus", "a", "b"], 2, "unrecognized arguments: --bogus")
    check(box, [py, mkinit], 2, "required")

    summary = os.path.join(dev, "test-summary.py")
    check(box, [py, summary, "--help"], 0, usage + "test-summary.py", "stdout")
    check(box, [py, summary, "--bogus", "build"], 2, "unrecognized arguments: --bogus")
    check(box, [py, summary], 2, "required")

    guest_test = os.path.join(top, "test", "vfio", "run_guest_test.py")
    base = [py, guest_test, "--source-root", "a", "--workdir", "b", "--test-bin", "c"]
    check(box, [py, guest_test, "--help"], 0, usage + "run_guest_test.py", "stdout")
    check(box, base + ["--bogus"], 2, "unrecognized arguments: --bogus")
    for bad in ["abc", "0", "-1", "1x"]:
        check(box, base + ["--timeout", bad], 2, "--timeout")

    rxe_test = os.path.join(top, "test", "rxe", "run_rxe_test.py")
    base = [py, rxe_test, "--source-root", "a", "--workdir", "b", "--peer", "c"]
    check(box, [py, rxe_test, "--help"], 0, usage + "run_rxe_test.py", "stdout")
    check(box, base + ["--bogus"], 2, "unrecognized arguments: --bogus")
    check(box, [py, rxe_test, "--workdir", "b", "--peer", "c"], 2, "--source-root")
    for opt in ["--timeout", "--iters", "--size", "--mtu"]:
        for bad in ["abc", "0", "-1", "1x"]:
            check(box, base + [opt, bad], 2, opt)
    check(box, base + ["--mtu", "1000"], 2, "--mtu: invalid choice")

    if testmr:
        opened = r"^testmr \(nicmr"
        check(box, [testmr, "--help"], 0, usage + "testmr", "stdout")
        check(box, [testmr, "--bogus"], 2, "'--bogus'", must_not_say=opened)
        check(box, [testmr, "extra"], 2, "unexpected argument 'extra'", must_not_say=opened)
        for opt, bad in [("--page-size", "3m"), ("--page-size", "abc"), ("--pool-size", "0"),
                         ("--pool-size", "1x"), ("--pool-size", "-1"), ("--node", "abc"),
                         ("--node", "-1"), ("--node", "1024"), ("--delivery", "fast")]:
            check(box, [testmr, opt, bad], 2, "%s .*'%s'" % (opt, re.escape(bad)),
                  must_not_say=opened)


def benches(box, programs):
    for prog in programs:
        name = os.path.basename(prog)
        check(box, [prog, "--help"], 0, "^usage: %s" % re.escape(name), "stdout")
        check(box, [prog, "-h"], 0, "^usage: %s" % re.escape(name), "stdout")
        check(box, [prog, "--bogus"], 2, "'--bogus'")
        check(box, [prog, "extra"], 2, "'extra'")
        if name == "bench-fi-mr":
            for opt in ["--reps", "--live"]:
                for bad in ["abc", "0", "-1", "1x", ""]:
                    check(box, [prog, opt, bad], 2, "%s takes a count .*'%s'" % (opt, bad))
                check(box, [prog, opt], 2, "%s needs a count" % opt)
            check(box, [prog, "verbs"], 2, "unknown provider 'verbs'")
            check(box, [prog, "tcp", "tcp"], 2, "provider 'tcp' named twice")
            check(box, [prog, "--child"], 2, "--child needs a role")
            check(box, [prog, "--child", "verbs"], 2, "--child: unknown role 'verbs'")
            check(box, [prog, "--ratios", "tcp"], 2, "--ratios measures nicmr alone")
            check(box, [prog, "--ratios", "--xp"], 2, "--ratios and --xp measure different")
            for role in ["xp-server:", "xp-server:verbs", "xp-server:tcp:00", "xp-client:tcp",
                         "xp-client:tcp:", "xp-client:verbs:00"]:
                check(box, [prog, "--child", role], 2,
                      "--child: unknown role '%s'" % re.escape(role))
            # bench.sh no longer hands it Google Benchmark's flags; it takes none.
            check(box, [prog, "--benchmark_filter=x"], 2, "'--benchmark_filter=x'")
            continue
        for bad in ["abc", "0", "-1", "1x"]:
            check(box, [prog, "--benchmark_repetitions=" + bad], 2,
                  "--benchmark_repetitions takes a count .*'%s'" % bad)
        check(box, [prog, "--benchmark_min_time=abc"], 2, "'--benchmark_min_time=abc'")
        check(box, [prog, "--benchmark_format=xml"], 2, "--benchmark_format=xml")
        check(box, [prog, "--benchmark_color=maybe"], 2, "--benchmark_color takes")
        check(box, [prog, "--benchmark_filter=no_such_benchmark"], 2,
              "--benchmark_filter='no_such_benchmark' matches no benchmark")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", help="the source tree (scripts)")
    ap.add_argument("--testmr", help="the testmr program")
    ap.add_argument("--bench", nargs="+", default=[], help="benchmark programs")
    args = ap.parse_args()
    if not args.top and not args.bench:
        ap.error("give --top or --bench")
    box = Sandbox()
    try:
        if args.top:
            scripts(box, os.path.abspath(args.top), args.testmr)
        benches(box, [os.path.abspath(p) for p in args.bench])
    finally:
        box.close()
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
