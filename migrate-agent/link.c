// SPDX-License-Identifier: GPL-2.0
/*
 * The link watchdog of both sides (link.h): heartbeats out, silence in.
 * A PING proves the peer's socket open, nothing more; whether the peer
 * does its job is the side's stalled() check.
 */
#include <stdio.h>
#include <time.h>

#include "internal.h"
#include "link.h"
#include "lock-rank.h"

/*
 * The heartbeat interval: a quarter of idle_ms, so that a healthy but idle
 * link is heard from several times before it counts as silent; at least
 * 10 ms (no busy loop on a tiny idle_ms), at most 1 s.
 */
static uint64_t heartbeat_ns(int idle_ms)
{
	uint64_t ms = (uint64_t)idle_ms / 4;
	return (ms < 10 ? 10 : ms > 1000 ? 1000 : ms) * 1000000ull;
}

/*
 * The limit for a silence or a wait now: idle_ms, stretched to twice the
 * longest silence the peer was heard again after (link.h).  heard: when
 * the peer was last heard from.
 */
static uint64_t silence_limit(struct mig_link_watch *w, uint64_t heard)
{
	uint64_t idle = (uint64_t)w->idle_ms * 1000000ull, limit;

	if (w->last_heard && heard > w->last_heard && heard - w->last_heard > w->longest_gap)
		w->longest_gap = heard - w->last_heard;
	w->last_heard = heard;
	limit = 2 * w->longest_gap;
	if (limit < idle)
		return idle;
	return limit > MIG_LINK_STRETCH * idle ? MIG_LINK_STRETCH * idle : limit;
}

/*
 * Is the link broken at now (under hold())?  Nothing heard from the peer
 * for the limit: a stalled peer (its kernel still acknowledges, so TCP
 * waits for ever) or a half-open link; else the side's own check.
 */
static int link_broken(struct mig_link_watch *w, uint64_t now, char *why, size_t len)
{
	uint64_t heard = w->ops->heard(w->ctx), limit = silence_limit(w, heard);

	if (now > heard && now - heard > limit) {
		snprintf(why, len, "%s silent for %llu ms: stalled, or the link is down", w->peer,
			 (unsigned long long)(limit / 1000000));
		return 1;
	}
	return w->ops->stalled && w->ops->stalled(w->ctx, now, limit, why, len);
}

/*
 * One look at the link: a PING if it was quiet, a break if it is broken;
 * no verdict from a look that comes late (link.h).
 */
static void look_at_link(struct mig_link_watch *w)
{
	char why[160];
	uint64_t now = now_ns();
	int late = w->last_look && now - w->last_look > 3 * w->heartbeat_ns;
	w->last_look = now;
	struct mig_conn *urg = w->ops->hold(w->ctx);
	if (!urg)
		return;
	mig_conn_ping_if_quiet(urg, now, w->heartbeat_ns);
	if (w->ops->tick)
		w->ops->tick(w->ctx, now);
	int broken = !late && link_broken(w, now, why, sizeof(why));
	w->ops->release(w->ctx, broken ? why : NULL);
}

/* The watchdog: a look every heartbeat interval until stopped. */
static void *watch_thread(void *arg)
{
	struct mig_link_watch *w = arg;
	mig_lock(&w->lock, MIG_RANK_LINK_WATCH);
	while (!w->stop) {
		struct timespec ts = mig_mono_ts(now_ns() + w->heartbeat_ns);
		pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		if (w->stop)
			break;
		mig_unlock(&w->lock);
		look_at_link(w);
		mig_lock(&w->lock, MIG_RANK_LINK_WATCH);
	}
	mig_unlock(&w->lock);
	return NULL;
}

int mig_link_watch_start(struct mig_link_watch *w, const struct mig_link_ops *ops, void *ctx,
			 const char *peer, int idle_ms)
{
	pthread_condattr_t ca;

	*w = (struct mig_link_watch){ .ops = ops,
				      .ctx = ctx,
				      .peer = peer,
				      .idle_ms = idle_ms,
				      .heartbeat_ns = heartbeat_ns(idle_ms) };
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	int r = pthread_create(&w->thread, NULL, watch_thread, w);
	if (r) {
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
		return -r;
	}
	w->on = 1;
	return 0;
}

void mig_link_watch_stop(struct mig_link_watch *w)
{
	if (!w->on)
		return;
	mig_lock(&w->lock, MIG_RANK_LINK_WATCH);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	mig_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	w->on = 0;
}
