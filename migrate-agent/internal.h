/* SPDX-License-Identifier: GPL-2.0 */
/* Helpers shared by the library's source files; not an interface. */
#ifndef MIGRATE_INTERNAL_H
#define MIGRATE_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common/zero-page.h" /* page_is_zero() */
#include "migrate/migrate.h"
#include "migrate/net.h"

/*
 * A now_ns() time (CLOCK_MONOTONIC) as the deadline of a
 * pthread_cond_timedwait() on a condition variable set to that clock.
 */
static inline struct timespec mig_mono_ts(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000ull),
				  .tv_nsec = (long)(ns % 1000000000ull) };
}

_Static_assert(PAGE_SIZE == ZERO_PAGE_TEST_SIZE, "page_is_zero() tests wire-size pages");

#define pr_mig(...) fprintf(stderr, "migrate: " __VA_ARGS__)

/* This thread's CPU time (user + system), ns. */
static inline uint64_t mig_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int bit_test_and_set(uint64_t *map, uint64_t i)
{
	uint64_t m = 1ull << (i % 64);
	return (__atomic_fetch_or(&map[i / 64], m, __ATOMIC_ACQ_REL) & m) != 0;
}

static inline int bit_test(const uint64_t *map, uint64_t i)
{
	return (__atomic_load_n(&map[i / 64], __ATOMIC_ACQUIRE) >> (i % 64)) & 1;
}

static inline void bit_clear(uint64_t *map, uint64_t i)
{
	__atomic_fetch_and(&map[i / 64], ~(1ull << (i % 64)), __ATOMIC_ACQ_REL);
}

/* Wire bitmaps (RESUME, PRECOPY_DIRTY): bit i is bit i % 8 of byte i / 8. */
static inline int wire_bit(const uint8_t *bm, uint64_t i)
{
	return (bm[i / 8] >> (i % 8)) & 1;
}

static inline void wire_bit_set(uint8_t *bm, uint64_t i)
{
	bm[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* Bulk channel k's name in messages ("bulk", "bulk1", ... "bulk7"). */
static inline const char *mig_bulk_name(unsigned k)
{
	static const char *const names[] = { "bulk",  "bulk1", "bulk2", "bulk3",
					     "bulk4", "bulk5", "bulk6", "bulk7" };
	_Static_assert(sizeof(names) / sizeof(names[0]) == MIG_MAX_CHANNELS, "a name each");
	return k < MIG_MAX_CHANNELS ? names[k] : "bulk?";
}

/* Latency samples and their summary. */
struct mig_lat {
	uint64_t *ns;
	uint64_t n, cap;
	uint64_t hist[MIG_HIST_BUCKETS];
	uint64_t sum;
};
void mig_lat_add(struct mig_lat *l, uint64_t ns);
/* Percentile p (0..100) in ns, 0 when empty; sorts the samples. */
uint64_t mig_lat_pct(struct mig_lat *l, double p);
uint64_t mig_lat_max(const struct mig_lat *l);

/*
 * A peer's text (an ERROR message) made safe to print: printable ASCII
 * stays, anything else (escape sequences, newlines that would forge log
 * lines) becomes \xNN, and a backslash \\.  Always NUL-terminated.
 */
void mig_escape(char *out, size_t outlen, const void *text, size_t len);

/* The text of a checked ERROR payload, escaped into out. */
void mig_error_text(const uint8_t *payload, char *out, size_t outlen);

/*
 * A peer's ERROR as our message, "<what>: <its escaped text>" into err,
 * what formatted from fmt (e.g. "destination refused the %s channel").
 */
void mig_peer_error(char *err, size_t errlen, const uint8_t *payload, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Raise the calling thread's priority to MIG_URGENT_NICE: for the threads
 * on a demand fault's path (the source's urgent thread, the destination's
 * fault thread, which reads the replies), which wait far more than they
 * work.  Their wake-up then
 * preempts the push, the bulk receiver and other jobs instead of queueing
 * behind them (a heavier task gets an earlier deadline under EEVDF); the
 * little CPU they use is taken from the push.  Measured (docs/migration.md,
 * "Performance steps"): fault p99 1110 -> 645 us.  Needs CAP_SYS_NICE;
 * without it the thread keeps its priority and nothing else changes.
 */
#define MIG_URGENT_NICE (-10)
void mig_thread_urgent(void);

/* A progress line on stderr, rewritten in place. */
void mig_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mig_progress_end(void);

#endif /* MIGRATE_INTERNAL_H */
