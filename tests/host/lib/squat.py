#!/usr/bin/env python3
"""A stranger who squats a plain destination: it claims sessions and stalls.

    squat.py HOST PORT --ram BYTES [--seconds S]

Speaks the migration protocol (plain TCP, docs/wire-protocol.md): opens an
urgent channel with a fresh session's HELLO, takes the destination's HELLO
and AUTH SECRET, and then does nothing, holding the connection.  It claims
again as soon as the destination lets it: while told BUSY it tries every
2 ms, and once a claim is taken it waits 2.99 s (a claim that makes no pair
gave way after 3 s) and tries again: the real source, which retries every
100 ms, never finds the destination free.  Prints how many claims it made
and how often it was told BUSY.  Stops after --seconds (default 30).
Loopback only.
"""
import argparse
import socket
import struct
import time

from migwire import AUTH, AUTH_SECRET, ERROR, fresh_hello, recv_frame


def claim(host, port, ram):
    """A socket holding a claim, or None when the destination said BUSY."""
    s = socket.create_connection((host, port), timeout=2)
    s.sendall(fresh_hello(ram))
    kind, _ = recv_frame(s)
    if kind == ERROR:
        s.close()
        return None
    kind, p = recv_frame(s)
    if kind != AUTH or struct.unpack_from("<I", p)[0] != AUTH_SECRET:
        s.close()
        return None
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--ram", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        raise SystemExit("squat.py: loopback addresses only")
    end = time.monotonic() + a.seconds
    held, claims, busy = [], 0, 0
    while time.monotonic() < end:
        try:
            s = claim(a.host, a.port, a.ram)
        except OSError:
            s = None
        if s is None:
            busy += 1
            time.sleep(0.002)
            continue
        claims += 1
        held = held[-3:] + [s]
        print(f"squat: claim {claims}", flush=True)
        time.sleep(2.99)
    print(f"squat: {claims} claims, told busy {busy} times", flush=True)


if __name__ == "__main__":
    main()
