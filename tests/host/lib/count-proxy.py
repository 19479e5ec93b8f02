#!/usr/bin/env python3
"""count-proxy: a TCP forwarder on loopback that counts what one side sends.

  count-proxy.py LISTEN-PORT TO-PORT LOG

Forwards every connection to 127.0.0.1:LISTEN-PORT to 127.0.0.1:TO-PORT,
both ways, and appends "MONOTONIC-NS TOTAL" to LOG each time bytes from the
connecting side (a migration's source) went through, TOTAL over all
connections.  The clock is CLOCK_MONOTONIC, as the migration library's
mig_now_ns(), so the two can be lined up.  Runs until killed.
"""
import socket
import sys
import threading
import time

lock = threading.Lock()
total = 0


def pump(src, dst, log):
    global total
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        if log:
            with lock:
                total += len(data)
                log.write(f"{time.monotonic_ns()} {total}\n")
        try:
            dst.sendall(data)
        except OSError:
            break
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    port, to, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    log = open(path, "w", buffering=1)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)
    while True:
        c, _ = srv.accept()
        d = socket.create_connection(("127.0.0.1", to))
        threading.Thread(target=pump, args=(c, d, log), daemon=True).start()
        threading.Thread(target=pump, args=(d, c, None), daemon=True).start()


if __name__ == "__main__":
    main()
