/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Snapshot file = header + VM state blob + RAM image (docs/vmm.md):
 *
 *   0          struct snapshot_header (64 bytes)
 *   64         state blob (state_size bytes, see vmm/state.h)
 *   ram_offset raw guest RAM, ram_size bytes, page aligned in the file,
 *              all-zero pages left as holes
 */
#ifndef VMM_SNAPSHOT_H
#define VMM_SNAPSHOT_H

#include <stdint.h>

struct vm;

#define SNAPSHOT_MAGIC	 0x50414e534d565050ULL /* "PPVMSNAP" */
#define SNAPSHOT_VERSION 1

struct snapshot_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t state_offset, state_size;
	uint64_t ram_offset, ram_size;
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct snapshot_header) == 64, "snapshot_header ABI");

/* Writes a paused VM's state and RAM to path. */
int snapshot_write(struct vm *vm, const char *path);
/*
 * Reads and validates the header and state blob of the open snapshot fd
 * (its RAM is then read from the same fd: the file checked is the file
 * used); *state is malloc'ed (caller frees).  -EBADMSG for anything
 * malformed.
 */
int snapshot_read(int fd, struct snapshot_header *h, void **state);

#endif /* VMM_SNAPSHOT_H */
