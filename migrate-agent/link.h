/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Liveness of a link, for both sides (docs/migration.md, "Deadlines and
 * liveness"): a watchdog thread that, every heartbeat interval (idle_ms /
 * 4, between 10 ms and 1 s), sends PING on the urgent channel when it was
 * quiet for that long (migrate/wire.h: PING), and declares the link broken
 * when nothing was heard from the peer for idle_ms, or when the side's own
 * extra check says it stalls.  What "the link", "heard" and "a break" are
 * is each side's: a small ops struct (source-watch.c, dest-watch.c).
 *
 * One look at the link, every interval:
 *   urg = hold(ctx)              NULL: not now (down, broken, finished)
 *   PING on urg if it was quiet; tick(ctx) if the side has one
 *   silent for idle_ms?  or  stalled(ctx)?  -> why
 *   release(ctx, why or NULL)    why: the side reports the break
 * hold() takes the side's lock that guards its connections and keeps it
 * until release(): the PING is sent under it, and a side that tears the
 * link down takes that lock first, so it waits for a PING in progress.
 * release() reports the break where the side's locking order wants it
 * (the source before it lets go, the destination after).
 *
 * The deadline follows what the link has shown, not a constant tuned on
 * a fast host: a peer once silent for S and heard again has shown that
 * it can be that slow and alive, so the limit becomes 2 * S, never less
 * than idle_ms nor more than MIG_LINK_STRETCH * idle_ms; the side's
 * stalled() gets the same limit.  And a look that comes late (this
 * process was stopped or starved for more than two intervals) gives no
 * verdict: its receivers have not yet read what the peer sent meanwhile.
 *
 * The watch's own lock (MIG_RANK_LINK_WATCH) guards only its stop flag
 * and cond; the thread never holds it during a look, so it is a leaf.
 */
#ifndef MIGRATE_LINK_H
#define MIGRATE_LINK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "migrate/net.h"

/* How far the silence limit may stretch: this many times idle_ms. */
#define MIG_LINK_STRETCH 4

struct mig_link_ops {
	/* The urgent connection, with the side's link lock held; NULL (nothing held): not now. */
	struct mig_conn *(*hold)(void *ctx);
	/* When the peer was last heard from (now_ns()), under hold(). */
	uint64_t (*heard)(void *ctx);
	/*
	 * Optional: 1, with why, when the link stalls in the side's own way
	 * (under hold()); limit_ns: how long a wait may last now (link.h).
	 */
	int (*stalled)(void *ctx, uint64_t now, uint64_t limit_ns, char *why, size_t len);
	/* Let go of what hold() took; why non-NULL: the link is broken, report it. */
	void (*release)(void *ctx, const char *why);
	/*
	 * Optional, under hold(): the side's periodic figures (the source's
	 * rates), on the one thread that looks at the link regularly.
	 */
	void (*tick)(void *ctx, uint64_t now);
};

struct mig_link_watch {
	const struct mig_link_ops *ops;
	void *ctx;
	const char *peer; /* who goes silent, in the break's message */
	int idle_ms;
	uint64_t heartbeat_ns;
	/* Only the watch thread's: the stretch (link.h). */
	uint64_t last_look, last_heard, longest_gap;
	pthread_mutex_t lock; /* stop, cond */
	pthread_cond_t cond;
	pthread_t thread;
	int stop, on;
};

/*
 * Start the watchdog of a link whose peer is named peer ("source",
 * "destination"), silent after idle_ms.  0, or -errno when the thread
 * cannot start (nothing to stop then).
 */
int mig_link_watch_start(struct mig_link_watch *w, const struct mig_link_ops *ops, void *ctx,
			 const char *peer, int idle_ms);
/* Stop and join it (nothing when it never started); call with no lock held. */
void mig_link_watch_stop(struct mig_link_watch *w);

#endif /* MIGRATE_LINK_H */
