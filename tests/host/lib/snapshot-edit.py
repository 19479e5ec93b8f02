#!/usr/bin/env python3
"""Edit one field of a VMM snapshot's state blob, then fix its checksum.

Used by the host tests to forge a snapshot that the restoring host must
refuse (layout: vmm/include/vmm/snapshot.h and state.h, docs/vmm.md).

  snapshot-edit.py FILE cpuid-set LEAF SUBLEAF REG BIT   set a CPUID bit (every vCPU)
  snapshot-edit.py FILE cpuid-vendor TEXT12              replace the vendor string
"""
import struct
import sys

STATE_CPUID = 8
ENTRY = struct.Struct("<7I12x")  # struct kvm_cpuid_entry2, 40 bytes
REGS = {"eax": 3, "ebx": 4, "ecx": 5, "edx": 6}


def fnv64(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def sections(blob):
    pos = 64
    while pos + 16 <= len(blob):
        typ, idx, size = struct.unpack_from("<IIQ", blob, pos)
        yield typ, idx, pos + 16, size
        pos += 16 + ((size + 7) & ~7)


def edit_cpuid(blob, off, size, fn):
    for e in range(off, off + size, ENTRY.size):
        fields = list(ENTRY.unpack_from(blob, e))
        fn(fields)
        ENTRY.pack_into(blob, e, *fields)


def main():
    path, what, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    data = bytearray(open(path, "rb").read())
    state_off, state_size = struct.unpack_from("<QQ", data, 16)
    blob = bytearray(data[state_off:state_off + state_size])
    touched = 0
    for typ, _idx, off, size in sections(blob):
        if what == "cpuid-set" and typ == STATE_CPUID:
            leaf, sub, reg, bit = int(args[0], 0), int(args[1], 0), REGS[args[2]], int(args[3])

            def setbit(f):
                if f[0] == leaf and (not (f[2] & 1) or f[1] == sub):
                    f[reg] |= 1 << bit
            edit_cpuid(blob, off, size, setbit)
            touched += 1
        elif what == "cpuid-vendor" and typ == STATE_CPUID:
            b, d, c = struct.unpack("<3I", args[0].encode()[:12].ljust(12))

            def vendor(f):
                if f[0] == 0:
                    f[4], f[6], f[5] = b, d, c
            edit_cpuid(blob, off, size, vendor)
            touched += 1
    if not touched:
        sys.exit(f"snapshot-edit: no section to edit for {what} in {path}")
    struct.pack_into("<Q", blob, 24, 0)
    struct.pack_into("<Q", blob, 24, fnv64(bytes(blob)))
    data[state_off:state_off + state_size] = blob
    open(path, "wb").write(data)


if __name__ == "__main__":
    main()
