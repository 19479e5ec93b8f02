/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one clock: CLOCK_MONOTONIC in nanoseconds.  The page record's times,
 * the migration's deadlines and stamps, and the benchmarks all count in it,
 * so times taken by different parts compare.
 */
#ifndef COMMON_CLOCK_H
#define COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The same clock in milliseconds, for timeouts counted in ms (poll()'s unit). */
static inline uint64_t now_ms(void)
{
	return now_ns() / 1000000;
}

#endif /* COMMON_CLOCK_H */
