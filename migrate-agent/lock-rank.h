/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The library's locking order, checked.  Every mutex of the destination,
 * of the source, of a connection, of a TLS session and of a link watchdog
 * has a rank; a thread may take a lock only when every lock it holds has a
 * lower rank.  The order is the one written at the top of dest.h, source.h
 * and link.h; in the sanitizer
 * build (MIG_LOCK_RANKS) mig_lock() checks it on every call and aborts
 * with both ranks named when a path takes locks out of order, so a test
 * that runs the path fails at once instead of deadlocking one day.  In
 * the other builds mig_lock() is pthread_mutex_lock().
 *
 * The destination's and the source's locks are never held together (a
 * process is one or the other); each side's order is written at the top
 * of dest.h and source.h.  The QMP server's and the VMM's locks are not
 * ranked: none of them is held across a call into the library.
 */
#ifndef MIGRATE_LOCK_RANK_H
#define MIGRATE_LOCK_RANK_H

#include <pthread.h>

enum mig_lock_rank {
	MIG_RANK_DEST_LOOP = 1, /* d->loop.lock: the urgent channel on the fault thread */
	MIG_RANK_DEST,		/* d->lock: flags, why, session, handshakes */
	MIG_RANK_DEST_REQ,	/* d->req_lock: which connections are live */
	MIG_RANK_SRC_LINK,	/* s->live.lock: the source's watchdog */
	MIG_RANK_SRC,		/* s->lock: the source's flags and why */
	MIG_RANK_SRC_HINT,	/* s->hint.lock: faults' hints for the push */
	MIG_RANK_CONN_TX,	/* c->tx_lock: one send at a time on a connection */
	MIG_RANK_TLS_SESSION,	/* t->lock: a TLS session's OpenSSL calls */
	MIG_RANK_TLS_KTLS,	/* a TLS context's kTLS report */
	MIG_RANK_DEST_LAT,	/* d->lat_lock: the fault latencies */
	MIG_RANK_LINK_WATCH,	/* w->lock: a link watchdog's stop flag (link.h), a leaf */
};

#ifdef MIG_LOCK_RANKS
void mig_lock(pthread_mutex_t *m, enum mig_lock_rank rank);
void mig_unlock(pthread_mutex_t *m);
#else
static inline void mig_lock(pthread_mutex_t *m, enum mig_lock_rank rank)
{
	(void)rank;
	pthread_mutex_lock(m);
}

static inline void mig_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
}
#endif

#endif /* MIGRATE_LOCK_RANK_H */
