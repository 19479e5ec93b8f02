// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's extra bulk channels (the source's --channels, wire.h
 * "Channels"): d->bulk is bulk channel 0, d->bulk_more[k - 1] channel k.
 * Each has its own receiver thread; they install through the one page
 * record (a claim makes concurrent installs of one page safe) with a run
 * buffer each.  Channels 1.. carry postcopy pages only: their receivers
 * start reading once bulk channel 0 delivered DONE(0), so that no postcopy
 * page is taken for one sent before the switch-over.
 */
#include <stdlib.h>

#include "dest.h"

void dest_free_conns(struct mig_conn **c, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		dest_free_conn(c[k]);
		c[k] = NULL;
	}
}

/* Channels 1.. of a new link (under req_lock; the old ones were retired). */
void dest_more_set(struct mig_dest *d, struct mig_conn **more, unsigned nr_bulk)
{
	d->nr_bulk = nr_bulk;
	for (unsigned k = 0; k + 1 < nr_bulk; k++)
		d->bulk_more[k] = more[k];
}

/* Under req_lock. */
void dest_more_kick(struct mig_dest *d)
{
	for (unsigned k = 0; k + 1 < d->nr_bulk; k++)
		if (d->bulk_more[k])
			mig_conn_kick(d->bulk_more[k]);
}

/* Their bytes into the totals, then closed (under req_lock, receivers joined). */
void dest_more_free(struct mig_dest *d)
{
	for (unsigned k = 0; k + 1 < d->nr_bulk; k++)
		if (d->bulk_more[k])
			d->bytes_rx_prev += d->bulk_more[k]->rx_bytes;
	dest_free_conns(d->bulk_more, MIG_MAX_CHANNELS - 1);
}

/* The latest frame heard and the latest progress on channels 1.. (the watchdog). */
void dest_more_heard(struct mig_dest *d, uint64_t *heard, uint64_t *work)
{
	for (unsigned k = 0; k + 1 < d->nr_bulk; k++) {
		struct mig_conn *c = d->bulk_more[k];
		if (c && mig_conn_heard(c) > *heard)
			*heard = mig_conn_heard(c);
		if (c && mig_conn_progress(c) > *work)
			*work = mig_conn_progress(c);
	}
}

struct more_arg {
	struct mig_dest *d;
	struct mig_conn *c;
};

/* Wait for DONE(0) on bulk channel 0: 1 when it came, 0 when the link ended first. */
static int wait_switch_over(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (!d->phase0_done && !d->broken && !d->failed && !d->stop) {
		struct timespec ts = dest_mono_in_ms(100);
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	}
	int go = d->phase0_done && !d->failed && !d->stop;
	mig_unlock(&d->lock);
	return go;
}

static void *more_thread(void *arg)
{
	struct more_arg *a = arg;
	if (wait_switch_over(a->d))
		dest_rx_loop(a->d, a->c);
	mig_wire_thread_cleanup();
	free(a);
	return NULL;
}

/* A receiver thread for each of channels 1.. of the link. */
void dest_more_start_rx(struct mig_dest *d)
{
	for (unsigned k = 0; k + 1 < d->nr_bulk; k++) {
		struct more_arg *a = malloc(sizeof(*a));
		d->rx_more_on[k] = 0;
		if (a) {
			*a = (struct more_arg){ .d = d, .c = d->bulk_more[k] };
			d->rx_more_on[k] =
			    pthread_create(&d->rx_more[k], NULL, more_thread, a) == 0;
		}
		if (!d->rx_more_on[k]) {
			free(a);
			dest_fail(d, "%s channel: cannot start its receiver thread",
				  mig_bulk_name(k + 1));
		}
	}
}

/* Wait for the receivers of channels 1.. (the links were kicked). */
void dest_more_join(struct mig_dest *d)
{
	for (unsigned k = 0; k < MIG_MAX_CHANNELS - 1; k++) {
		if (d->rx_more_on[k])
			pthread_join(d->rx_more[k], NULL);
		d->rx_more_on[k] = 0;
	}
}
