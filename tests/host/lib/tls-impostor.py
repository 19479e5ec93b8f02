#!/usr/bin/env python3
"""A TLS 1.3 server that holds no pre-shared key, only a self-signed
certificate: what a PSK source must refuse to talk to.

    tls-impostor.py PORT CERT KEY OUT

Accepts one connection, runs the handshake, then reads until the peer
closes; writes to OUT how far it got: "handshake failed: ..." or
"received N bytes".  Loopback only.
"""
import socket
import ssl
import sys


def main():
    port, cert, key, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(4)
    ls.settimeout(60)
    conn, _ = ls.accept()
    conn.settimeout(30)
    try:
        tls = ctx.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError) as e:
        open(out, "w").write(f"handshake failed: {e}\n")
        return
    got = 0
    try:
        while True:
            b = tls.recv(65536)
            if not b:
                break
            got += len(b)
    except (ssl.SSLError, OSError):
        pass
    open(out, "w").write(f"received {got} bytes\n")


if __name__ == "__main__":
    main()
