/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The spin policy of the threads on a demand fault's path: the
 * destination's urgent receiver (which reads the reply and installs the
 * page) and the source's urgent thread (which reads the request and sends
 * the reply).  The one place that decides when they spin.
 *
 * Why it might pay: a thread's wake-up across CPUs costs 30-70 us here,
 * more than all the work of a fault round trip (docs/migration.md has the
 * breakdown).  While a vCPU waits for a page its CPU is idle, so the thread
 * that will read the reply could spin on its socket; and faults come in
 * bursts, so a short spin after each answer could catch the next request
 * (source) or reply (destination) without a wake-up.
 *
 * Why it is off by default: measured on this 2-CPU host (kernel 6.18, EEVDF
 * scheduler, other jobs running), every spinning variant was slower than
 * blocking, and the old fixed 50 us spin after every urgent frame was the
 * slowest of all (docs/migration.md, "Performance steps").  A thread that
 * spins uses up its share of the CPU, so when its data arrives it no longer
 * preempts anyone and waits for a time slice; a thread that only ever
 * sleeps is run at once on its wake-up.  On two shared CPUs there is no
 * idle CPU to spin on: the push, the bulk receiver and the other jobs take
 * the vCPU's.  So the policy, with spin_us (mig_opts, `vmm run
 * --migrate-spin-us`) 0 by default:
 *
 *   0            block in recv() (the thread sleeps until its data comes);
 *   N > 0        spin while a request is outstanding, at most N us after the
 *                last request went out (a reply later than that is stuck
 *                behind something slow: the push, a broken link), and N us
 *                after each answer; else block in poll() on the socket and
 *                a wake-up eventfd that a new request kicks (so the
 *                receiver starts spinning while the request travels).
 *                N is at most MIG_SPIN_MAX_US (migrate/migrate.h).
 *
 * Threads: any thread may call mig_spin_request() and mig_spin_answered();
 * one receiving thread calls mig_spin_wanted() and mig_spin_block().
 */
#ifndef MIGRATE_SPIN_H
#define MIGRATE_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#include "migrate/migrate.h" /* MIG_SPIN_MAX_US */

struct mig_spin {
	unsigned us;		  /* the window; 0: never spin */
	int wake_fd;		  /* eventfd kicked by mig_spin_request(); -1: none */
	int outstanding;	  /* requests sent and not answered (atomic) */
	int sleeping;		  /* the receiver is in mig_spin_block() (atomic) */
	uint64_t last_request_ns; /* atomic */
	uint64_t last_answer_ns;  /* atomic */
};

/*
 * us: the window (clamped to MIG_SPIN_MAX_US); wakeable: with an eventfd for
 * mig_spin_request() (the destination).  0 or -errno.
 */
int mig_spin_init(struct mig_spin *sp, unsigned us, bool wakeable);
void mig_spin_destroy(struct mig_spin *sp);
/* Does this policy ever spin?  If not, receivers just block in recv(). */
static inline bool mig_spin_enabled(const struct mig_spin *sp)
{
	return sp->us > 0;
}

/* A request went out: spin for its answer, waking the receiver if it sleeps. */
void mig_spin_request(struct mig_spin *sp);
/* An answer went by (received at the destination, sent at the source). */
void mig_spin_answered(struct mig_spin *sp);

/* Should the receiver spin (retry a non-blocking receive) at now? */
bool mig_spin_wanted(struct mig_spin *sp, uint64_t now);
/*
 * Sleep until fd is readable (or hung up) or a request is made; 0 or
 * -errno.  Returns at once when spinning became wanted meanwhile.
 */
int mig_spin_block(struct mig_spin *sp, int fd);

/* One iteration's pause of a spin loop. */
static inline void mig_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#endif /* MIGRATE_SPIN_H */
