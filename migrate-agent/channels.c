// SPDX-License-Identifier: GPL-2.0
/*
 * A link's channels for both roles (channels.h): the one struct mig_links
 * and what either role does over all of its channels.  A missing channel
 * (NULL: the destination's between links) is skipped.
 */
#include <errno.h>
#include <stdlib.h>

#include "channels.h"

int mig_links_alloc(struct mig_links *l, unsigned nr_bulk)
{
	*l = (struct mig_links){ .nr_bulk = nr_bulk };
	/* One block: channel 0 is the urgent one, then bulk channel k at k + 1. */
	struct mig_conn *c = calloc(1 + nr_bulk, sizeof(*c));
	if (!c)
		return -ENOMEM;
	l->urg = &c[0];
	l->urg->fd = -1;
	for (unsigned k = 0; k < nr_bulk; k++) {
		l->bulk[k] = &c[k + 1];
		l->bulk[k]->fd = -1;
	}
	return 0;
}

void mig_links_free(struct mig_links *l)
{
	if (!l->urg)
		return;
	mig_conn_close(l->urg);
	mig_links_close_bulk(l);
	free(l->urg); /* the block's start */
	*l = (struct mig_links){ 0 };
}

bool mig_links_complete(const struct mig_links *l)
{
	if (!l->urg || !l->nr_bulk)
		return false;
	for (unsigned k = 0; k < l->nr_bulk; k++)
		if (!l->bulk[k])
			return false;
	return true;
}

void mig_links_kick_bulk(const struct mig_links *l)
{
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++)
		if (l->bulk[k])
			mig_conn_kick(l->bulk[k]);
}

void mig_links_kick(const struct mig_links *l)
{
	if (l->urg)
		mig_conn_kick(l->urg);
	mig_links_kick_bulk(l);
}

void mig_links_close_bulk(const struct mig_links *l)
{
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++)
		if (l->bulk[k])
			mig_conn_close(l->bulk[k]);
}

uint64_t mig_links_rx_bytes(const struct mig_links *l)
{
	uint64_t n = l->urg ? l->urg->rx_bytes : 0;
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++)
		n += l->bulk[k] ? l->bulk[k]->rx_bytes : 0;
	return n;
}

uint64_t mig_links_bulk_tx(const struct mig_links *l, int headers)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++) {
		struct mig_conn *c = l->bulk[k];
		if (c)
			n += __atomic_load_n(headers ? &c->tx_hdr : &c->tx_bytes, __ATOMIC_RELAXED);
	}
	return n;
}

uint64_t mig_links_bulk_last_tx(const struct mig_links *l)
{
	uint64_t t = 0;
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++) {
		uint64_t c =
		    l->bulk[k] ? __atomic_load_n(&l->bulk[k]->last_tx_ns, __ATOMIC_RELAXED) : 0;
		if (c > t)
			t = c;
	}
	return t;
}

void mig_links_bulk_heard(const struct mig_links *l, uint64_t *heard, uint64_t *work)
{
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++) {
		struct mig_conn *c = l->bulk[k];
		if (c && mig_conn_heard(c) > *heard)
			*heard = mig_conn_heard(c);
		if (c && mig_conn_progress(c) > *work)
			*work = mig_conn_progress(c);
	}
}
