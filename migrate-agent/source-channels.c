// SPDX-License-Identifier: GPL-2.0
/*
 * The source's bulk channels (--channels N, wire.h "Channels"): channel 0
 * is s->bulk (precopy, PRECOPY_DIRTY, DONE(0) and its share of the push),
 * channels 1.. are s->bulk_more; in postcopy each has its own push thread
 * and its own share of RAM, and a demand hint goes to the thread whose
 * share holds the faulted page.  A break on any breaks the link.
 */
#include <stdlib.h>

#include "source.h"

struct mig_conn *src_bulk(struct src *s, unsigned k)
{
	return k ? &s->bulk_more[k - 1] : &s->bulk;
}

/* Bulk channel k's share of RAM: pages [*lo, *hi). */
void src_share(const struct src *s, unsigned k, uint64_t *lo, uint64_t *hi)
{
	*lo = k * s->nr_pages / s->nr_bulk;
	*hi = (k + 1) * s->nr_pages / s->nr_bulk;
}

/* The bulk channel whose share holds page i. */
unsigned src_owner(const struct src *s, uint64_t i)
{
	unsigned k = s->nr_bulk - 1;
	while (k && k * s->nr_pages / s->nr_bulk > i)
		k--;
	return k;
}

void src_kick_bulk(struct src *s)
{
	for (unsigned k = 0; k < s->nr_bulk; k++)
		mig_conn_kick(src_bulk(s, k));
}

void src_close_bulk(struct src *s)
{
	for (unsigned k = 0; k < s->nr_bulk; k++)
		mig_conn_close(src_bulk(s, k));
}

/* Bytes (all, or frame headers only) the bulk channels sent so far. */
uint64_t src_bulk_tx(struct src *s, int headers)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < s->nr_bulk; k++) {
		struct mig_conn *c = src_bulk(s, k);
		n += __atomic_load_n(headers ? &c->tx_hdr : &c->tx_bytes, __ATOMIC_RELAXED);
	}
	return n;
}

/* When a bulk channel last sent something (the watchdog's "could send"). */
uint64_t src_bulk_last_tx(struct src *s)
{
	uint64_t t = 0;
	for (unsigned k = 0; k < s->nr_bulk; k++) {
		uint64_t c = __atomic_load_n(&src_bulk(s, k)->last_tx_ns, __ATOMIC_RELAXED);
		if (c > t)
			t = c;
	}
	return t;
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
	for (k = 0; k < s->nr_bulk; k++) {
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
