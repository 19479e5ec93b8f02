// SPDX-License-Identifier: GPL-2.0
/*
 * wire-fuzz: libFuzzer target for the frame parser.  The first byte picks
 * the connection context (before or after HELLO, which peer role, zstd on or
 * off, RAM size); the rest is a byte stream parsed exactly as a receiver
 * would.  The parser must never read out of bounds, never accept a frame that
 * breaks its contract, and report an error for anything it rejects.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "migrate/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	/* Both CRC32C implementations agree on every input and every split. */
	uint32_t whole = crc32c(0, data, size);
	if (whole != crc32c_portable(0, data, size) ||
	    whole != crc32c(crc32c(0, data, size / 3), data + size / 3, size - size / 3))
		abort();
	struct mig_wire_ctx ctx = {
		.hello_seen = mode & 1,
		.ram_size = (mode & 1) ? (uint64_t)(1 + ((mode >> 1) & 7)) * 16 * PAGE_SIZE : 0,
		.features =
		    ((mode & 0x10) ? MIG_FEAT_ZSTD : 0) | ((mode & 0x80) ? MIG_FEAT_RUNS : 0),
		.peer_role = (mode & 0x20) ? MIG_ROLE_DEST : MIG_ROLE_SOURCE,
	};
	char err[256];
	int e;
	err[0] = 0;
	const uint8_t *stream = data + 1;
	uint8_t *copy = NULL;
	if (mode & 0x40) {
		/*
		 * Repair every CRC in a copy, so that mutations reach the payload
		 * checks instead of all dying at the header checksum.
		 */
		copy = malloc(size - 1 ? size - 1 : 1);
		memcpy(copy, data + 1, size - 1);
		size_t off = 0;
		while (size - 1 - off >= sizeof(struct mig_frame_hdr)) {
			struct mig_frame_hdr h;
			memcpy(&h, copy + off, sizeof(h));
			size_t room = size - 1 - off - sizeof(h);
			uint32_t len = h.len <= room ? h.len : (uint32_t)room;
			uint32_t pcrc = crc32c(0, copy + off + sizeof(h), len);
			mig_frame_hdr_init(&h, h.type, h.len, h.seq, pcrc);
			h.magic = MIG_MAGIC;
			h.hdr_crc = crc32c(0, &h, offsetof(struct mig_frame_hdr, hdr_crc));
			memcpy(copy + off, &h, sizeof(h));
			off += sizeof(h) + len;
		}
		stream = copy;
	}
	long n = mig_parse_stream(&ctx, stream, size - 1, &e, err, sizeof(err));
	free(copy);
	if (n < 0)
		abort();
	/* Every rejection comes with a message. */
	if (e && !err[0])
		abort();
	/* An accepted context always has a sane RAM size. */
	if (ctx.hello_seen && (ctx.ram_size % PAGE_SIZE || ctx.ram_size > MIG_MAX_RAM_SIZE))
		abort();
	return 0;
}
