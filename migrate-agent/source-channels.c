// SPDX-License-Identifier: GPL-2.0
/*
 * The source's bulk channels (--channels N, wire.h "Channels"): channel 0,
 * s->links.bulk[0], carries precopy, PRECOPY_DIRTY, DONE(0) and its share
 * of the push, channels 1.. their shares; in postcopy each has its own push thread
 * and its own share of RAM, and a demand hint goes to the thread whose
 * share holds the faulted page.  A break on any breaks the link.
 */
#include <stdlib.h>

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

struct push_arg {
	struct src *s;
	unsigned k;
};

static void *push_thread(void *arg)
{
	struct push_arg *a = arg;
	src_push_channel(a->s, a->k);
	free(a);
	return NULL;
}

/*
 * One push thread per bulk channel, into t[]: how many started.  A thread
 * that cannot start breaks the link (the recovery starts them again).
 */
unsigned src_start_push(struct src *s, pthread_t *t)
{
	unsigned k;
	for (k = 0; k < s->links.nr_bulk; k++) {
		struct push_arg *a = malloc(sizeof(*a));
		if (a)
			*a = (struct push_arg){ .s = s, .k = k };
		if (!a || pthread_create(&t[k], NULL, push_thread, a)) {
			free(a);
			src_set_break(s, 0, "cannot start a push thread");
			break;
		}
	}
	return k;
}
