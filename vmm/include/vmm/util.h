/* SPDX-License-Identifier: GPL-2.0 */
/* Small helpers shared by the VMM's modules. */
#ifndef VMM_UTIL_H
#define VMM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/clock.h"   /* now_ns() */
#include "common/file-io.h" /* pread_full(), pwrite_full() */
#include "common/macros.h"
#include "common/page.h"
#include "common/parse.h" /* parse_u64(), parse_size() */ /* PAGE_SIZE, page_is_zero() */

/* One-line messages; only the command edge prints, modules return -errno. */
#define pr_err(fmt, ...)  fprintf(stderr, "vmm: " fmt "\n", ##__VA_ARGS__)
#define pr_info(fmt, ...) fprintf(stderr, "vmm: " fmt "\n", ##__VA_ARGS__)

/* Sorts v[0..n) ascending (the benchmarks' latency samples). */
void sort_u64(uint64_t *v, size_t n);
/*
 * What this host can back at most: MemTotal + SwapTotal (/proc/meminfo),
 * bytes; 0 if unknown.  Guest RAM is reserved MAP_NORESERVE, so a guest
 * bigger than this would only fail later, when the guest touches it.
 */
uint64_t host_ram_limit(void);

#endif /* VMM_UTIL_H */
