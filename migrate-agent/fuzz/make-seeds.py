#!/usr/bin/env python3
"""Writes the small seed corpora of dest-fuzz and source-fuzz
(migrate-agent/fuzz/corpus/dest and .../source).

dest: a start byte and frames, each frame preceded by its channel byte (0
urgent, 1 bulk).  source: a start byte and frames from a destination.  CRCs
are left zero: the start byte asks the target to repair them (dest: bit
0x10, source: bit 0x20), as a sender would have computed them.
"""
import os
import struct
import sys

MAGIC = 0x474D4350
PAGE, DIRTY, DONE, ERROR, PAGE_RUN = 4, 10, 11, 9, 14
RAW, ZERO = 0, 1
F_DEMAND, F_PRECOPY = 1, 2
PS = 4096


def frame(chan, typ, payload):
    hdr = struct.pack("<IHHIIII", MAGIC, typ, 0, len(payload), 0, 0, 0)
    return bytes([chan]) + hdr + payload


def page(chan, i, enc=ZERO, flags=0):
    data = b"" if enc == ZERO else bytes([(i * 31 + 7) & 0xFF]) * PS
    return frame(chan, PAGE, struct.pack("<QHHI", i * PS, enc, flags, len(data)) + data)


def run(chan, i, count, enc=RAW):
    data = b"" if enc == ZERO else b"".join(bytes([((i + k) * 31 + 7) & 0xFF]) * PS
                                            for k in range(count))
    return frame(chan, PAGE_RUN, struct.pack("<QIHH", i * PS, count, enc, 0) + data)


def seeds():
    n = 16  # start byte bits 2-3 = 0: 16 pages
    post = 0x01 | 0x10 | 0x20
    yield "postcopy-all-zero", bytes([post]) + b"".join(page(1, i) for i in range(n))
    yield "postcopy-demand-dup", bytes([post]) + page(0, 3, RAW, F_DEMAND) + b"".join(
        page(1, i) for i in range(n))
    pre = 0x10 | 0x20
    dirty = struct.pack("<Q", n) + bytes([0b00000110, 0])
    yield "precopy-dirty-done", (bytes([pre]) + b"".join(
        page(1, i, RAW, F_PRECOPY) for i in range(4)) + frame(1, DIRTY, dirty) +
        frame(1, DONE, struct.pack("<IIQ", 0, 0, 0)) + b"".join(page(1, i) for i in range(4, n)))
    done0 = frame(1, DONE, struct.pack("<IIQ", 0, 0, 0))
    # Pages installed after DONE(0), then the link breaks before STATE (channel
    # byte bit 1): a precopy page again, the switch-over again, the rest.
    yield "reconnect-before-state", (bytes([pre]) + done0 + b"".join(page(1, i) for i in range(4)) +
        bytes([3]) + page(1, 5, RAW, F_PRECOPY)[1:] + done0 +
        b"".join(page(1, i) for i in range(6, n)))
    # The same, but the precopy page is one installed before the break: the
    # record must refuse to go back from PRESENT (a hostile source's trick).
    yield "staged-over-installed", (bytes([pre]) + done0 + b"".join(page(1, i) for i in range(4)) +
        bytes([3]) + page(1, 2, RAW, F_PRECOPY)[1:] + done0 + b"".join(page(1, i) for i in range(4, n)))
    # The push in runs (PAGE_RUN): a demand reply inside a raw run (skipped
    # there), a zero run, a run up to the last page.
    yield "postcopy-runs", (bytes([post]) + page(0, 2, RAW, F_DEMAND) + run(1, 0, 5) +
        run(1, 5, 3, ZERO) + run(1, 8, n - 8))
    msg = b"gave up"
    yield "error", bytes([post]) + page(1, 0) + frame(0, ERROR, struct.pack("<II", 5, len(msg)) + msg)


REQUEST, RUNNING, COMPLETE = 5, 6, 7


def source_seeds():
    n = 16  # start byte bits 0-1 = 0: 16 pages; bits 2-4: eighths already pushed
    fix = 0x20
    req = frame(0, REQUEST, struct.pack("<II", 3, 0) + struct.pack("<QQQ", 0, 5 * PS, 5 * PS))[1:]
    run = frame(0, RUNNING, struct.pack("<Qq", 1, 2))[1:]
    complete = frame(0, COMPLETE, struct.pack("<Q", n) + bytes(8 * 11 + 8 * 24))[1:]
    yield "request-running", bytes([fix]) + run + req
    yield "complete-early", bytes([fix | (4 << 2)]) + req + complete
    allreq = frame(0, REQUEST, struct.pack("<II", n, 0) + b"".join(
        struct.pack("<Q", i * PS) for i in range(n)))[1:]
    yield "all-then-complete", bytes([fix]) + allreq + complete
    msg = b"gave up"
    yield "error", bytes([fix]) + frame(0, ERROR, struct.pack("<II", 5, len(msg)) + msg)[1:]


base = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
for sub, gen in (("dest", seeds), ("source", source_seeds)):
    out = os.path.join(base, sub)
    os.makedirs(out, exist_ok=True)
    for name, data in gen():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
