// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's phase (the diagram: enum dest_phase in dest.h): the
 * only writer of d->phase, d->stop and d->done0.  Every change is made
 * under d->lock and broadcast on d->cond, so a thread waiting on d->cond
 * for a phase cannot miss it; it is stored with release, so a thread
 * that reads it without the lock (dest_phase()) sees what was written
 * before it (d->why).
 */
#include <stdarg.h>

#include "dest.h"

#define TO(ph) (1u << (ph))

/*
 * The diagram in dest.h, one row per phase: its name, the phases it may
 * move to, where a break takes it (DEST_NR_PHASES: nowhere, as it is
 * broken or over already), and the QEMU status it reads as.
 */
static const struct dest_phase_row {
	const char *name;
	unsigned to;
	enum dest_phase broken;
	enum mig_phase status;
} rows[DEST_NR_PHASES] = {
	[DEST_LISTENING] = { "listening", TO(DEST_PRECOPY) | TO(DEST_FAILED), DEST_NR_PHASES,
			     MIG_PHASE_SETUP },
	[DEST_PRECOPY] = { "precopy",
			   TO(DEST_PRECOPY_BROKEN) | TO(DEST_SWITCHING) | TO(DEST_FAILED),
			   DEST_PRECOPY_BROKEN, MIG_PHASE_PRECOPY },
	[DEST_PRECOPY_BROKEN] = { "precopy-broken",
				  TO(DEST_PRECOPY) | TO(DEST_SWITCHING_BROKEN) | TO(DEST_FAILED),
				  DEST_NR_PHASES, MIG_PHASE_PRECOPY },
	[DEST_SWITCHING] = { "switching",
			     TO(DEST_SWITCHING_BROKEN) | TO(DEST_POSTCOPY) | TO(DEST_FAILED),
			     DEST_SWITCHING_BROKEN, MIG_PHASE_SWITCHOVER },
	[DEST_SWITCHING_BROKEN] = { "switching-broken", TO(DEST_RECOVERING) | TO(DEST_FAILED),
				    DEST_NR_PHASES, MIG_PHASE_SWITCHOVER },
	[DEST_POSTCOPY] = { "postcopy", TO(DEST_RECOVERING) | TO(DEST_COMPLETING) | TO(DEST_FAILED),
			    DEST_RECOVERING, MIG_PHASE_POSTCOPY },
	[DEST_RECOVERING] = { "recovering", TO(DEST_POSTCOPY) | TO(DEST_FAILED), DEST_NR_PHASES,
			      MIG_PHASE_RECOVER },
	/* COMPLETE being sent is still postcopy: completed is COMPLETE sent. */
	[DEST_COMPLETING] = { "completing",
			      TO(DEST_COMPLETING_BROKEN) | TO(DEST_COMPLETE) | TO(DEST_POSTCOPY) |
				  TO(DEST_FAILED),
			      DEST_COMPLETING_BROKEN, MIG_PHASE_POSTCOPY },
	[DEST_COMPLETING_BROKEN] = { "completing-broken",
				     TO(DEST_COMPLETE) | TO(DEST_RECOVERING) | TO(DEST_FAILED),
				     DEST_NR_PHASES, MIG_PHASE_POSTCOPY },
	[DEST_COMPLETE] = { "complete", 0, DEST_NR_PHASES, MIG_PHASE_COMPLETED },
	[DEST_FAILED] = { "failed", 0, DEST_NR_PHASES, MIG_PHASE_FAILED },
};

const char *dest_phase_name(enum dest_phase ph)
{
	return (unsigned)ph < DEST_NR_PHASES ? rows[ph].name : "?";
}

enum mig_phase dest_phase_status(enum dest_phase ph)
{
	return rows[ph].status;
}

/* Any thread, any lock: see dest.h for what a reader without d->lock may assume. */
enum dest_phase dest_phase(struct mig_dest *d)
{
	return __atomic_load_n(&d->phase, __ATOMIC_ACQUIRE);
}

/*
 * Move d to phase to (d->lock held): true if it moved.  From COMPLETE or
 * FAILED nothing moves, silently: the migration ended while the caller
 * worked (a late event is no bug).  Any other transition the diagram does
 * not have is a bug: logged with both names and refused.
 */
bool dest_phase_enter(struct mig_dest *d, enum dest_phase to)
{
	enum dest_phase from = d->phase;

	if (from == DEST_COMPLETE || from == DEST_FAILED)
		return false;
	if ((unsigned)to >= DEST_NR_PHASES || !(rows[from].to & TO(to))) {
		pr_mig("bug: the destination's phase cannot go from %s to %s: refused\n",
		       dest_phase_name(from), dest_phase_name(to));
		return false;
	}
	__atomic_store_n(&d->phase, to, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&d->cond);
	return true;
}

/*
 * A break of the link (d->lock held), with its cause: true if it is the
 * first (the caller kicks the links), false when the link was broken
 * already, or the migration is over (d->why is then left as it is).
 * LISTENING has no link to break: a bug.
 */
bool dest_phase_break(struct mig_dest *d, const char *why)
{
	enum dest_phase to = rows[d->phase].broken;

	if (d->phase == DEST_LISTENING)
		return dest_phase_enter(d, DEST_PRECOPY_BROKEN); /* logs it */
	if (to == DEST_NR_PHASES)
		return false;
	snprintf(d->why, sizeof(d->why), "%s", why);
	return dest_phase_enter(d, to);
}

/* Whether the destination is asked to end (any thread, any lock). */
bool dest_stopping(struct mig_dest *d)
{
	return __atomic_load_n(&d->stop, __ATOMIC_ACQUIRE);
}

/* Ask every thread of the destination to end (d->lock not held). */
void dest_request_stop(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	__atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&d->cond);
	mig_unlock(&d->lock);
}

/*
 * Whether precopy's pages are over on bulk channel 0 (any thread): its
 * receiver reads it between frames, other channels wait for it.
 */
bool dest_done0(struct mig_dest *d)
{
	return __atomic_load_n(&d->done0, __ATOMIC_ACQUIRE);
}

/* DONE(0) came, or (a break before it) will not: d->lock held. */
void dest_set_done0(struct mig_dest *d, bool done)
{
	__atomic_store_n(&d->done0, done, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&d->cond);
}

/*
 * The migration fails (any thread, d->lock not held): the first cause is
 * kept, the phase becomes FAILED and the links are kicked, so every thread
 * blocked on them returns and ends.
 */
void dest_fail(struct mig_dest *d, const char *fmt, ...)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	/* The first cause stays; after COMPLETE went out nothing can fail. */
	if (d->phase != DEST_FAILED && d->phase != DEST_COMPLETE) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->why, sizeof(d->why), fmt, ap);
		va_end(ap);
		dest_phase_enter(d, DEST_FAILED);
	}
	pthread_cond_broadcast(&d->cond);
	mig_unlock(&d->lock);
	dest_kick_links(d);
}
