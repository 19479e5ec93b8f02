"""The migration protocol's framing, for the test peers (docs/wire-protocol.md)."""
import os
import struct

MAGIC, VERSION = 0x474D4350, 4
HELLO, ERROR, AUTH = 1, 9, 12
ROLE_SOURCE, ROLE_DEST = 1, 2
CHAN_URGENT, CHAN_BULK = 1, 2
AUTH_SECRET, AUTH_CHALLENGE, AUTH_PROOF = 1, 2, 3
# version role channel page_size flags session ram features attempt nr_bulk index reserved
HELLO_FMT = "<IHHIIQQIIHHI"


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def frame(kind, payload, seq=0):
    h = struct.pack("<IHHIII", MAGIC, kind, 0, len(payload), seq, crc32c(payload))
    return h + struct.pack("<I", crc32c(h)) + payload


def _exactly(s, n):
    b = b""
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            raise OSError("closed")
        b += x
    return b


def recv_frame(s):
    """(type, payload) of the next frame on socket s."""
    h = _exactly(s, 24)
    return struct.unpack_from("<H", h, 4)[0], _exactly(s, struct.unpack_from("<I", h, 8)[0])


def fresh_hello(ram):
    """A source's HELLO frame on an urgent channel, claiming a new random session."""
    sid = struct.unpack("<Q", os.urandom(8))[0]
    return frame(HELLO, struct.pack(HELLO_FMT, VERSION, ROLE_SOURCE, CHAN_URGENT, 4096, 0, sid,
                                    ram, 0, 1, 1, 0, 0))
