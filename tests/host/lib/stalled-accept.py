#!/usr/bin/env python3
"""A destination stopped between its accept and the source's HELLO.

    stalled-accept.py HOST PORT PID --ram BYTES [--stop-ms MS]

Connects to the destination (process PID) at HOST:PORT, waits until the
destination has accepted the connection (ss names PID as the socket's
owner), stops it (SIGSTOP), sends a fresh session's HELLO, waits MS ms
(4000: longer than a handshake's old 3 s, shorter than the link's 10 s
of silence), continues it (SIGCONT) and reads the answer: the
destination's HELLO and AUTH SECRET (exit 0), or its ERROR (exit 1, the
message printed).  A destination that counted its own stop as the peer's
silence refused the source ("peer silent (nothing received in time)").
Loopback only.
"""
import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time

from migwire import AUTH, AUTH_SECRET, ERROR, fresh_hello, recv_frame


def accepted(port, pid):
    """Whether process pid holds the accepted end of a connection to port."""
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"sport = :{port}"],
                         capture_output=True, text=True, check=False).stdout
    return f"pid={pid}," in out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("pid", type=int)
    ap.add_argument("--ram", type=int, required=True)
    ap.add_argument("--stop-ms", type=int, default=4000)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        sys.exit("stalled-accept.py: loopback addresses only")
    s = socket.create_connection((a.host, a.port), timeout=60)
    for _ in range(600):  # a hang guard of 60 s: the acceptor looks every 100 ms
        if accepted(a.port, a.pid):
            break
        time.sleep(0.1)
    else:
        sys.exit("stalled-accept.py: the destination never accepted the connection")
    hello = fresh_hello(a.ram)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        s.sendall(hello)
        time.sleep(a.stop_ms / 1000)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    kind, p = recv_frame(s)
    if kind == ERROR:
        print(f"stalled-accept: refused: {p[8:].decode(errors='replace')}")
        return 1
    kind, p = recv_frame(s)
    if kind != AUTH or struct.unpack_from("<I", p)[0] != AUTH_SECRET:
        print(f"stalled-accept: frame {kind} where AUTH SECRET was due")
        return 1
    print(f"stalled-accept: stopped {a.stop_ms} ms after the accept; HELLO and AUTH SECRET came")
    return 0


if __name__ == "__main__":
    sys.exit(main())
