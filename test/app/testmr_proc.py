# SPDX-License-Identifier: BSD-3-Clause
"""A testmr process driven through a pipe, for the tests that run two of them (testmr flushes
each command's output, so a test can send a command and wait for its answer line by line).
Every wait has a timeout; fail() kills every process started and prints their last lines."""
import queue
import re
import subprocess
import sys
import threading
import time

TIMEOUT = 30  # seconds for any one command's answer
PROCS = []  # every Testmr started, killed by fail()


class LineProc:
    """A process reading commands from a pipe; its output lines in a queue, read by a thread.
    Its log keeps every command sent ("> cmd") and every line read."""

    def __init__(self, name, cmd):
        self.name = name
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, cmd):
        self.log.append("> " + cmd)
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def search(self, pattern, what, timeout=TIMEOUT):
        """(match, None) for the first line matching pattern within timeout seconds, else
        (None, why): an error line (unless the pattern looks for one), EOF or the timeout."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                return None, f"{self.name}: no '{what}' within {timeout} s"
            if line is None:
                return None, f"{self.name}: exited before '{what}'"
            self.log.append(line)
            if line.startswith("error:") and not pattern.lstrip("^").startswith("error:"):
                return None, f"{self.name}: {line} (waiting for '{what}')"
            m = rx.search(line)
            if m:
                return m, None


class Testmr(LineProc):
    """A testmr reading commands from a pipe, whose every wait fails the test (fail())."""

    def __init__(self, testmr, name, engine, prefix=()):
        """testmr -i --engine ENGINE, run under prefix (e.g. ip netns exec NS)."""
        super().__init__(name, list(prefix) + [testmr, "-i", "--engine", engine])
        PROCS.append(self)

    def expect(self, pattern, what):
        """The first line matching pattern; fails on an error line, EOF or the timeout."""
        m, why = self.search(pattern, what)
        if m is None:
            fail(why)
        return m

    def run(self, cmd, pattern, what=None):
        self.send(cmd)
        return self.expect(pattern, what or cmd)

    def dump(self, key, off, length):
        """The bytes `mr dump` prints."""
        self.send(f"mr dump {key} {off:#x} {length}")
        out = bytearray()
        while len(out) < length:
            m = self.expect(r"^([0-9a-f]{8}):((?: [0-9a-f]{2})+)$", f"dump of {key}")
            if int(m.group(1), 16) != off + len(out):
                fail(f"{self.name}: dump line at {m.group(1)}, expected {off + len(out):#x}")
            out += bytes(int(b, 16) for b in m.group(2).split())
        return bytes(out)

    def quit(self):
        self.send("quit")
        try:
            return self.p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            fail(f"{self.name}: still running {TIMEOUT} s after quit")


def fail(msg):
    for t in PROCS:
        sys.stderr.write(f"--- {t.name}:\n" + "\n".join(t.log[-40:]) + "\n")
        if t.p.poll() is None:
            t.p.kill()
    sys.stderr.write(f"FAIL: {msg}\n")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


ACCESS = "read,write,local_write,remote_read,remote_write,remote_atomic"


def setup(t):
    """A 64 KiB MR with every right in an 8 MiB pool, a CQ and a QP: (key, address)."""
    t.run("mr pool 8m page 4k", r"^engine pool 0:")
    m = t.run(f"mr reg 0 0 64k {ACCESS}", r"^MR key (0x[0-9a-f]{8}) .* address (0x[0-9a-f]+),")
    t.run("cq create", r"^CQ 0:")
    t.run("qp create 0", r"^QP 0: number")
    return m.group(1), int(m.group(2), 16)
