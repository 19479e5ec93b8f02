/* SPDX-License-Identifier: GPL-2.0 */
/* Small helpers shared by the VMM's modules. */
#ifndef VMM_UTIL_H
#define VMM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/zero-page.h" /* page_is_zero() */

#define PAGE_SIZE 4096UL
_Static_assert(PAGE_SIZE == ZERO_PAGE_TEST_SIZE, "page_is_zero() tests 4 KiB pages");
#define PAGE_SHIFT 12

#define ARRAY_SIZE(a)			(sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a)			(((x) + (a)-1) & ~((__typeof__(x))(a)-1))
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* One-line messages; only the command edge prints, modules return -errno. */
#define pr_err(fmt, ...)  fprintf(stderr, "vmm: " fmt "\n", ##__VA_ARGS__)
#define pr_info(fmt, ...) fprintf(stderr, "vmm: " fmt "\n", ##__VA_ARGS__)

/* "64M", "1G", "4096", "2k": bytes; -EINVAL on anything else. */
int parse_size(const char *s, uint64_t *out);
/* Decimal, hexadecimal (0x) or octal number with nothing after it. */
int parse_u64(const char *s, uint64_t *out);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);
/* Sorts v[0..n) ascending (the benchmarks' latency samples). */
void sort_u64(uint64_t *v, size_t n);
/* Reads or writes exactly len bytes at off; -errno, -EIO on a short file. */
int pread_full(int fd, void *buf, size_t len, uint64_t off);
int pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
/*
 * What this host can back at most: MemTotal + SwapTotal (/proc/meminfo),
 * bytes; 0 if unknown.  Guest RAM is reserved MAP_NORESERVE, so a guest
 * bigger than this would only fail later, when the guest touches it.
 */
uint64_t host_ram_limit(void);

#endif /* VMM_UTIL_H */
