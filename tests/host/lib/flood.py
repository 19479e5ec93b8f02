#!/usr/bin/env python3
"""Strangers at a destination's port: connections that trickle and churn.

    flood.py HOST PORT [--trickle N] [--churn N] [--seconds S]

--trickle N: N connections, each sending one byte every 2.5 s (a valid
first byte of a frame or of a TLS record: the peer cannot tell it from a
slow source); a connection the destination closes is opened again.
--churn N: N threads that connect, send 64 random bytes, close, and do it
again, 100 times a second each at most.
Runs --seconds (default 60) or until killed; prints how many connections
it made.  Loopback only: HOST must be in 127.0.0.0/8.
"""
import argparse
import os
import socket
import threading
import time

stop = threading.Event()
counts = {"trickle": 0, "churn": 0}
lock = threading.Lock()


def count(kind):
    with lock:
        counts[kind] += 1


def trickler(host, port):
    while not stop.is_set():
        try:
            s = socket.create_connection((host, port), timeout=5)
        except OSError:
            time.sleep(0.1)
            continue
        count("trickle")
        try:
            while not stop.is_set():
                s.send(b"\x16")
                if stop.wait(2.5):
                    break
        except OSError:
            pass
        finally:
            s.close()


def churner(host, port):
    while not stop.is_set():
        try:
            s = socket.create_connection((host, port), timeout=5)
            count("churn")
            s.send(os.urandom(64))
            s.close()
        except OSError:
            pass
        stop.wait(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--trickle", type=int, default=8)
    ap.add_argument("--churn", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        raise SystemExit("flood.py: loopback addresses only")
    threads = [threading.Thread(target=trickler, args=(a.host, a.port), daemon=True)
               for _ in range(a.trickle)]
    threads += [threading.Thread(target=churner, args=(a.host, a.port), daemon=True)
                for _ in range(a.churn)]
    for t in threads:
        t.start()
    try:
        stop.wait(a.seconds)
    except KeyboardInterrupt:
        pass
    stop.set()
    print(f"flood: {counts['trickle']} trickling and {counts['churn']} churning connections",
          flush=True)


if __name__ == "__main__":
    main()
