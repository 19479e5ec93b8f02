#!/usr/bin/env python3
"""A destination that answers every handshake, each after a delay.

    slowdest.py HOST PORT --delay S [--seconds S]

Listens on HOST:PORT (loopback only) and answers each connection's HELLO
after --delay seconds (docs/wire-protocol.md): the urgent channel gets the
session's secret, every other channel the proofs both ways, computed as
the real destination does (plain TCP: no TLS binding).  Then it stays
silent.  A source whose channels each take that long must give up at its
one connect deadline, however many channels it opens.  Prints a line
"answered N" as it answers each HELLO (N counts them), so that a test can
count the handshakes a source waited for without timing it.  Stops after
--seconds (default 60).
"""
import argparse
import hashlib
import hmac
import os
import socket
import struct
import threading
import time

from migwire import (AUTH, AUTH_CHALLENGE, AUTH_PROOF, AUTH_SECRET, CHAN_URGENT, HELLO,
                     HELLO_FMT, ROLE_DEST, frame, recv_frame)

secret = os.urandom(32)
answered = 0
answered_lock = threading.Lock()


def proof(label, nonce, session, channel):
    msg = label + nonce + struct.pack("<QH", session, channel) + bytes(32)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def serve(c, delay):
    try:
        _, p = recv_frame(c)
        h = list(struct.unpack(HELLO_FMT, p))
        time.sleep(delay)
        channel, session, index = h[2], h[5], h[10]
        h[1], h[7] = ROLE_DEST, 0
        c.sendall(frame(HELLO, struct.pack(HELLO_FMT, *h)))
        global answered
        with answered_lock:
            answered += 1
            print(f"answered {answered}", flush=True)
        if channel == CHAN_URGENT:
            c.sendall(frame(AUTH, struct.pack("<II", AUTH_SECRET, 0) + secret))
        else:
            nd = os.urandom(32)
            c.sendall(frame(AUTH, struct.pack("<II", AUTH_CHALLENGE, 0) + nd))
            recv_frame(c)  # the source's PROOF (not checked: this peer is a test's)
            _, p = recv_frame(c)  # its CHALLENGE
            ch = channel | index << 8
            c.sendall(frame(AUTH, struct.pack("<II", AUTH_PROOF, 0) +
                            proof(b"PCMG-AUTH-DST", p[8:40], session, ch)))
        c.recv(1 << 16)  # silent until the source goes
    except OSError:
        pass
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--delay", type=float, required=True)
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        raise SystemExit("slowdest.py: loopback addresses only")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.host, a.port))
    ls.listen(64)
    ls.settimeout(0.5)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(c, a.delay), daemon=True).start()


if __name__ == "__main__":
    main()
