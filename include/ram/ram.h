/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Guest RAM: anonymous memory, optionally filled lazily by user-space page
 * faults through one of several back ends (ram/backend.h).
 *
 * Lazy RAM in one paragraph: the RAM range is armed with a back end (the
 * kernel then reports missing-page faults to us instead of zero-filling);
 * a fault thread per VM reads faults and asks a page source for each
 * page; the source installs the page at once (synchronous sources) or later
 * from any thread (asynchronous sources such as the migration agent) with
 * ram_install()/ram_install_zero() or the record's calls (ram/record.h),
 * which also wake the faulting threads.  The page record says where each
 * page is.  With a back end whose faults go to no fault thread
 * (own_thread_faults: kvm-exit) the faulting thread serves its own fault
 * (ram_fault_wait()) and every other access ensures its pages first
 * (ram_ensure()); the fault thread then only takes the source's replies.
 *
 * The RAM object is opaque: its owner creates and destroys it, everyone
 * reads it through the calls below.  Pages are named by page number
 * (PAGE_SIZE, common/page.h), never by byte offset.
 */
#ifndef RAM_RAM_H
#define RAM_RAM_H

#include <stdbool.h>
#include <stdint.h>

struct ram;
struct ram_backend_ops;

/* ---- Page sources ---- */

/*
 * Where missing pages come from.  request() runs on the fault thread for a
 * page the fault just moved to REQUESTED; staged() for a page the fault
 * found STAGED (the source installs the copy it staged; NULL for a source
 * that stages nothing).  Both return 0 once the page is installed or will
 * be by some thread (the faulting vCPU waits until then), or -errno to
 * fail the VM.  destroy() frees the source (may be NULL).
 *
 * A source whose replies come on a descriptor (the migration's urgent
 * channel) has the fault thread wait on it too, so that one thread sends
 * the request and installs the reply: reply_fd() says which descriptor,
 * -1 for none now (asked again on every turn of the loop, and after
 * ram_kick_faults()); replies() runs on the fault thread when it polls
 * readable, takes what came and installs it, without waiting for more.
 * Both may be NULL.
 */
struct ram_source {
	int (*request)(struct ram_source *src, struct ram *ram, uint64_t pg);
	int (*staged)(struct ram_source *src, struct ram *ram, uint64_t pg);
	int (*reply_fd)(struct ram_source *src);
	int (*replies)(struct ram_source *src, struct ram *ram);
	void (*destroy)(struct ram_source *src);
};

/*
 * Pages from an open file: RAM byte x is file byte offset + x.  The source
 * keeps a duplicate of fd (the caller's stays the caller's): the file the
 * caller checked is the one read, whatever its path names later.
 */
int ram_source_file_create(int fd, uint64_t offset, uint64_t size, struct ram_source **out);
/* Pages copied from a buffer of `size` bytes (kept by the caller). */
int ram_source_buffer_create(const void *buf, uint64_t size, struct ram_source **out);

/* ---- Life cycle ---- */

/*
 * Maps `size` bytes (page aligned) of anonymous memory into a new RAM
 * object.  With a back end (lazy RAM) the range is armed at once, so
 * nothing may touch it before a fault thread runs; with ops == NULL it is
 * ordinary RAM and every page counts present.  -ENOMEM if the memory
 * cannot be reserved, back end errors as they come.
 */
int ram_create(uint64_t size, const struct ram_backend_ops *ops, struct ram **out);
/* Stops the fault thread, disarms, unmaps, frees the source and the object (NULL: nothing). */
void ram_destroy(struct ram *ram);
/*
 * Called once, from the fault thread, with its fatal -errno.  Set before
 * ram_start_faults().
 */
void ram_set_on_error(struct ram *ram, void (*fn)(void *arg, int err), void *arg);
/*
 * Unregisters lazy RAM (fault thread stopped first): threads waiting on
 * missing pages wake and get ordinary zero-fill from now on.  For teardown.
 */
void ram_disarm(struct ram *ram);
/*
 * Lazy RAM's record as ram_create() left it, for a RAM object used again
 * without a new mapping: every page MISSING, none present, the statistics
 * and the fault thread's error cleared, times counted from now.  The back
 * end stays armed and on_error stays set.  What the back end installed
 * stays mapped: dropping it is the caller's (for a uffd range,
 * MADV_DONTNEED makes its pages missing again).  Only with no fault thread
 * and no source (ram_start_faults() never called) and nothing installing:
 * -EBUSY otherwise, -EINVAL for plain RAM.  dest-fuzz resets its RAM so
 * for every input (mapping it anew cost most of each run).
 */
int ram_reset(struct ram *ram);

/* ---- The fault thread ---- */

/*
 * Starts the fault thread; `src` becomes owned by ram.  busy_poll: spin on
 * the non-blocking fault descriptor instead of sleeping in poll() (lower
 * latency, burns one CPU).
 */
int ram_start_faults(struct ram *ram, struct ram_source *src, bool busy_poll);
/* Stops and joins the fault thread (idempotent). */
void ram_stop_faults(struct ram *ram);
/* Wakes the fault thread to ask its source's reply_fd() again (any thread). */
void ram_kick_faults(struct ram *ram);

/* ---- Faults served on the faulting thread (own_thread_faults back ends: kvm-exit) ---- */

/*
 * The calling thread needs page pg now (a vCPU's KVM_EXIT_MEMORY_FAULT, or
 * a VMM thread about to touch guest RAM): as the fault thread does for a
 * fault message, it claims the page MISSING -> REQUESTED and asks the
 * source on this thread (the same stamps, counters and blocked time; tid
 * is the caller's thread id for the latter, 0 if unknown), then sleeps on
 * the page record until the page is PRESENT, whoever installs it.  0 once
 * present (at once for a present page, and for plain RAM); -ECANCELED
 * when the waits were cancelled (ram_cancel_waits(), ram_disarm()): the
 * page may be missing; the source's -errno, also reported as the fault
 * thread's error (on_error).  Any thread, with no lock held that an
 * installer needs.
 */
int ram_fault_wait(struct ram *ram, uint64_t pg, uint32_t tid);
/*
 * Pages pg .. pg + n - 1 are present before the caller touches them: for
 * an own_thread_faults back end, ram_fault_wait() on each missing one (tid:
 * the caller's); for the others nothing (the kernel reports the access to
 * the fault thread).  0, or ram_fault_wait()'s -errno.
 */
int ram_ensure(struct ram *ram, uint64_t pg, uint64_t n, uint32_t tid);
/*
 * Ends every wait of ram_fault_wait() and makes later ones return
 * -ECANCELED at once, for good (ram_reset() clears it): the VM is
 * stopping.  Any thread, also with locks held (it takes none).
 */
void ram_cancel_waits(struct ram *ram);

/* ---- Synchronous installs ---- */

/*
 * For synchronous sources: claims page pg (MISSING or REQUESTED) and
 * installs it from the page-aligned private anonymous `page` (a moving
 * back end takes it), or a zero page, and wakes its waiters.  0 when the
 * page is in place, installed now or already there (counted in dups),
 * -errno if fatal.  Plain RAM: 0, nothing done.
 */
int ram_install(struct ram *ram, uint64_t pg, void *page);
int ram_install_zero(struct ram *ram, uint64_t pg);

/* ---- What others read: any thread, never blocks ---- */

/* Guest-physical 0 in this process's address space (ram_bytes() from there). */
uint8_t *ram_host(const struct ram *ram);
/* Bytes of guest RAM (page aligned), and the same in pages. */
uint64_t ram_bytes(const struct ram *ram);
uint64_t ram_nr_pages(const struct ram *ram);
/* True for lazy RAM while armed (a back end), false for plain RAM or once disarmed. */
bool ram_is_lazy(const struct ram *ram);
/* The back end while armed, NULL for plain RAM or once disarmed. */
const struct ram_backend_ops *ram_backend(const struct ram *ram);
/* True when the RAM has a page record (lazy RAM, disarmed or not). */
bool ram_has_record(const struct ram *ram);
/*
 * True when src is the RAM's page source: ram_start_faults() took it (also
 * when that call failed after taking it), so ram_destroy() destroys it and
 * the caller must not.
 */
bool ram_owns_source(const struct ram *ram, const struct ram_source *src);
/* Page pg is PRESENT (always, for plain RAM). */
bool ram_present(const struct ram *ram, uint64_t pg);
/* The fault thread's first fatal -errno, 0 while there is none. */
int ram_fault_error(const struct ram *ram);
/* Pages PRESENT: a hint of when to look at the record, never a decision. */
uint64_t ram_nr_present(const struct ram *ram);

/* ---- Blocked vCPU time (QEMU's postcopy-blocktime) ---- */

#define RAM_BLOCKTIME_MAX_VCPUS 4096

/*
 * Starts counting, as QEMU's postcopy-blocktime does, how long each of nr
 * vCPUs waits on missing pages (from the fault to the page's install),
 * and how long all of them wait at once.  vcpu_of(arg, tid) names the
 * vCPU (0 .. nr - 1) of a faulting thread, -1 for a thread that is none
 * (its faults are not counted); it runs on the fault thread.  Any thread,
 * the fault thread running or not.  -EOPNOTSUPP when the back end does
 * not say which thread faulted (userfault; uffd on a kernel without
 * UFFD_FEATURE_THREAD_ID), -EINVAL for plain RAM or a bad nr, -EBUSY
 * when counting already, -ENOMEM.
 */
int ram_blocktime_start(struct ram *ram, unsigned nr, int (*vcpu_of)(void *arg, uint32_t tid),
			void *arg);
/*
 * The waits ended so far, in microseconds: all vCPUs at once into
 * *all_us, vCPU i's into vcpu_us[i] (i < max).  The number of vCPUs
 * counted, or -ENOENT when not counting.
 */
int ram_blocktime_get(const struct ram *ram, uint64_t *all_us, uint64_t *vcpu_us, unsigned max);

struct ram_stats {
	uint64_t faults;	/* fault messages read */
	uint64_t requests;	/* pages asked of the source */
	uint64_t dup_faults;	/* faults on pages already requested */
	uint64_t late_faults;	/* faults on pages already present */
	uint64_t installed;	/* pages installed with data */
	uint64_t zeroed;	/* zero pages installed (mapped, or copied inside a run) */
	uint64_t dups;		/* ram_install*() of a page already there or claimed */
	uint64_t eexist;	/* the kernel had a page the record did not (should stay 0) */
	uint64_t own_thread;	/* faults served on the faulting thread (kvm-exit's path only) */
	uint64_t install_calls; /* the back end's calls that installed them */
};

void ram_get_stats(const struct ram *ram, struct ram_stats *st);

#endif /* RAM_RAM_H */
