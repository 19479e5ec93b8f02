/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one zero-page test, shared by the VMM (snapshots, lazy RAM sources)
 * and the migration library (zero pages travel as markers), which does not
 * link against vmm/.
 */
#ifndef COMMON_ZERO_PAGE_H
#define COMMON_ZERO_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#define ZERO_PAGE_TEST_SIZE 4096

/* Whether the 4 KiB at @page are all zero (@page 8-byte aligned). */
static inline bool page_is_zero(const void *page)
{
	const uint64_t *p = page;
	uint64_t acc = 0;

	/* OR eight words at a time: one branch per 64 bytes, not per word. */
	for (unsigned int i = 0; i < ZERO_PAGE_TEST_SIZE / 8; i += 8)
		acc |= p[i] | p[i + 1] | p[i + 2] | p[i + 3] | p[i + 4] | p[i + 5] | p[i + 6] |
		       p[i + 7];
	return acc == 0;
}

#endif /* COMMON_ZERO_PAGE_H */
