#!/usr/bin/env python3
"""throttle.py --run-ms R --stop-ms S [--seconds N] -- COMMAND...

Run COMMAND starved the way an overloaded host starves it: from its start
to its end it is stopped (SIGSTOP) for S ms, then runs (SIGCONT) for R ms,
over and over.  R / (R + S) is the share of time it may run; a stop of
several seconds is what a swapping host or a vCPU preempted by its
hypervisor looks like from the peer.  Exits with COMMAND's status (128 + N
for a signal), and prints how often it stopped it on stderr.  After N
seconds (a hang guard, 600 by default) it stops throttling and lets
COMMAND run on.
"""
import argparse
import os
import signal
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-ms", type=int, required=True)
    ap.add_argument("--stop-ms", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command")
    child = subprocess.Popen(cmd)
    # A TERM to the throttler (the test's cleanup) ends the command too.
    signal.signal(signal.SIGTERM, lambda *_: child.kill())
    end = time.monotonic() + a.seconds
    stops = 0
    while child.poll() is None and time.monotonic() < end:
        time.sleep(a.run_ms / 1000)
        if child.poll() is not None:
            break
        child.send_signal(signal.SIGSTOP)
        stops += 1
        time.sleep(a.stop_ms / 1000)
        child.send_signal(signal.SIGCONT)
    rc = child.wait()
    print(f"throttle: stopped {cmd[0].rsplit('/', 1)[-1]} {stops} times "
          f"({a.run_ms} ms running, {a.stop_ms} ms stopped)", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
