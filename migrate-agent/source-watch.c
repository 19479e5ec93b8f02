// SPDX-License-Identifier: GPL-2.0
/*
 * Liveness at the source: its side of the link watchdog (link.h).  The
 * watchdog runs from the first connection to src_free(), and touches the
 * connections only while the link is up (link_lock: source.h).
 */
#include "source.h"

/*
 * Whether the watchdog may use the connections: down before they are
 * closed or set up again (this waits for a PING in progress).
 */
void src_set_link_up(struct src *s, int up)
{
	mig_lock(&s->live.lock, MIG_RANK_SRC_LINK);
	s->live.up = up;
	mig_unlock(&s->live.lock);
}

/* The urgent channel, with link_lock held, while the link is up. */
static struct mig_conn *hold_link(void *ctx)
{
	struct src *s = ctx;
	mig_lock(&s->live.lock, MIG_RANK_SRC_LINK);
	if (s->live.up)
		return s->links.urg;
	mig_unlock(&s->live.lock);
	return NULL;
}

/*
 * Heard from the destination, or could send to it: a destination that
 * reads the bulk channel is alive, even when the urgent one has nothing to
 * say.  (The wait for COMPLETE after the last page has no progress
 * deadline of its own: the source cannot tell a slow link, whose pages are
 * still on their way, from a destination that withholds COMPLETE; by then
 * the VM runs there, and the source only holds memory.  docs/security.md.)
 */
static uint64_t heard_link(void *ctx)
{
	struct src *s = ctx;
	uint64_t heard = mig_conn_heard(s->links.urg);
	uint64_t sent = mig_links_bulk_last_tx(&s->links);
	return sent > heard ? sent : heard;
}

/*
 * A break is reported before link_lock goes, so that a recovery, which
 * takes link_lock first (src_set_link_up(s, 0)), never sees it late.
 * Before the switch-over it fails the migration (the VM goes on here);
 * after it, the usual recovery runs within recover_ms.
 */
static void release_link(void *ctx, const char *why)
{
	struct src *s = ctx;
	if (why) {
		s->live.up = 0;
		src_set_break(s, 0, why);
	}
	mig_unlock(&s->live.lock);
}

/*
 * The caller's migrate-pause (mig_ctl_pause()), taken here so that it
 * breaks the link as a silence does: at the next heartbeat, under hold().
 */
static int pause_asked(void *ctx, uint64_t now, uint64_t limit_ns, char *why, size_t len)
{
	struct src *s = ctx;
	(void)now;
	(void)limit_ns;
	if (!s->o->ctl || !__atomic_exchange_n(&s->o->ctl->pause, 0, __ATOMIC_ACQ_REL))
		return 0;
	snprintf(why, len, "paused by migrate-pause");
	return 1;
}

/*
 * QEMU's mbps and pages-per-second are rates over a recent window (its
 * 100 ms iteration), not averages since the start: here bytes and pages
 * sent over the last second at least, sampled by the watchdog, which
 * looks at least every second (link.c) whether or not anything is sent,
 * so an idle link reads 0.  Under hold(): the connections' byte counts
 * are not being reset by a recovery.
 */
#define SRC_RATE_WINDOW_NS 1000000000ull

static void rate_tick(void *ctx, uint64_t now)
{
	struct src *s = ctx;
	struct mig_ctl *c = s->o->ctl;
	uint64_t bytes = src_tx_bytes(s), dt = now - s->rate.rate_t;
	uint64_t pages = __atomic_load_n(&s->counts.pages_normal, __ATOMIC_RELAXED) +
			 __atomic_load_n(&s->counts.pages_zero, __ATOMIC_RELAXED);

	if (!c || (s->rate.rate_t && dt < SRC_RATE_WINDOW_NS))
		return;
	if (s->rate.rate_t && bytes >= s->rate.rate_bytes0) {
		src_ctl_put(&c->rate_bytes,
			    (uint64_t)((double)(bytes - s->rate.rate_bytes0) * 1e9 / (double)dt));
		src_ctl_put(&c->rate_pages,
			    (uint64_t)((double)(pages - s->rate.rate_pages0) * 1e9 / (double)dt));
	}
	s->rate.rate_t = now;
	s->rate.rate_bytes0 = bytes;
	s->rate.rate_pages0 = pages;
}

static const struct mig_link_ops src_link_ops = {
	.hold = hold_link,
	.heard = heard_link,
	.stalled = pause_asked,
	.release = release_link,
	.tick = rate_tick,
};

/* The watchdog, once a pair is connected (a thread that cannot start: none). */
void src_start_watch(struct src *s)
{
	src_set_link_up(s, 1);
	mig_link_watch_start(&s->live.watch, &src_link_ops, s, "destination", s->o->idle_ms);
}

/* Stop and join the watchdog (src_free()). */
void src_stop_watch(struct src *s)
{
	mig_link_watch_stop(&s->live.watch);
}
