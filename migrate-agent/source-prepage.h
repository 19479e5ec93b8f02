/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Pre-paging after a demand fault (source side): which pages the pusher
 * sends next, from the history of the faults.  The urgent thread feeds
 * every requested page in (src_prepage_fault(), under s->hint.lock); the
 * window it returns rides with the hint to the pusher, which walks it.
 *
 * Fixed policy (mig_opts.prepage_fixed): the `prepage` pages after the
 * fault, as before.  Adaptive policy (the default):
 *   followed  the fault lies on the last window's path, or within one base
 *             window past its end: the accessor walks that way, the window
 *             doubles (up to PREPAGE_MAX);
 *   stride    the last three faults are at one constant distance d
 *             (1 < |d| <= the last window: a step-1 window did not save
 *             them): the window walks d at a time from the fault, and
 *             grows as "followed" while faults stay on its path;
 *   random    anything else: the window halves (down to base / 8), since
 *             pre-paged pages nobody touches only delay the push's order.
 * Self-contained (no struct src): tests/host/migrate-prepage.sh checks it
 * through mig-prepage-check.
 */
#ifndef MIGRATE_SOURCE_PREPAGE_H
#define MIGRATE_SOURCE_PREPAGE_H

#include <stdint.h>

#define PREPAGE_MAX 1024u /* 4 MiB: about 2 ms of push at 2 GiB/s */

/* A window: count pages from start, step apart (step may be negative). */
struct src_window {
	uint64_t start;
	int64_t step;
	uint32_t count;
};

struct src_prepage {
	uint32_t base, min; /* the configured window; the adaptive floor */
	int adaptive;
	/* history */
	int have_last;
	uint64_t last;	     /* the previous fault's page */
	int64_t dist;	     /* its distance from the one before */
	uint32_t win;	     /* the adaptive window's length now */
	struct src_window w; /* the last window given out */
	/* counters (the metrics' "prepage" object) */
	uint64_t windows, followed, late, passed, strided, shrunk, max_win;
};

void src_prepage_init(struct src_prepage *p, uint32_t base, int adaptive);

/*
 * A request for page (sent: the push had already claimed it) out of
 * nr_pages: the window to pre-page after it.  Called for every requested
 * page, so the history sees faults on pages in flight too; the caller
 * walks the window only for pages it served itself.
 */
struct src_window src_prepage_fault(struct src_prepage *p, uint64_t page, int sent,
				    uint64_t nr_pages);

#endif /* MIGRATE_SOURCE_PREPAGE_H */
