// SPDX-License-Identifier: GPL-2.0
/*
 * Liveness at the source: the watchdog thread sends heartbeats and declares
 * the link broken when the destination goes silent.  It runs from the first
 * connection to src_free(), and touches the connections only while the link
 * is up (link_lock: source.h).
 */
#include <time.h>

#include "source.h"

/*
 * Whether the watchdog may use the connections: down before they are
 * closed or set up again (this waits for a PING in progress).
 */
void src_set_link_up(struct src *s, int up)
{
	mig_lock(&s->link_lock, MIG_RANK_SRC_LINK);
	s->link_up = up;
	mig_unlock(&s->link_lock);
}

/*
 * Is the link stalled at now (under link_lock, link up)?  Nothing came from
 * the destination and nothing could be sent to it for idle_ms.  (The wait
 * for COMPLETE after the last page has no progress deadline of its own:
 * the source cannot tell a slow link, whose pages are still on their way,
 * from a destination that withholds COMPLETE; by then the VM runs there,
 * and the source only holds memory.  docs/security.md.)
 */
static int link_stalled(struct src *s, uint64_t now, char *why, size_t len)
{
	uint64_t idle = (uint64_t)s->o->idle_ms * 1000000ull;
	uint64_t heard = mig_conn_heard(&s->urg);
	uint64_t sent = src_bulk_last_tx(s);

	if (sent > heard)
		heard = sent;
	if (now > heard && now - heard > idle) {
		snprintf(why, len, "destination silent for %d ms: stalled, or the link is down",
			 s->o->idle_ms);
		return 1;
	}
	return 0;
}

/*
 * The watchdog, for the whole migration: every heartbeat interval
 * (idle_ms / 4, at most 1 s) a PING on the urgent channel if nothing else
 * went out; and when nothing came from the destination and nothing could be
 * sent to it for idle_ms, the link is broken: a stalled destination (its
 * kernel still acknowledges, so TCP waits for ever) or a half-open link.
 * Before the switch-over that fails the migration (the VM goes on here);
 * after it, the usual recovery runs within recover_ms.
 */
static void *watch_thread(void *arg)
{
	struct src *s = arg;
	uint64_t ms = (uint64_t)s->o->idle_ms / 4;
	uint64_t hb = (ms < 10 ? 10 : ms > 1000 ? 1000 : ms) * 1000000ull;
	mig_lock(&s->link_lock, MIG_RANK_SRC_LINK);
	while (!s->watch_stop) {
		uint64_t t = mig_now_ns() + hb;
		struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull),
				       .tv_nsec = (long)(t % 1000000000ull) };
		pthread_cond_timedwait(&s->watch_cond, &s->link_lock, &ts);
		if (s->watch_stop || !s->link_up)
			continue;
		uint64_t now = mig_now_ns();
		mig_conn_ping_if_quiet(&s->urg, now, hb);
		char why[160];
		if (link_stalled(s, now, why, sizeof(why))) {
			s->link_up = 0;
			src_set_break(s, 0, why);
		}
	}
	mig_unlock(&s->link_lock);
	return NULL;
}

/* The watchdog, once a pair is connected (a thread that cannot start: none). */
void src_start_watch(struct src *s)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->watch_cond, &ca);
	pthread_condattr_destroy(&ca);
	src_set_link_up(s, 1);
	s->watch_on = pthread_create(&s->watch, NULL, watch_thread, s) == 0;
}

/* Stop and join the watchdog (src_free()). */
void src_stop_watch(struct src *s)
{
	if (!s->watch_on)
		return;
	mig_lock(&s->link_lock, MIG_RANK_SRC_LINK);
	s->watch_stop = 1;
	pthread_cond_signal(&s->watch_cond);
	mig_unlock(&s->link_lock);
	pthread_join(s->watch, NULL);
	pthread_cond_destroy(&s->watch_cond);
	s->watch_on = 0;
}
