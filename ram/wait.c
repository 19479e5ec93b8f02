// SPDX-License-Identifier: GPL-2.0
/*
 * The waits of faults served on the faulting thread (ram_fault_wait() in
 * fault.c: the kvm-exit back end): once it has asked for its page, the
 * thread that met the missing page sleeps on the page record until the
 * page is PRESENT, whichever thread installs it (the fault thread with a
 * demand reply, a bulk receiver with the push, the stager).
 *
 * The wait is a futex per waiting thread, not a poll: a waiter takes a
 * slot (the page + 1) and sleeps on the slot's sequence word; every
 * install, once it has marked its pages PRESENT, bumps and wakes the
 * slots that wait on one of them (ram_waiters_end(), from record.c).  No
 * wake-up is lost: the waiter publishes its slot, then looks at the page;
 * the installer marks the page, then looks at the slots; a full fence on
 * both sides makes at least one of them see the other (as blocktime.c).
 * An install with no waiter costs one fence and one load.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static void futex_wait(_Atomic uint32_t *word, uint32_t val)
{
	/* EAGAIN (changed already), EINTR (a signal: a pause's kick): look again. */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void bump(struct ram_waiter *w)
{
	atomic_fetch_add(&w->seq, 1);
	futex_wake_all(&w->seq);
}

/* A free slot, now holding page pg; NULL when all RAM_WAIT_SLOTS are taken. */
static struct ram_waiter *take_slot(struct ram *ram, uint64_t pg)
{
	for (unsigned i = 0; i < RAM_WAIT_SLOTS; i++) {
		uint64_t free_slot = 0;

		if (atomic_compare_exchange_strong(&ram->waits.slots[i].page, &free_slot, pg + 1))
			return &ram->waits.slots[i];
	}
	return NULL;
}

/*
 * Sleeps until page pg is PRESENT (0) or the waits are cancelled
 * (-ECANCELED).  More threads waiting at once than there are slots (never
 * expected: 32 vCPUs at most) look every 100 us instead of sleeping.
 */
int ram_wait_present(struct ram *ram, uint64_t pg)
{
	static const struct timespec tick = { .tv_nsec = 100000 };
	struct ram_waiter *w = take_slot(ram, pg);
	int r = 0;

	atomic_fetch_add(&ram->waits.nr_waiting, 1);
	atomic_thread_fence(memory_order_seq_cst);
	for (;;) {
		uint32_t seq = w ? atomic_load(&w->seq) : 0;

		if (ram_word_state(ram_word_load(ram, pg)) == RAM_PAGE_PRESENT)
			break;
		if (atomic_load(&ram->waits.cancelled)) {
			r = -ECANCELED;
			break;
		}
		if (w)
			futex_wait(&w->seq, seq);
		else
			nanosleep(&tick, NULL);
	}
	atomic_fetch_sub(&ram->waits.nr_waiting, 1);
	if (w)
		atomic_store(&w->page, 0);
	return r;
}

void ram_waiters_end(struct ram *ram, uint64_t pg, uint64_t n)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load(&ram->waits.nr_waiting))
		return;
	for (unsigned i = 0; i < RAM_WAIT_SLOTS; i++) {
		uint64_t p = atomic_load(&ram->waits.slots[i].page);

		if (p > pg && p <= pg + n)
			bump(&ram->waits.slots[i]);
	}
}

void ram_cancel_waits(struct ram *ram)
{
	if (!ram || !ram->pages)
		return;
	atomic_store(&ram->waits.cancelled, true);
	for (unsigned i = 0; i < RAM_WAIT_SLOTS; i++)
		bump(&ram->waits.slots[i]);
}
