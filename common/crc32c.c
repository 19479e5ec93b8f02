// SPDX-License-Identifier: GPL-2.0
/*
 * CRC32C (Castagnoli), shared by the migration protocol (every frame) and
 * the VMM's state blob, which the migration carries.
 */
#include <pthread.h>
#include <string.h>

#include "common/crc32c.h"

/*
 * Hardware CRC32C (SSE4.2) when the CPU has it, else slicing-by-8.  The
 * crc32 instruction has a latency of three cycles and a throughput of one,
 * so long buffers (pages) run as three interleaved streams of CRC_BLOCK
 * bytes, joined with the linearity of the CRC register:
 *   update(s, A B) = shift(update(s, A), |B|) ^ update(0, B)
 * where shift() advances a state over |B| zero bytes (four tables).
 */
#define CRC_BLOCK 1360 /* 3 x 1360 = 4080: one step per page */

static uint32_t crc_table[8][256];
static uint32_t crc_shift_tab[4][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= c;
		c = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		    crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
		    crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
		    crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return c;
}

static void crc_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & -(c & 1));
		crc_table[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] =
			    (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
	/* shift() of each single bit, then of every byte value by linearity. */
	static const uint8_t zeros[CRC_BLOCK];
	uint32_t basis[32];
	for (int j = 0; j < 32; j++)
		basis[j] = crc_sw(1u << j, zeros, CRC_BLOCK);
	for (int k = 0; k < 4; k++)
		for (unsigned v = 0; v < 256; v++) {
			uint32_t x = 0;
			for (int b = 0; b < 8; b++)
				if (v & (1u << b))
					x ^= basis[8 * k + b];
			crc_shift_tab[k][v] = x;
		}
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
}

static uint32_t crc_shift(uint32_t c)
{
	return crc_shift_tab[0][c & 0xff] ^ crc_shift_tab[1][(c >> 8) & 0xff] ^
	       crc_shift_tab[2][(c >> 16) & 0xff] ^ crc_shift_tab[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
							    size_t len)
{
	while (len >= 3 * CRC_BLOCK) {
		uint64_t c0 = c, c1 = 0, c2 = 0;
		for (size_t i = 0; i < CRC_BLOCK; i += 8) {
			uint64_t v0, v1, v2;
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + CRC_BLOCK + i, 8);
			memcpy(&v2, p + 2 * CRC_BLOCK + i, 8);
			c0 = __builtin_ia32_crc32di(c0, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c = crc_shift((uint32_t)c0) ^ (uint32_t)c1;
		c = crc_shift(c) ^ (uint32_t)c2;
		p += 3 * CRC_BLOCK;
		len -= 3 * CRC_BLOCK;
	}
	uint64_t c64 = c;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
		p += 8;
		len -= 8;
	}
	c = (uint32_t)c64;
	while (len--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
	uint32_t c = ~crc;
	c = crc_hw ? crc_sse42(c, buf, len) : crc_sw(c, buf, len);
	return ~c;
}

uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_sw(~crc, buf, len);
}
