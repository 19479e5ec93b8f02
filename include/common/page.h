/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one page size of the project: guest RAM's pages, the page record's
 * unit, and a page frame's payload on the wire are all this size.
 */
#ifndef COMMON_PAGE_H
#define COMMON_PAGE_H

#include "common/zero-page.h"

#define PAGE_SHIFT 12
#define PAGE_SIZE  (1UL << PAGE_SHIFT)
_Static_assert(PAGE_SIZE == ZERO_PAGE_TEST_SIZE, "page_is_zero() tests one page");

#endif /* COMMON_PAGE_H */
