/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Guest RAM: anonymous memory, optionally filled lazily by user-space page
 * faults through one of several back ends.
 *
 * Lazy RAM in one paragraph: the RAM range is armed with a back end (the
 * kernel then reports missing-page faults to us instead of zero-filling);
 * a fault thread per VM reads fault offsets and asks a page source for each
 * page; the source installs the page at once (synchronous sources) or later
 * from any thread (asynchronous sources such as the migration agent) with
 * ram_install()/ram_install_zero(), which also wake the faulting threads.
 * A per-page "present" bitmap says which pages are in place.
 */
#ifndef VMM_RAM_H
#define VMM_RAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct ram;

/* ---- Back ends ---- */

/*
 * One back end = one way of arming RAM and installing pages.  All offsets
 * and lengths are page aligned and relative to the start of guest RAM.
 *
 * Errno contract for install/zero/wake (returned as -errno):
 *   EEXIST  the page is already there: counts as success (the caller still
 *           wakes the range, a faulting thread may be waiting on it)
 *   EAGAIN  transient (e.g. the address space is changing): retry
 *   other   fatal for this VM
 *
 * Threads: install/zero/wake may be called from any thread at the same
 * time; read_faults only from the fault thread.
 */
struct ram_backend_ops {
	const char *name;
	/* install() moves the page out of the caller's buffer (zero copy). */
	bool moves_pages;
	/* 0 if the running kernel supports this back end, else -errno. */
	int (*probe)(void);
	/* Registers the whole RAM range; faults are reported from now on. */
	int (*arm)(struct ram *ram);
	/* fd that polls readable when faults are pending. */
	int (*fault_fd)(struct ram *ram);
	/* Non-blocking: up to max fault offsets; 0 if none pending. */
	int (*read_faults)(struct ram *ram, uint64_t *offs, int max);
	/* Maps the page-aligned private anonymous page at `off`, and wakes. */
	int (*install)(struct ram *ram, uint64_t off, void *page);
	/*
	 * Optional (NULL: install page by page).  Copies the len bytes of
	 * consecutive pages at `pages` (page aligned, left intact) to
	 * [off, off + len) in as few calls as it can, and wakes.  Pages found
	 * already there are skipped and woken.  Returns how many pages were
	 * already there (>= 0), or a fatal -errno.
	 */
	int (*install_run)(struct ram *ram, uint64_t off, void *pages, uint64_t len);
	/* Optional, the same for zero pages over [off, off + len). */
	int (*zero_run)(struct ram *ram, uint64_t off, uint64_t len);
	/* Maps zero pages over [off, off + len), and wakes. */
	int (*zero)(struct ram *ram, uint64_t off, uint64_t len);
	/* Wakes threads waiting on faults in [off, off + len). */
	int (*wake)(struct ram *ram, uint64_t off, uint64_t len);
	/* Unregisters the range and closes the back end's descriptors. */
	void (*disarm)(struct ram *ram);
};

extern const struct ram_backend_ops ram_backend_uffd;	   /* UFFDIO_COPY */
extern const struct ram_backend_ops ram_backend_uffd_move; /* UFFDIO_MOVE */
extern const struct ram_backend_ops ram_backend_userfault; /* patched kernel */

/*
 * Chooses a back end by name: "uffd", "uffd-move", "userfault", or "auto"
 * (the first the kernel supports of userfault, uffd, uffd-move).
 * -EINVAL for an unknown name, -EOPNOTSUPP (or the probe's errno) when the
 * kernel lacks it.
 */
int ram_backend_find(const char *name, const struct ram_backend_ops **out);

/* ---- Page sources ---- */

#define RAM_SOURCE_PENDING 1

/*
 * Where missing pages come from.  request() runs on the fault thread for a
 * page that is neither present nor already requested.  It returns 0 once it
 * has installed the page (ram_install or ram_install_zero),
 * RAM_SOURCE_PENDING if the page will be installed later by some thread
 * (the faulting vCPU waits until then), or -errno to fail the VM.
 * destroy() frees the source (may be NULL).
 */
struct ram_source {
	int (*request)(struct ram_source *src, struct ram *ram, uint64_t off);
	void (*destroy)(struct ram_source *src);
};

/* Pages from a file: RAM byte x is file byte offset + x. */
int ram_source_file_create(const char *path, uint64_t offset, uint64_t size,
			   struct ram_source **out);
/* Pages copied from a buffer of `size` bytes (kept by the caller). */
int ram_source_buffer_create(const void *buf, uint64_t size, struct ram_source **out);

/* ---- The RAM object ---- */

struct ram_stats {
	uint64_t faults;      /* fault messages read */
	uint64_t requests;    /* pages asked of the source */
	uint64_t dup_faults;  /* faults on pages already requested */
	uint64_t late_faults; /* faults on pages already present */
	uint64_t installed;   /* pages installed with data */
	uint64_t zeroed;      /* pages installed as zero */
	uint64_t eexist;      /* installs that found the page there */
};

struct ram {
	uint8_t *host; /* guest-physical 0 in our address space */
	uint64_t size; /* bytes, page aligned */
	uint64_t nr_pages;
	/* Lazy RAM only (ops == NULL for plain RAM): */
	const struct ram_backend_ops *ops;
	int fd;			     /* back end's descriptor */
	void *priv;		     /* back end's private data */
	_Atomic uint64_t *present;   /* bitmap: page is mapped */
	_Atomic uint64_t *requested; /* bitmap: page asked of the source */
	_Atomic uint64_t nr_present;
	struct ram_source *source;
	bool busy_poll;
	int stop_fd; /* eventfd that stops the fault thread */
	atomic_bool stop;
	bool thread_started;
	pthread_t thread;
	_Atomic int error;		      /* first fatal -errno of the fault thread */
	void (*on_error)(void *arg, int err); /* called once on a fatal error */
	void *on_error_arg;
	struct {
		_Atomic uint64_t faults, requests, dup_faults, late_faults, installed, zeroed,
		    eexist;
	} st;
};

/*
 * Maps `size` bytes of anonymous memory.  With a back end (lazy RAM) the
 * range is armed at once, so nothing may touch it before a fault thread
 * runs; with ops == NULL it is ordinary RAM and every page counts present.
 * -ENOMEM if the memory cannot be reserved, back end errors as they come.
 */
int ram_init(struct ram *ram, uint64_t size, const struct ram_backend_ops *ops);
/*
 * Unregisters lazy RAM (fault thread stopped first): threads waiting on
 * missing pages wake and get ordinary zero-fill from now on.  For teardown.
 */
void ram_disarm(struct ram *ram);
/* Stops the fault thread, disarms, unmaps, frees the source. */
void ram_exit(struct ram *ram);

/*
 * Starts the fault thread; `src` becomes owned by ram.  busy_poll: spin on
 * the non-blocking fault descriptor instead of sleeping in poll() (lower
 * latency, burns one CPU).
 */
int ram_start_faults(struct ram *ram, struct ram_source *src, bool busy_poll);
/* Stops and joins the fault thread (idempotent). */
void ram_stop_faults(struct ram *ram);

/*
 * Installs a page at `off` and wakes its waiters; any thread.  page: a
 * page-aligned private anonymous buffer; with a moving back end its page is
 * gone after success (the buffer reads as zero, writing it allocates anew).
 * Returns 0 if installed now, 1 if the page was already present (nothing
 * consumed), -errno if fatal.  Plain RAM counts every page present: 1.
 */
int ram_install(struct ram *ram, uint64_t off, void *page);
/*
 * Installs n consecutive pages at `off` from the page-aligned private
 * anonymous buffer `pages` (n * 4 KiB) and wakes their waiters: one call
 * into the kernel for the run where the back end has install_run (UFFDIO_COPY
 * of several pages costs about half as much per page as one call per page),
 * else page by page (a moving back end takes the buffer's pages).  pages
 * NULL: zero pages (zero_run, ~0.1 us a page against ~0.8 us one by one).
 * Returns how many of the pages were already present (>= 0), or -errno if
 * fatal.
 */
int ram_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t n);
/* Same as ram_install for a zero page. */
int ram_install_zero(struct ram *ram, uint64_t off);

static inline bool ram_present(const struct ram *ram, uint64_t off)
{
	uint64_t pg = off >> 12;

	return atomic_load_explicit(&ram->present[pg / 64], memory_order_acquire) &
	       (1ULL << (pg % 64));
}

/*
 * True once a fault asked the source for the page.  Requested but not
 * present = still owed by the source (e.g. to re-request after a broken link).
 */
static inline bool ram_requested(const struct ram *ram, uint64_t off)
{
	uint64_t pg = off >> 12;

	return atomic_load_explicit(&ram->requested[pg / 64], memory_order_acquire) &
	       (1ULL << (pg % 64));
}

static inline uint64_t ram_nr_present(struct ram *ram)
{
	return atomic_load(&ram->nr_present);
}

void ram_get_stats(struct ram *ram, struct ram_stats *st);

#endif /* VMM_RAM_H */
