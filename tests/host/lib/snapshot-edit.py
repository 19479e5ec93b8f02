#!/usr/bin/env python3
"""Edit a VMM snapshot's state blob, then fix its sizes and checksum.

Used by the host tests to forge a snapshot that the restoring host must
refuse (layout: vmm/include/vmm/snapshot.h and state.h, docs/vmm.md).

  snapshot-edit.py FILE cpuid-set LEAF SUBLEAF REG BIT   set a CPUID bit (every vCPU)
  snapshot-edit.py FILE cpuid-vendor TEXT12              replace the vendor string
  snapshot-edit.py FILE cpuid-add LEAF SUBLEAF           append a CPUID entry (every vCPU)
  snapshot-edit.py FILE msr-index OLD NEW                rename saved MSR OLD to NEW
  snapshot-edit.py FILE msr-add INDEX VALUE              append an MSR entry (every vCPU)
  snapshot-edit.py FILE msr-set INDEX VALUE              set saved MSR INDEX's value
  snapshot-edit.py FILE new MEM                          write a fresh snapshot of a 1-vCPU
                                                         guest of MEM bytes: a valid header
                                                         and blob (no sections), RAM all holes
  snapshot-edit.py FILE header FIELD VALUE               set a header field (state_offset,
                                                         state_size, ram_offset, ram_size)

The -add ops grow a section: the blob is rebuilt and the RAM image moved
to the next page boundary after it, as the VMM would have written it.
"""
import struct
import sys

STATE_MSRS = 5
STATE_CPUID = 8
ENTRY = struct.Struct("<7I12x")  # struct kvm_cpuid_entry2, 40 bytes
MSR = struct.Struct("<IIQ")  # struct vm_state_msr, 16 bytes
REGS = {"eax": 3, "ebx": 4, "ecx": 5, "edx": 6}
PAGE = 4096


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """CRC32C (Castagnoli) as common/crc32c.c computes it: the blob's checksum."""
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ CRC32C_TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def sections(blob):
    """[type, index, payload] for each section, in order."""
    out, pos = [], 64
    while pos + 16 <= len(blob):
        typ, idx, size = struct.unpack_from("<IIQ", blob, pos)
        out.append([typ, idx, bytearray(blob[pos + 16:pos + 16 + size])])
        pos += 16 + ((size + 7) & ~7)
    return out


def build(header, secs):
    body = bytearray()
    for typ, idx, payload in secs:
        body += struct.pack("<IIQ", typ, idx, len(payload)) + payload
        body += bytes(-len(payload) % 8)
    blob = bytearray(header) + body
    struct.pack_into("<Q", blob, 16, len(blob))  # total_size
    struct.pack_into("<I", blob, 44, len(secs))  # nr_sections
    struct.pack_into("<Q", blob, 24, 0)
    struct.pack_into("<Q", blob, 24, crc32c(bytes(blob)))
    return blob


def edit_cpuid(payload, fn):
    for e in range(0, len(payload), ENTRY.size):
        fields = list(ENTRY.unpack_from(payload, e))
        fn(fields)
        ENTRY.pack_into(payload, e, *fields)


def edit(what, args, typ, payload):
    """Edits one section in place; True if it was one to edit."""
    if what == "cpuid-set" and typ == STATE_CPUID:
        leaf, sub, reg, bit = int(args[0], 0), int(args[1], 0), REGS[args[2]], int(args[3])

        def setbit(f):
            if f[0] == leaf and (not (f[2] & 1) or f[1] == sub):
                f[reg] |= 1 << bit
        edit_cpuid(payload, setbit)
    elif what == "cpuid-vendor" and typ == STATE_CPUID:
        b, d, c = struct.unpack("<3I", args[0].encode()[:12].ljust(12))

        def vendor(f):
            if f[0] == 0:
                f[4], f[6], f[5] = b, d, c
        edit_cpuid(payload, vendor)
    elif what == "cpuid-add" and typ == STATE_CPUID:
        # flags 1: KVM_CPUID_FLAG_SIGNIFCANT_INDEX, so the subleaf counts
        payload += ENTRY.pack(int(args[0], 0), int(args[1], 0), 1, 0, 0, 0, 0)
    elif what in ("msr-index", "msr-set") and typ == STATE_MSRS:
        which, new = int(args[0], 0), int(args[1], 0)
        found = False
        for e in range(0, len(payload), MSR.size):
            index, res, value = MSR.unpack_from(payload, e)
            if index == which:
                if what == "msr-index":
                    index = new
                else:
                    value = new
                MSR.pack_into(payload, e, index, res, value)
                found = True
        if not found:
            sys.exit(f"snapshot-edit: no saved MSR {args[0]}")
    elif what == "msr-add" and typ == STATE_MSRS:
        payload += MSR.pack(int(args[0], 0), 0, int(args[1], 0))
    else:
        return False
    return True


HEADER_FIELDS = {"state_offset": 16, "state_size": 24, "ram_offset": 32, "ram_size": 40}


def new(path, mem):
    """A snapshot that passes every check of the file's form (snapshot_read())."""
    # struct vm_state_header: "PCCVSTAT", version 3, 64 bytes, mem_size, 1 vCPU
    blob = build(struct.pack("<QIIQQQII16x", 0x5441545356434350, 3, 64, 0, 0, mem, 1, 0), [])
    ram_off = (64 + len(blob) + PAGE - 1) // PAGE * PAGE
    # struct snapshot_header: "PPVMSNAP", version 1, 64 bytes
    head = struct.pack("<QIIQQQQ16x", 0x50414E534D565050, 1, 64, 64, len(blob), ram_off, mem)
    with open(path, "wb") as f:
        f.write(head + blob)
        f.truncate(ram_off + mem)


def main():
    path, what, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if what == "new":
        new(path, int(args[0], 0))
        return
    if what == "header":
        with open(path, "r+b") as f:
            f.seek(HEADER_FIELDS[args[0]])
            f.write(struct.pack("<Q", int(args[1], 0) % (1 << 64)))
        return
    data = bytearray(open(path, "rb").read())
    state_off, state_size, ram_off, ram_size = struct.unpack_from("<QQQQ", data, 16)
    blob = data[state_off:state_off + state_size]
    ram = data[ram_off:ram_off + ram_size]
    secs = sections(blob)
    touched = sum(edit(what, args, typ, payload) for typ, _idx, payload in secs)
    if not touched:
        sys.exit(f"snapshot-edit: no section to edit for {what} in {path}")
    blob = build(blob[:64], secs)
    ram_off = (state_off + len(blob) + PAGE - 1) // PAGE * PAGE
    struct.pack_into("<QQ", data, 24, len(blob), ram_off)
    out = data[:state_off] + blob
    out += bytes(ram_off - len(out)) + ram
    open(path, "wb").write(out)


if __name__ == "__main__":
    main()
