/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CRC32C (Castagnoli), the iSCSI/ext4 one, for the wire protocol's frames
 * and the VMM's state blob: crc32c(0, "123456789", 9) == 0xe3069283.
 */
#ifndef COMMON_CRC32C_H
#define COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* With the CPU's crc32 instruction where it has one (SSE4.2). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* The same without the CPU's crc32 instruction (for tests). */
uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len);

#endif /* COMMON_CRC32C_H */
