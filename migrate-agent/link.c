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
 * Is the link broken at now (under hold())?  Nothing heard from the peer
 * for idle_ms: a stalled peer (its kernel still acknowledges, so TCP waits
 * for ever) or a half-open link; else the side's own check.
 */
static int link_broken(struct mig_link_watch *w, uint64_t now, char *why, size_t len)
{
	uint64_t heard = w->ops->heard(w->ctx);

	if (now > heard && now - heard > (uint64_t)w->idle_ms * 1000000ull) {
		snprintf(why, len, "%s silent for %d ms: stalled, or the link is down", w->peer,
			 w->idle_ms);
		return 1;
	}
	return w->ops->stalled && w->ops->stalled(w->ctx, now, why, len);
}

/* One look at the link: a PING if it was quiet, a break if it is broken. */
static void look_at_link(struct mig_link_watch *w)
{
	char why[160];
	struct mig_conn *urg = w->ops->hold(w->ctx);
	if (!urg)
		return;
	uint64_t now = now_ns();
	mig_conn_ping_if_quiet(urg, now, w->heartbeat_ns);
	int broken = link_broken(w, now, why, sizeof(why));
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
