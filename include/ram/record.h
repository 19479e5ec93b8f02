/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The page record: one atomic word per page of lazy RAM, the one record of
 * where each page is at this host.  Everything else is derived from it:
 * whether a fault must ask for the page, which pages a recovering link says
 * it has, when the migration is complete, the arrival timeline and the
 * page map.  Its only writers are ram_claim() (and ram_unclaim(), which
 * undoes a claim) and the ram_install*() calls (ram/record.c):
 *
 *            fault                      arrival (claim)           install
 *   MISSING -------> REQUESTED ----------------------> INSTALLING -------> PRESENT
 *      |  ^                                               ^
 *      |  | dirtied again                                 | fault or stager (claim)
 *      v  |                                               |
 *     STAGED (a copy waits outside guest RAM: precopy) ---+
 *
 * A page is INSTALLING in the hands of exactly one thread, so it is
 * installed once; PRESENT never goes back.  Beside the state the word
 * holds how the page came (RAM_BY_*), whether it is a zero page, and a
 * time in ns since the record's start: the fault's while REQUESTED, the
 * arrival's once PRESENT.  Plain RAM (no back end) has no record: every
 * page counts present.
 *
 * This header is for the code that writes or reads the record word by
 * word (ram/ itself, and the migration's destination); the rest of a
 * program sees the RAM object (ram/ram.h) only.  Pages are page numbers.
 */
#ifndef RAM_RECORD_H
#define RAM_RECORD_H

#include <stdbool.h>
#include <stdint.h>

struct ram;

enum ram_page_state {
	RAM_PAGE_MISSING,
	RAM_PAGE_REQUESTED,
	RAM_PAGE_STAGED,
	RAM_PAGE_INSTALLING,
	RAM_PAGE_PRESENT,
};

/*
 * How a page came: the one numbering of arrival kinds, used as is by the
 * page map in the metrics (which names them with ram_arrival_name(), so
 * its readers, bench/pagemap among them, take the names from there).  A
 * new kind: a line here, its name in ram/record.c, and the code that
 * installs pages with it.
 */
enum ram_arrival {
	RAM_BY_NONE,
	RAM_BY_DEMAND,	/* a reply to this host's request */
	RAM_BY_PUSH,	/* the source's background push */
	RAM_BY_PRECOPY, /* staged before the switch-over */
	RAM_BY_SOURCE,	/* a synchronous page source (a file, a buffer) */
	RAM_BY_KINDS,	/* how many there are (the word has room for 8) */
};

/* A kind's name in reports ("demand", "pushed", ...), "?" for no kind. */
const char *ram_arrival_name(enum ram_arrival by);

#define RAM_FROM(state)	    (1u << (state))
#define RAM_WORD_STATE_MASK 0x7ull
#define RAM_WORD_BY_SHIFT   3
#define RAM_WORD_ZERO	    (1ull << 6)
#define RAM_WORD_TIME_SHIFT 8

/*
 * Page pg's word (acquire).  A call, not an inline over the record's
 * array: the record stays private to ram/, and its readers outside
 * (one word per fault or arrival, or a scan at the end) do far more per
 * word than a call costs.
 */
uint64_t ram_page_word(const struct ram *ram, uint64_t pg);
/* CLOCK_MONOTONIC ns of a word's time (0 if it has none). */
uint64_t ram_word_time_ns(const struct ram *ram, uint64_t w);

static inline enum ram_page_state ram_word_state(uint64_t w)
{
	return (enum ram_page_state)(w & RAM_WORD_STATE_MASK);
}

static inline enum ram_arrival ram_word_by(uint64_t w)
{
	return (enum ram_arrival)((w >> RAM_WORD_BY_SHIFT) & 7);
}

static inline bool ram_word_zero(uint64_t w)
{
	return w & RAM_WORD_ZERO;
}

/*
 * Pages REQUESTED now: faults waiting for their page.  Counted by the
 * claims themselves, so it is the record's figure, not a copy of it.
 */
uint64_t ram_nr_requested(const struct ram *ram);

/*
 * Moves page pg from one of the states in `from` (RAM_FROM() masks) to
 * `to`, stamped with the current time, how (RAM_BY_NONE keeps the old
 * word's) and the zero flag.  True on success, the replaced word in *old;
 * false when the page was in none of those states, its word in *old.
 */
bool ram_claim(struct ram *ram, uint64_t pg, unsigned from, enum ram_page_state to,
	       enum ram_arrival by, bool zero, uint64_t *old);
/* Gives back a claim whose install failed: the page's word becomes old again. */
void ram_unclaim(struct ram *ram, uint64_t pg, uint64_t old);

/*
 * Installs n consecutive pages at page pg, every one claimed by the caller
 * (INSTALLING), from the page-aligned private anonymous buffer `pages`
 * (n pages; NULL: zero pages) and wakes their waiters: one call into the
 * kernel for the run where the back end has install_run / zero_run, else
 * page by page (a moving back end takes the buffer's pages).  The pages
 * become PRESENT, arrived `by` now.  `zeros` (NULL: none): a bitmap, bit k
 * for page pg + k, of the pages in `pages` the caller filled with zeros,
 * so that a few zero pages do not split a run in two calls; the record
 * still says they are zero pages.  0, or a fatal -errno (the pages stay
 * INSTALLING: give them back with ram_unclaim()).
 */
int ram_install_claimed(struct ram *ram, uint64_t pg, void *pages, uint64_t n, enum ram_arrival by,
			const uint64_t *zeros);

#endif /* RAM_RECORD_H */
