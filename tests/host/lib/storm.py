#!/usr/bin/env python3
"""A connection storm at a destination's port, as fast as this machine connects.

    storm.py HOST PORT [--seconds S] [--max N] [--hold K] [--speak N]

One loop opens connections back to back without waiting for any (a
non-blocking connect each), as fast as the kernel and one core allow.
It says nothing on them but, on every Nth (--speak, default 8), the
first byte of a TLS record: each waits in the destination's handshake as
a stranger's, silent, or stalled after one byte (a destination that gave
each connection a thread at once gave these one).  The newest K (--hold, default 256) stay open, the oldest is
reset when one more opens: the destination sees idle connections, churn
and a full listen queue.  Closes are resets (SO_LINGER 0), so no
TIME_WAIT piles up on either side.  Stops by itself after --seconds
(default 60) or --max connections (default 2000000), or when killed
(SIGTERM); prints "storm: started", then how many it opened and the
rate.  Loopback only: HOST must be in 127.0.0.0/8.
"""
import argparse
import collections
import errno
import signal
import socket
import struct
import time

RESET = struct.pack("ii", 1, 0)


def close(s):
    """Reset s; 1 if its connection was made."""
    try:
        s.getpeername()
        made = 1
    except OSError:
        made = 0
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    except OSError:
        pass
    s.close()
    return made


def speak(tospeak, n):
    """The first byte of a TLS record on the oldest connection due to speak, once it is up."""
    while tospeak:
        s, at = tospeak[0]
        try:
            s.send(b"\x16")
        except (BlockingIOError, OSError) as e:
            if s.fileno() >= 0 and getattr(e, "errno", 0) in (errno.ENOTCONN, errno.EAGAIN) \
                    and n - at < 512:
                return  # not connected yet: later
        tospeak.popleft()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max", type=int, default=2000000)
    ap.add_argument("--hold", type=int, default=256)
    ap.add_argument("--speak", type=int, default=8)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        raise SystemExit("storm.py: loopback addresses only")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    held = collections.deque()
    n = made = 0
    print("storm: started", flush=True)
    t0 = time.monotonic()
    end = t0 + a.seconds
    tospeak = collections.deque()
    while not stop and n < a.max and time.monotonic() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        s.connect_ex((a.host, a.port))  # no wait: the next one goes at once
        n += 1
        if a.speak and n % a.speak == 0:
            tospeak.append((s, n))
        speak(tospeak, n)
        held.append(s)
        if len(held) > a.hold:
            made += close(held.popleft())
    while held:
        made += close(held.popleft())
    dt = time.monotonic() - t0
    print(f"storm: {n} connections in {dt:.1f} s ({n / dt:.0f}/s), {made} of them accepted "
          f"by the kernel", flush=True)


if __name__ == "__main__":
    main()
