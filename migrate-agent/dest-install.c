// SPDX-License-Identifier: GPL-2.0
/*
 * The page record, d->pst: a fault asks for a page (MISSING -> REQUESTED,
 * mig_dest_fault()), an arrival claims it (-> INSTALLING) and installs it
 * once (-> PRESENT); the stager installs what precopy staged; COMPLETE goes
 * out when every page is PRESENT.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "dest.h"

/*
 * Every page present by the one record of presence, d->pst?  The counter
 * d->received only says when to look: completion is never derived from a
 * count (a count can be wrong; the record cannot be both PRESENT and not).
 */
static int all_pages_present(struct mig_dest *d)
{
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) != PG_PRESENT)
			return 0;
	return 1;
}

/* Send COMPLETE if every page is here and it was not sent yet. */
void dest_try_complete(struct mig_dest *d)
{
	/* Not before RUNNING: the source measures the downtime with it. */
	if (!__atomic_load_n(&d->all_present, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&d->t_resumed, __ATOMIC_ACQUIRE) || !all_pages_present(d))
		return;
	struct mig_complete m;
	dest_fill_complete(d, &m);
	pthread_mutex_lock(&d->req_lock);
	int sent = 0;
	if (d->link_ok && !d->complete_sent) {
		/* Set first: the source may close the link as soon as it has it. */
		__atomic_store_n(&d->complete_sent, 1, __ATOMIC_RELEASE);
		sent = mig_conn_send(d->urg, MIG_MSG_COMPLETE, &m, sizeof(m), NULL, 0) == 0;
		if (!sent)
			__atomic_store_n(&d->complete_sent, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->req_lock);
	if (sent) {
		pthread_mutex_lock(&d->lock);
		d->t_done = mig_now_ns();
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
	}
}

/*
 * Claim page i for installing (-> PG_INSTALLING): its previous state, or -1
 * when it must not be installed (already present or being installed: a
 * duplicate; for the stager, no longer staged).
 */
int dest_claim(struct mig_dest *d, uint64_t i, int kind)
{
	uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
	for (;;) {
		if (kind == 2 && st != PG_STAGED)
			return -1; /* the stager and a fault raced: one installs */
		if (st == PG_PRESENT || st == PG_INSTALLING) {
			__atomic_fetch_add(&d->pages_dup, 1, __ATOMIC_RELAXED);
			return -1;
		}
		if (__atomic_compare_exchange_n(&d->pst[i], &st, PG_INSTALLING, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return st;
	}
}

#define TL_MAX_US ((1u << 30) - 1)

/* Record page i's arrival (now: mig_now_ns()) for the timeline. */
static void stamp_arrival(struct mig_dest *d, uint64_t i, int kind, uint64_t now)
{
	uint64_t t0 = __atomic_load_n(&d->t_tl0, __ATOMIC_RELAXED);
	uint64_t us = now > t0 ? (now - t0) / 1000 : 0;
	if (us > TL_MAX_US)
		us = TL_MAX_US;
	__atomic_store_n(&d->t_arr[i], (uint32_t)(us << 2) | (uint32_t)(kind + 1),
			 __ATOMIC_RELAXED);
}

/* Page i, claimed in state st, is in place at now: account for it. */
void dest_installed(struct mig_dest *d, uint64_t i, uint8_t st, int zero, int kind, uint64_t now)
{
	stamp_arrival(d, i, kind, now);
	mig_stamps_install(d->stamps, i, kind, zero, now);
	if (st == PG_REQUESTED) {
		__atomic_fetch_sub(&d->outstanding, 1, __ATOMIC_ACQ_REL);
		mig_spin_answered(&d->spin);
		mig_stamp(d->stamps, i, MIG_STEP_INSTALLED, now);
		uint64_t lat = mig_now_ns() - d->t_fault[i];
		pthread_mutex_lock(&d->lat_lock);
		mig_lat_add(&d->lat, lat);
		pthread_mutex_unlock(&d->lat_lock);
	}
	if (zero)
		__atomic_fetch_add(&d->pages_zero, 1, __ATOMIC_RELAXED);
	uint64_t *ctr = kind == 0   ? &d->pages_demand
			: kind == 1 ? &d->pages_pushed
				    : &d->pages_precopy;
	__atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&d->pst[i], PG_PRESENT, __ATOMIC_RELEASE);
	if (__atomic_add_fetch(&d->received, 1, __ATOMIC_ACQ_REL) == d->nr_pages) {
		__atomic_store_n(&d->all_present, 1, __ATOMIC_RELEASE);
		dest_try_complete(d);
	}
}

/* Install page i from data (NULL: zero).  0, or -errno (fatal, already reported). */
static int install(struct mig_dest *d, uint64_t i, const void *data, int kind)
{
	int st = dest_claim(d, i, kind);
	if (st < 0)
		return 0;
	int r = d->vm->install(d->vm->ctx, i * MIG_PAGE_SIZE, data);
	if (r == -EEXIST) {
		__atomic_fetch_add(&d->pages_dup, 1, __ATOMIC_RELAXED);
		r = 0;
	}
	if (r) {
		__atomic_store_n(&d->pst[i], (uint8_t)st, __ATOMIC_RELEASE);
		dest_fail(d, "cannot install page 0x%llx: %s",
			  (unsigned long long)(i * MIG_PAGE_SIZE), strerror(-r));
		return r;
	}
	dest_installed(d, i, (uint8_t)st, !data, kind, mig_now_ns());
	return 0;
}

/*
 * Give a chunk of the staging buffer back to the kernel once none of its
 * pages can be read from it any more: every staged page was claimed (by the
 * stager or a fault), and a page still INSTALLING may be being copied from
 * it right now, so wait for those (an install takes microseconds).
 */
#define STAGE_CHUNK 512 /* pages: 2 MiB */

static void release_stage(struct mig_dest *d, uint64_t first, uint64_t n)
{
	for (uint64_t i = first; i < first + n; i++)
		while (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_INSTALLING &&
		       !d->failed && !d->stop)
			sched_yield();
	madvise(d->stage + first * MIG_PAGE_SIZE, n * MIG_PAGE_SIZE, MADV_DONTNEED);
}

/* Page i's staged copy, for install(): NULL for a zero page. */
static const void *staged_copy(const struct mig_dest *d, uint64_t i)
{
	return d->stage_zero[i] ? NULL : d->stage + i * MIG_PAGE_SIZE;
}

/* Installs what precopy staged, freeing the staging buffer as it goes (RSS ~ RAM). */
void *dest_stager_thread(void *arg)
{
	struct mig_dest *d = arg;
	for (uint64_t c = 0; c < d->nr_pages && !d->failed && !d->stop; c += STAGE_CHUNK) {
		uint64_t n = d->nr_pages - c < STAGE_CHUNK ? d->nr_pages - c : STAGE_CHUNK;
		for (uint64_t i = c; i < c + n; i++)
			if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_STAGED)
				install(d, i, staged_copy(d, i), 2);
		release_stage(d, c, n);
	}
	return NULL;
}

int mig_dest_fault(struct mig_dest *d, uint64_t off)
{
	if (off >= d->vm->ram_size)
		return -ERANGE;
	uint64_t i = off / MIG_PAGE_SIZE;
	uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
	for (;;) {
		if (st == PG_PRESENT)
			return 1;
		if (st == PG_STAGED) {
			install(d, i, staged_copy(d, i), 2);
			return 1;
		}
		if (st != PG_MISSING) {
			__atomic_fetch_add(&d->dedup, 1, __ATOMIC_RELAXED);
			return 0;
		}
		d->t_fault[i] = mig_now_ns();
		if (__atomic_compare_exchange_n(&d->pst[i], &st, PG_REQUESTED, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			break;
	}
	__atomic_fetch_add(&d->faults, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&d->outstanding, 1, __ATOMIC_ACQ_REL);
	mig_stamp(d->stamps, i, MIG_STEP_FAULT, d->t_fault[i]);
	struct mig_page_request q = { .count = 1 };
	uint64_t addr = i * MIG_PAGE_SIZE;
	pthread_mutex_lock(&d->req_lock);
	mig_stamp(d->stamps, i, MIG_STEP_REQ_SENT, mig_now_ns());
	if (d->link_ok && mig_conn_send(d->urg, MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8) == 0)
		d->req_sent++;
	pthread_mutex_unlock(&d->req_lock);
	/* After the send: the request goes first, the receiver's wake-up overlaps it. */
	mig_spin_request(&d->spin);
	return 0;
}
