/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Whole-buffer file I/O (common/file-io.c): a short read or write is
 * retried until done, so callers see all or an error.  Lazy RAM's file
 * source and the VMM's snapshots and images share it.
 */
#ifndef COMMON_FILE_IO_H
#define COMMON_FILE_IO_H

#include <stddef.h>
#include <stdint.h>

/* Reads or writes exactly len bytes at off; -errno, -EIO on a short file. */
int pread_full(int fd, void *buf, size_t len, uint64_t off);
int pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

#endif /* COMMON_FILE_IO_H */
