// SPDX-License-Identifier: GPL-2.0
/*
 * Liveness at the destination: the watchdog thread sends heartbeats and
 * declares the link broken when the source goes silent or makes no
 * progress.
 */
#include "dest.h"

/*
 * The watchdog: every heartbeat interval (idle_ms / 4, at most 1 s) it
 * sends PING on the urgent channel if nothing else went out meanwhile, and
 * it declares the link broken when nothing at all came from the source for
 * idle_ms: a stalled source (SIGSTOP, a hung host) or a half-open link,
 * which TCP alone would not notice for minutes.  The break then takes the
 * usual way: recovery, within recover_ms, or a clear failure.
 */
static uint64_t heartbeat_ns(const struct mig_opts *o)
{
	uint64_t ms = (uint64_t)o->idle_ms / 4;
	return (ms < 10 ? 10 : ms > 1000 ? 1000 : ms) * 1000000ull;
}

/* The oldest fault still waiting for its page (mig_now_ns()), 0 when none waits. */
static uint64_t oldest_request(struct mig_dest *d)
{
	uint64_t oldest = 0;
	if (!__atomic_load_n(&d->outstanding, __ATOMIC_ACQUIRE))
		return 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint64_t w = ram_page_word(d->ram, i), t = ram_word_time_ns(d->ram, w);
		if (ram_word_state(w) == RAM_PAGE_REQUESTED && (!oldest || t < oldest))
			oldest = t;
	}
	return oldest;
}

/*
 * One look at the link (under req_lock): 1, with why, when the source has
 * gone silent or makes no progress.  Heartbeats keep a link from being
 * silent; only frames with work in them are progress: while pages are
 * missing, or the state has not come, the source must keep sending them,
 * and it must answer every page request, each within idle_ms.
 */
static int watch_link(struct mig_dest *d, uint64_t now, uint64_t hb, char *why, size_t len)
{
	uint64_t idle = (uint64_t)d->o.idle_ms * 1000000ull, heard, work, req;
	if (!d->link_ok || !d->urg || !d->bulk)
		return 0;
	mig_conn_ping_if_quiet(d->urg, now, hb);
	heard = mig_conn_heard(d->urg);
	if (mig_conn_heard(d->bulk) > heard)
		heard = mig_conn_heard(d->bulk);
	work = mig_conn_progress(d->urg);
	if (mig_conn_progress(d->bulk) > work)
		work = mig_conn_progress(d->bulk);
	dest_more_heard(d, &heard, &work);
	req = oldest_request(d);
	if (req && req < d->t_link_ns)
		req = d->t_link_ns; /* requests repeated on a new link start anew */
	if (now > heard && now - heard > idle)
		snprintf(why, len, "source silent for %d ms: stalled, or the link is down",
			 d->o.idle_ms);
	else if (req && now > req && now - req > idle)
		snprintf(why, len, "source left a page request unanswered for %d ms", d->o.idle_ms);
	else if (ram_nr_present(d->ram) < d->nr_pages && now > work && now - work > idle)
		snprintf(why, len, "source sent nothing but heartbeats for %d ms", d->o.idle_ms);
	else
		return 0;
	return 1;
}

void *dest_watch_thread(void *arg)
{
	struct mig_dest *d = arg;
	uint64_t hb = heartbeat_ns(&d->o);
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (!d->stop && !d->failed && !d->complete_sent) {
		struct timespec ts = dest_mono_in_ms((unsigned)(hb / 1000000));
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		if (d->broken || d->stop)
			continue;
		mig_unlock(&d->lock);
		char why[160];
		mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
		int silent = watch_link(d, mig_now_ns(), hb, why, sizeof(why));
		mig_unlock(&d->req_lock);
		mig_lock(&d->lock, MIG_RANK_DEST);
		if (silent && !d->broken && !d->failed) {
			snprintf(d->why, sizeof(d->why), "%s", why);
			d->broken = 1;
			pthread_cond_broadcast(&d->cond);
			mig_unlock(&d->lock);
			dest_kick_links(d);
			mig_lock(&d->lock, MIG_RANK_DEST);
		}
	}
	mig_unlock(&d->lock);
	return NULL;
}
