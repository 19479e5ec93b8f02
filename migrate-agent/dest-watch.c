// SPDX-License-Identifier: GPL-2.0
/*
 * Liveness at the destination: its side of the link watchdog (link.h).
 * Besides a silent source (SIGSTOP, a hung host, a half-open link, which
 * TCP alone would not notice for minutes), one that makes no progress
 * breaks the link.  The break then takes the usual way: recovery, within
 * recover_ms, or a clear failure.
 */
#include "dest.h"

/*
 * The urgent channel, with req_lock held, while there is a live link to
 * watch: not before or after the migration, nor while a break is being
 * recovered.  (d->lock and req_lock are never held together: dest.h.)
 */
static struct mig_conn *hold_link(void *ctx)
{
	struct mig_dest *d = ctx;
	enum dest_phase ph = dest_phase(d);
	if (dest_phase_broken(ph) || dest_phase_over(ph) || dest_stopping(d))
		return NULL;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	if (d->link_ok && d->links.urg && d->links.bulk[0])
		return d->links.urg;
	mig_unlock(&d->req_lock);
	return NULL;
}

/* Heard from the source, on any channel (heartbeats count). */
static uint64_t heard_link(void *ctx)
{
	struct mig_dest *d = ctx;
	uint64_t heard = mig_conn_heard(d->links.urg), work = 0;
	mig_links_bulk_heard(&d->links, &heard, &work);
	return heard;
}

/* The oldest fault still waiting for its page (now_ns()), 0 when none waits. */
static uint64_t oldest_request(struct mig_dest *d)
{
	uint64_t oldest = 0;
	if (!d->ram || !ram_nr_requested(d->ram)) /* the record's count: skip the scan */
		return 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint64_t w = ram_page_word(d->ram, i), t = ram_word_time_ns(d->ram, w);
		if (ram_word_state(w) == RAM_PAGE_REQUESTED && (!oldest || t < oldest))
			oldest = t;
	}
	return oldest;
}

/*
 * Whether the source makes no progress (under req_lock).  Heartbeats keep
 * a link from being silent; only frames with work in them are progress:
 * while the source owes pages it must keep sending them, and it must
 * answer every page request, each within the limit `idle` (idle_ms, or
 * more once the source has shown it can be slower and alive: link.h).
 * Pages staged here (or being installed) are owed by no one but this
 * side: once the source has sent the rest it has nothing to send, however
 * long the stager takes (in a TCG node it took over 10 s, and the link was
 * broken for it).  The count of owed pages is a scan, so it is asked
 * last, only after the limit without work.
 */
static int no_progress(void *ctx, uint64_t now, uint64_t idle, char *why, size_t len)
{
	struct mig_dest *d = ctx;
	uint64_t work, req, heard = 0;
	work = mig_conn_progress(d->links.urg);
	mig_links_bulk_heard(&d->links, &heard, &work);
	req = oldest_request(d);
	if (req && req < d->times.t_link_ns)
		req = d->times.t_link_ns; /* requests repeated on a new link start anew */
	if (req && now > req && now - req > idle)
		snprintf(why, len, "source left a page request unanswered for %llu ms",
			 (unsigned long long)(idle / 1000000));
	else if (ram_nr_present(d->ram) < d->nr_pages && now > work && now - work > idle &&
		 dest_pages_owed(d))
		snprintf(why, len, "source sent nothing but heartbeats for %llu ms",
			 (unsigned long long)(idle / 1000000));
	else
		return 0;
	return 1;
}

/* A break is reported after req_lock goes: d->lock is never taken under it. */
static void release_link(void *ctx, const char *why)
{
	struct mig_dest *d = ctx;
	mig_unlock(&d->req_lock);
	if (!why)
		return;
	mig_lock(&d->lock, MIG_RANK_DEST);
	bool first = dest_phase_break(d, why);
	mig_unlock(&d->lock);
	if (first)
		dest_kick_links(d);
}

static const struct mig_link_ops dest_link_ops = {
	.hold = hold_link,
	.heard = heard_link,
	.stalled = no_progress,
	.release = release_link,
};

int dest_start_watch(struct mig_dest *d)
{
	return mig_link_watch_start(&d->watch, &dest_link_ops, d, "source", d->o.idle_ms);
}
