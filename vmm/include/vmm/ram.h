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
 * The page record (below) says where each page is.
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

/* ---- The page record ---- */

/*
 * The page record: one atomic word per page of lazy RAM, the one record of
 * where each page is at this host.  Everything else is derived from it:
 * whether a fault must ask for the page, which pages a recovering link says
 * it has, when the migration is complete, the arrival timeline and the
 * page map.  Its only writers are ram_claim() (and ram_unclaim(), which
 * undoes a claim) and the ram_install*() calls:
 *
 *            fault                      arrival (claim)           install
 *   MISSING -------> REQUESTED ----------------------> INSTALLING -------> PRESENT
 *      |  ^                                               ^
 *      |  | dirtied again                                 | fault or stager (claim)
 *      v  |                                               |
 *     STAGED (a copy waits outside guest RAM: precopy) ---+
 *
 * A page is INSTALLING in the hands of exactly one thread, so it is
 * installed once; PRESENT never goes back.  Beside the state the word
 * holds how the page came (RAM_BY_*), whether it is a zero page, and a
 * time in ns since ram->t0: the fault's while REQUESTED, the arrival's
 * once PRESENT.  Plain RAM (no back end) has no record: every page counts
 * present.
 */
enum ram_page_state {
	RAM_PAGE_MISSING,
	RAM_PAGE_REQUESTED,
	RAM_PAGE_STAGED,
	RAM_PAGE_INSTALLING,
	RAM_PAGE_PRESENT,
};

/* How a page came; the numbers are the page map's (docs/bench.md) plus one. */
enum ram_arrival {
	RAM_BY_NONE,
	RAM_BY_DEMAND,	/* a reply to this host's request */
	RAM_BY_PUSH,	/* the source's background push */
	RAM_BY_PRECOPY, /* staged before the switch-over */
	RAM_BY_SOURCE,	/* a synchronous page source (a file, a buffer) */
};

#define RAM_FROM(state)	    (1u << (state))
#define RAM_WORD_STATE_MASK 0x7ull
#define RAM_WORD_BY_SHIFT   3
#define RAM_WORD_ZERO	    (1ull << 6)
#define RAM_WORD_TIME_SHIFT 8

static inline uint64_t ram_page_word(const struct ram *ram, uint64_t pg);

static inline enum ram_page_state ram_word_state(uint64_t w)
{
	return (enum ram_page_state)(w & RAM_WORD_STATE_MASK);
}

static inline enum ram_arrival ram_word_by(uint64_t w)
{
	return (enum ram_arrival)((w >> RAM_WORD_BY_SHIFT) & 7);
}

static inline bool ram_word_zero(uint64_t w)
{
	return w & RAM_WORD_ZERO;
}

/*
 * Moves page pg from one of the states in `from` (RAM_FROM() masks) to
 * `to`, stamped with the current time, how (RAM_BY_NONE keeps the old
 * word's) and the zero flag.  True on success, the replaced word in *old;
 * false when the page was in none of those states, its word in *old.
 */
bool ram_claim(struct ram *ram, uint64_t pg, unsigned from, enum ram_page_state to,
	       enum ram_arrival by, bool zero, uint64_t *old);
/* Gives back a claim whose install failed: the page's word becomes old again. */
void ram_unclaim(struct ram *ram, uint64_t pg, uint64_t old);

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
	int (*request)(struct ram_source *src, struct ram *ram, uint64_t off);
	int (*staged)(struct ram_source *src, struct ram *ram, uint64_t off);
	int (*reply_fd)(struct ram_source *src);
	int (*replies)(struct ram_source *src, struct ram *ram);
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
	uint64_t dups;	      /* ram_install*() of a page already there or claimed */
	uint64_t eexist;      /* the kernel had a page the record did not (should stay 0) */
};

struct ram {
	uint8_t *host; /* guest-physical 0 in our address space */
	uint64_t size; /* bytes, page aligned */
	uint64_t nr_pages;
	/* Lazy RAM only (ops == NULL for plain RAM): */
	const struct ram_backend_ops *ops;
	int fd;			 /* back end's descriptor */
	void *priv;		 /* back end's private data */
	_Atomic uint64_t *pages; /* the page record: one word per page */
	uint64_t t0;		 /* CLOCK_MONOTONIC ns the record's times count from */
	_Atomic uint64_t nr_present;
	struct ram_source *source;
	bool busy_poll;
	int kick_fd; /* eventfd that wakes the fault thread: to stop, to look again */
	atomic_bool stop;
	bool thread_started;
	pthread_t thread;
	_Atomic int error;		      /* first fatal -errno of the fault thread */
	void (*on_error)(void *arg, int err); /* called once on a fatal error */
	void *on_error_arg;
	struct {
		_Atomic uint64_t faults, requests, dup_faults, late_faults, installed, zeroed, dups,
		    eexist;
	} st;
};

/*
 * What code outside vmm/ram/ reads of a RAM object: these calls, not its
 * fields (the migration library's dest*.c still reads size and nr_pages
 * directly; they are to be converted).  Any thread, never block.
 */

/* Guest-physical 0 in this process's address space (size bytes from there). */
static inline uint8_t *ram_host(const struct ram *ram)
{
	return ram->host;
}

/* Bytes of guest RAM (page aligned), and the same in 4 KiB pages. */
static inline uint64_t ram_bytes(const struct ram *ram)
{
	return ram->size;
}

static inline uint64_t ram_nr_pages(const struct ram *ram)
{
	return ram->nr_pages;
}

/* True for lazy RAM (a back end and a page record), false for plain RAM. */
static inline bool ram_is_lazy(const struct ram *ram)
{
	return ram->ops != NULL;
}

/*
 * True when src is the RAM's page source: ram_start_faults() took it (also
 * when that call failed after taking it), so ram_exit() destroys it and the
 * caller must not.
 */
static inline bool ram_owns_source(const struct ram *ram, const struct ram_source *src)
{
	return ram->source == src;
}

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
 * Lazy RAM's record as ram_init() left it, for a RAM object used again
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

/*
 * Installs n consecutive pages at page pg, every one claimed by the caller
 * (INSTALLING), from the page-aligned private anonymous buffer `pages`
 * (n * 4 KiB; NULL: zero pages) and wakes their waiters: one call into the
 * kernel for the run where the back end has install_run / zero_run, else
 * page by page (a moving back end takes the buffer's pages).  The pages
 * become PRESENT, arrived `by` now.  0, or a fatal -errno (the pages stay
 * INSTALLING: give them back with ram_unclaim()).
 */
int ram_install_claimed(struct ram *ram, uint64_t pg, void *pages, uint64_t n, enum ram_arrival by);
/*
 * For synchronous sources: claims the page at `off` (MISSING or REQUESTED)
 * and installs it from `page` (as above), or a zero page.  0 when the page
 * is in place, installed now or already there (counted in dups), -errno
 * if fatal.  Plain RAM: 0, nothing done.
 */
int ram_install(struct ram *ram, uint64_t off, void *page);
int ram_install_zero(struct ram *ram, uint64_t off);

static inline uint64_t ram_page_word(const struct ram *ram, uint64_t pg)
{
	return atomic_load_explicit(&ram->pages[pg], memory_order_acquire);
}

/* CLOCK_MONOTONIC ns of a word's time (0 if it has none). */
static inline uint64_t ram_word_time_ns(const struct ram *ram, uint64_t w)
{
	uint64_t rel = w >> RAM_WORD_TIME_SHIFT;

	return rel ? ram->t0 + rel : 0;
}

static inline bool ram_present(const struct ram *ram, uint64_t off)
{
	return !ram->pages || ram_word_state(ram_page_word(ram, off >> 12)) == RAM_PAGE_PRESENT;
}

static inline uint64_t ram_nr_present(struct ram *ram)
{
	return atomic_load(&ram->nr_present);
}

void ram_get_stats(struct ram *ram, struct ram_stats *st);

#endif /* VMM_RAM_H */
