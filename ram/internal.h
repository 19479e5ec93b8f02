/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The RAM object's fields: ram/'s own files only.  Everyone else holds a
 * struct ram * and calls the headers in include/ram/, so the record's representation
 * and the fault thread's state can change without touching them.
 */
#ifndef RAM_INTERNAL_H
#define RAM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/macros.h"
#include "common/page.h"
#include "ram/backend.h"
#include "ram/ram.h"
#include "ram/record.h"

struct ram_blocktime;

/*
 * Threads waiting for a page in ram_fault_wait() (wait.c): a slot each,
 * holding the page + 1 (0: free) and a futex word the installer bumps.
 * 64 slots: 32 vCPUs at most and the VMM's few other threads.
 */
#define RAM_WAIT_SLOTS 64

/* The zero-page source of ram_rap_zero(): a remap of at most this much per call. */
#define RAM_ZERO_SRC_BYTES (64 * PAGE_SIZE)

struct ram_waiter {
	_Atomic uint64_t page;
	_Atomic uint32_t seq;
};

struct ram {
	uint8_t *host; /* guest-physical 0 in our address space */
	uint64_t size; /* bytes, page aligned */
	uint64_t nr_pages;
	/* Lazy RAM only (ops == NULL for plain RAM): */
	const struct ram_backend_ops *ops;
	int fd;			 /* back end's descriptor */
	bool fault_tids;	 /* the back end says which thread faulted (arm() sets it) */
	_Atomic uint64_t *pages; /* the page record: one word per page */
	uint64_t t0;		 /* now_ns() the record's times count from */
	_Atomic uint64_t nr_present;
	_Atomic uint64_t nr_requested; /* pages REQUESTED: kept by ram_claim() and ram_unclaim() */
	struct ram_source *source;
	bool busy_poll;
	int kick_fd; /* eventfd that wakes the fault thread: to stop, to look again */
	atomic_bool stop;
	bool thread_started;
	pthread_t thread;
	_Atomic int error;		      /* first fatal -errno of the fault thread */
	void (*on_error)(void *arg, int err); /* called once on a fatal error */
	void *on_error_arg;
	/* Blocked vCPU time (blocktime.c): NULL until ram_blocktime_start(). */
	struct ram_blocktime *_Atomic bt;
	/* The remap back ends' source of zero pages (userfault.c: ram_rap_zero()). */
	struct {
		pthread_mutex_t lock;
		uint8_t *src; /* RAM_ZERO_SRC_BYTES, mapped at first use */
	} zero;
	/* Faults served on the faulting thread (fault.c, wait.c): its waiters, and ram_cancel_waits(). */
	struct {
		_Atomic unsigned nr_waiting;
		atomic_bool cancelled;
		struct ram_waiter slots[RAM_WAIT_SLOTS];
	} waits;
	struct {
		_Atomic uint64_t faults, requests, dup_faults, late_faults, installed, zeroed, dups,
		    eexist, own_thread, install_calls;
	} st;
};

/*
 * Page pg's word of the record (pg < nr_pages), as ram_page_word() reads
 * it: for the files below record.c (blocktime.c, wait.c), which record.c
 * calls after each install and so must not call back into it.
 */
static inline uint64_t ram_word_load(const struct ram *ram, uint64_t pg)
{
	return atomic_load_explicit(&ram->pages[pg], memory_order_acquire);
}

/* blocktime.c: a fault of thread tid (0: unknown) on page pg; pages made PRESENT. */
void ram_blocktime_begin(struct ram *ram, uint64_t pg, uint32_t tid);
void ram_blocktime_end(struct ram *ram, uint64_t pg, uint64_t n);
void ram_blocktime_free(struct ram *ram);

/* wait.c: pages pg .. pg + n - 1 were just marked PRESENT: wake who waits on them. */
void ram_waiters_end(struct ram *ram, uint64_t pg, uint64_t n);
/* wait.c: sleep until page pg is PRESENT (0) or the waits are cancelled (-ECANCELED). */
int ram_wait_present(struct ram *ram, uint64_t pg);
/* fault.c: a fault of thread tid (0: unknown) at offset off: claim, ask or wake. */
int ram_serve_fault(struct ram *ram, uint64_t off, uint32_t tid);
/* fault.c: the first fatal error of lazy RAM, reported once (on_error). */
void ram_set_error(struct ram *ram, int err);

/* userfault.c: remap_anon_pages() of one page (a copy where the kernel refuses it), no wake. */
int ram_rap_install(struct ram *ram, uint64_t off, void *page);
/*
 * userfault.c: the len bytes of pages at `pages` moved to [off, off + len)
 * in as few calls as the kernel allows (a page it will not move, EBUSY,
 * copied alone), no wake; pages already there are skipped and counted in
 * *there.  0 or -errno.
 */
int ram_rap_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t len, uint64_t *there);
/*
 * userfault.c: zero pages moved over [off, off + len) (the shared zero
 * page: nothing allocated), no wake; pages already there are skipped and
 * counted in *there.  0 or -errno.
 */
int ram_rap_zero(struct ram *ram, uint64_t off, uint64_t len, uint64_t *there);

#endif /* RAM_INTERNAL_H */
