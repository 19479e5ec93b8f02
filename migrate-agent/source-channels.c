// SPDX-License-Identifier: GPL-2.0
/*
 * The source's bulk channels (--channels N, wire.h "Channels"): channel 0,
 * s->links.bulk[0], carries precopy, PRECOPY_DIRTY, DONE(0) and its share
 * of the push, channels 1.. their shares; in postcopy each has its own push thread
 * and its own share of RAM, and a demand hint goes to the thread whose
 * share holds the faulted page.  A break on any breaks the link.
 */

#include "source.h"

/* Bulk channel k's share of RAM: pages [*lo, *hi). */
void src_share(const struct src *s, unsigned k, uint64_t *lo, uint64_t *hi)
{
	*lo = k * s->nr_pages / s->links.nr_bulk;
	*hi = (k + 1) * s->nr_pages / s->links.nr_bulk;
}

/* The bulk channel whose share holds page i. */
unsigned src_owner(const struct src *s, uint64_t i)
{
	unsigned k = s->links.nr_bulk - 1;
	while (k && k * s->nr_pages / s->links.nr_bulk > i)
		k--;
	return k;
}
