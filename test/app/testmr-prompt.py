#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""testmr -i on a terminal (a pty): librte_cmdline's line editor. Tab completes a keyword, '?'
shows the next token's choices with their help, Tab on an empty parameter shows its help,
up-arrow recalls the last line and Return runs it again, a raw key printed by `key raw` maps
back to its key with `key map`, and `quit` leaves with status 0 (1 after a failed command).

    testmr-prompt.py TESTMR"""
import os
import pty
import re
import select
import sys
import time

TAB, UP, KILL_LINE = b"\t", b"\x1b[A", b"\x01\x0b"  # Ctrl-A then Ctrl-K empties the line
PROMPT = b"testmr> "


class Term:
    def __init__(self, testmr):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(testmr, [testmr, "-i"])
        self.buf = b""

    def read_until(self, pattern, timeout=10.0):
        """Reads until the regex pattern (bytes) appears in what came since the last call."""
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, self.buf, re.S)
            if m:
                out, self.buf = self.buf[:m.end()], self.buf[m.end():]
                return out
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    self.buf += os.read(self.fd, 4096)
                except OSError:
                    break
        sys.exit(f"testmr prompt: no {pattern!r} within {timeout} s; got {self.buf!r}")

    def send(self, data):
        os.write(self.fd, data)

    def run(self, line):
        """Types a line and returns what it printed, up to the next prompt."""
        self.send(line + b"\n")
        return self.read_until(re.escape(PROMPT))

    def wait(self):
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def expect(what, cond, got):
    if not cond:
        sys.exit(f"testmr prompt: {what}; got {got!r}")


def main():
    t = Term(sys.argv[1])
    t.read_until(re.escape(PROMPT))

    # Tab completes a keyword (two words here), and the completed line runs.
    t.send(b"sh" + TAB)
    out = t.read_until(rb"show ")
    t.send(b"dev" + TAB)
    out = t.read_until(rb"device ")
    out = t.run(b"")
    expect("Tab completed 'sh' 'dev' to 'show device'", b"firmware 22.36.1010" in out, out)

    # Up-arrow recalls it (history); Return runs it again.
    t.send(UP)
    out = t.read_until(rb"show device ")
    out = t.run(b"")
    expect("up-arrow recalled 'show device'", b"firmware 22.36.1010" in out, out)
    expect("the recalled line ran once", out.count(b"firmware") == 1, out)

    # '?' after "pool create 4m " lists the options with the command's help, as testpmd.
    t.send(b"pool create 4m ?")
    out = t.read_until(re.escape(PROMPT + b"pool create 4m "))
    expect("'?' lists the options of pool create",
           b" page [OPTION: [page 4k|2m|1g] [node N] [fallback]]: pool create SIZE" in out, out)
    t.send(KILL_LINE)

    # Tab on an empty parameter shows the parameter's help; ACCESS offers its names.
    t.send(b"mr reg 0 0 4k " + TAB)
    out = t.read_until(re.escape(PROMPT + b"mr reg 0 0 4k "))
    expect("Tab lists ACCESS's names with its help",
           b" remote_read [ACCESS: none, or rights a,b,c (Tab lists them)]: "
           b"mr reg POOL OFFSET LEN ACCESS [rma_event]: register pool bytes (nicmr_mr_reg;" in out, out)
    t.send(KILL_LINE)
    t.send(b"mr reg 0 0 4k remote_at" + TAB)
    t.read_until(rb"remote_atomic ")
    t.send(KILL_LINE)
    t.send(b"translate " + TAB)
    out = t.read_until(re.escape(PROMPT + b"translate "))
    expect("Tab on an empty parameter shows its help",
           b"[ID: a pool number, as 'pool create' printed it]: translate ID OFFSET" in out, out)
    t.send(KILL_LINE)
    t.send(b"help " + TAB)
    out = t.read_until(re.escape(PROMPT + b"help "))
    expect("Tab after help lists the sections", b" mr [OPTION: [SECTION]]" in out, out)
    t.send(KILL_LINE)

    # The lines run through the same parser as -c: its error messages.
    out = t.run(b"help bogus")
    expect("help bogus is refused", b"error: help: no section 'bogus'" in out, out)

    # Raw key out and in, in one session: key map gives the MR's key back.
    t.run(b"mr pool 8m page 4k")
    out = t.run(b"mr reg 0 0 64k read,remote_read")
    key = re.search(rb"MR key (0x[0-9a-f]{8})", out).group(1)
    out = t.run(b"key raw " + key)
    raw = re.search(rb"raw key \(64 bytes\): ([0-9a-f]{128})", out).group(1)
    out = t.run(b"key map " + raw)
    expect("key map of key raw's output gives the key back",
           b"raw key (64 bytes) -> key " + key + b" (an MR of this session)" in out, out)
    # A flipped bit in the blob is refused.
    flipped = raw[:40] + (b"0" if raw[40:41] != b"0" else b"1") + raw[41:]
    out = t.run(b"key map " + flipped)
    expect("a flipped raw key is refused", b"error: nicmr_mr_map_raw: -EINVAL" in out, out)

    t.send(b"quit\n")
    status = t.wait()
    expect("quit after failed commands exits 1", status == 1, status)

    # A session without failures exits 0, and Ctrl-D on an empty line leaves too.
    t = Term(sys.argv[1])
    t.read_until(re.escape(PROMPT))
    t.run(b"show pools")
    t.send(b"\x04")
    status = t.wait()
    expect("Ctrl-D after good commands exits 0", status == 0, status)
    print("testmr prompt: ok")


if __name__ == "__main__":
    main()
