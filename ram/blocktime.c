// SPDX-License-Identifier: GPL-2.0
/*
 * Blocked vCPU time, as QEMU defines postcopy-blocktime and
 * postcopy-vcpu-blocktime (QEMU's migration/postcopy-ram.c,
 * mark_postcopy_blocktime_begin/_end): a vCPU is blocked from the fault
 * the fault thread reads for it until the page it faulted on is installed;
 * the total is the time during which every vCPU was blocked at once.
 *
 * Which vCPU faulted comes from the back end's thread id (uffd's
 * UFFD_FEATURE_THREAD_ID); faults of other threads (the VMM's own
 * accesses) are not counted, as in QEMU.
 *
 * No lock: the fault thread is the only one that starts a wait; any
 * installing thread may end one.  Each vCPU's slot holds the page it waits
 * on (ended by whoever clears it first, with a compare-and-swap), and one
 * word holds how many vCPUs wait and since when all of them do.  A wait
 * started on a page an install is marking present is never left open:
 * the fault thread publishes the wait, then looks at the page; the
 * installer marks the page, then looks at the waits; a full fence on both
 * sides makes at least one of them see the other (blocktime_begin(),
 * ram_blocktime_end()).
 *
 * Times are microseconds since the start.  A vCPU's wait starts and ends
 * at the times its change of the shared word took, read after the word was
 * loaded: so the changes are ordered as their times, and each all-blocked
 * interval lies inside every vCPU's own wait, as QEMU's figures have it
 * (the total is never more than any vCPU's).
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

#define COUNT_BITS 16
#define COUNT_MASK ((1ull << COUNT_BITS) - 1)

struct bt_vcpu {
	_Atomic uint64_t page;	/* the page waited on + 1; 0: not blocked */
	_Atomic uint64_t since; /* when the wait began (us) */
	_Atomic uint64_t us;	/* ended waits, in total */
};

struct ram_blocktime {
	unsigned nr;
	int (*vcpu_of)(void *arg, uint32_t tid);
	void *arg;
	uint64_t t0;		/* now_ns() at the start */
	_Atomic uint64_t state; /* since when all are blocked (us) << COUNT_BITS | vCPUs blocked */
	_Atomic uint64_t all_us;
	struct bt_vcpu v[];
};

_Static_assert(RAM_BLOCKTIME_MAX_VCPUS <= COUNT_MASK, "the count has COUNT_BITS bits");

static uint64_t bt_now(const struct ram_blocktime *bt)
{
	return (now_ns() - bt->t0) / 1000;
}

/* One more vCPU blocked: when (the time its change took). */
static uint64_t count_in(struct ram_blocktime *bt)
{
	uint64_t w = atomic_load(&bt->state), now, nw;

	do {
		now = bt_now(bt);
		nw = (w & COUNT_MASK) + 1;
		nw |= nw == bt->nr ? now << COUNT_BITS : w & ~COUNT_MASK;
	} while (!atomic_compare_exchange_weak(&bt->state, &w, nw));
	return now;
}

/* One vCPU fewer blocked: when; ends an all-blocked interval if all were. */
static uint64_t count_out(struct ram_blocktime *bt)
{
	uint64_t w = atomic_load(&bt->state), now;

	do {
		now = bt_now(bt);
	} while (!atomic_compare_exchange_weak(&bt->state, &w, w - 1));
	if ((w & COUNT_MASK) == bt->nr && now > w >> COUNT_BITS)
		atomic_fetch_add(&bt->all_us, now - (w >> COUNT_BITS));
	return now;
}

/*
 * Ends vCPU v's wait on the page `page` (+ 1) if it still is its wait.
 * The start is read before the slot is cleared: once cleared, the fault
 * thread may start the vCPU's next wait.
 */
static void unblock(struct ram_blocktime *bt, struct bt_vcpu *v, uint64_t page)
{
	uint64_t since = atomic_load(&v->since), now;

	if (!atomic_compare_exchange_strong(&v->page, &page, 0))
		return; /* another thread ended it */
	now = count_out(bt);
	if (now > since)
		atomic_fetch_add(&v->us, now - since);
}

/* The fault thread's: vCPU v faulted on page pg. */
static void blocktime_begin(struct ram *ram, struct ram_blocktime *bt, struct bt_vcpu *v,
			    uint64_t pg)
{
	uint64_t cur = atomic_load(&v->page);

	if (cur == pg + 1)
		return; /* the same wait, reported again (a fault retried after a signal) */
	if (cur)
		unblock(bt, v, cur); /* it faults elsewhere: that wait is over */
	atomic_store(&v->since, count_in(bt));
	atomic_store(&v->page, pg + 1);
	atomic_thread_fence(memory_order_seq_cst);
	/* A late fault, or an install that looked at the waits before this one. */
	if (ram_word_state(ram_word_load(ram, pg)) == RAM_PAGE_PRESENT)
		unblock(bt, v, pg + 1);
}

void ram_blocktime_begin(struct ram *ram, uint64_t pg, uint32_t tid)
{
	struct ram_blocktime *bt = atomic_load_explicit(&ram->bt, memory_order_acquire);
	int i;

	if (!bt || !tid)
		return;
	i = bt->vcpu_of(bt->arg, tid);
	if (i >= 0 && (unsigned)i < bt->nr)
		blocktime_begin(ram, bt, &bt->v[i], pg);
}

/*
 * Pages pg .. pg + n - 1 were just marked PRESENT: the waits on them end.
 * One fence and one load when no vCPU waits, the common case of a push.
 */
void ram_blocktime_end(struct ram *ram, uint64_t pg, uint64_t n)
{
	struct ram_blocktime *bt = atomic_load_explicit(&ram->bt, memory_order_acquire);

	if (!bt)
		return;
	atomic_thread_fence(memory_order_seq_cst);
	if (!(atomic_load(&bt->state) & COUNT_MASK))
		return;
	for (unsigned i = 0; i < bt->nr; i++) {
		uint64_t p = atomic_load(&bt->v[i].page);

		if (p > pg && p <= pg + n)
			unblock(bt, &bt->v[i], p);
	}
}

int ram_blocktime_start(struct ram *ram, unsigned nr, int (*vcpu_of)(void *arg, uint32_t tid),
			void *arg)
{
	struct ram_blocktime *bt;

	if (!ram->ops || !nr || nr > RAM_BLOCKTIME_MAX_VCPUS)
		return -EINVAL;
	if (!ram->fault_tids)
		return -EOPNOTSUPP;
	if (atomic_load(&ram->bt))
		return -EBUSY;
	bt = calloc(1, sizeof(*bt) + nr * sizeof(bt->v[0]));
	if (!bt)
		return -ENOMEM;
	bt->nr = nr;
	bt->vcpu_of = vcpu_of;
	bt->arg = arg;
	bt->t0 = now_ns();
	atomic_store_explicit(&ram->bt, bt, memory_order_release);
	return 0;
}

int ram_blocktime_get(const struct ram *ram, uint64_t *all_us, uint64_t *vcpu_us, unsigned max)
{
	struct ram_blocktime *bt = atomic_load_explicit(&ram->bt, memory_order_acquire);

	if (!bt)
		return -ENOENT;
	*all_us = atomic_load(&bt->all_us);
	for (unsigned i = 0; i < bt->nr && i < max; i++)
		vcpu_us[i] = atomic_load(&bt->v[i].us);
	return (int)bt->nr;
}

/* With no thread left that faults or installs (ram_destroy(), ram_reset()). */
void ram_blocktime_free(struct ram *ram)
{
	free(atomic_exchange(&ram->bt, NULL));
}
