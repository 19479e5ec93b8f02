// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's link (wire.h "Channels"): the urgent channel d->links.urg and
 * the bulk channels d->links.bulk[0 .. nr_bulk - 1], the source's --channels.
 * Each bulk channel has its own receiver thread; they install through the
 * one page record (a claim makes concurrent installs of one page safe) with
 * a run buffer each.  Channels 1.. carry postcopy pages only: their
 * receivers start reading once bulk channel 0 delivered DONE(0), so that no
 * postcopy page is taken for one sent before the switch-over.
 */
#include <stdlib.h>

#include "dest.h"

struct rx_arg {
	struct mig_dest *d;
	struct mig_conn *c;
	int after_done0; /* channels 1..: read only once DONE(0) came on channel 0 */
};

/* Wait for DONE(0) on bulk channel 0: 1 when it came, 0 when the link ended first. */
static int wait_switch_over(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (!dest_done0(d) && !dest_phase_broken(d->phase) && d->phase != DEST_FAILED &&
	       !dest_stopping(d)) {
		struct timespec ts = dest_mono_in_ms(100);
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	}
	int go = dest_done0(d) && d->phase != DEST_FAILED && !dest_stopping(d);
	mig_unlock(&d->lock);
	return go;
}

static void *rx_thread(void *arg)
{
	struct rx_arg *a = arg;
	if (!a->after_done0 || wait_switch_over(a->d))
		dest_rx_loop(a->d, a->c);
	mig_wire_thread_cleanup();
	free(a);
	return NULL;
}

/* A receiver thread for each bulk channel of the link. */
void dest_start_receivers(struct mig_dest *d)
{
	for (unsigned k = 0; k < d->links.nr_bulk; k++) {
		struct rx_arg *a = malloc(sizeof(*a));
		d->workers.rx_on[k] = 0;
		if (a) {
			*a = (struct rx_arg){ .d = d, .c = d->links.bulk[k], .after_done0 = k > 0 };
			d->workers.rx_on[k] =
			    pthread_create(&d->workers.rx[k], NULL, rx_thread, a) == 0;
		}
		if (!d->workers.rx_on[k]) {
			free(a);
			dest_fail(d, "%s channel: cannot start its receiver thread",
				  mig_bulk_name(k));
		}
	}
}

/* Wait for every bulk channel's receiver (the links were kicked). */
void dest_join_receivers(struct mig_dest *d)
{
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++) {
		if (d->workers.rx_on[k])
			pthread_join(d->workers.rx[k], NULL);
		d->workers.rx_on[k] = 0;
	}
}
