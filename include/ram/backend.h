/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Guest RAM's back ends: one way each of arming RAM so that the kernel
 * reports missing-page faults to user space, and of installing pages.
 * One ops struct, one file per back end (ram/uffd.c, ram/userfault.c,
 * ram/kvm-exit.c), chosen once at start-up (ram_backend_find()).
 */
#ifndef RAM_BACKEND_H
#define RAM_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

struct ram;

/*
 * All offsets and lengths here are bytes, page aligned and relative to the
 * start of guest RAM: a back end speaks the kernel's ranges.  (The RAM
 * object's and the record's own calls take page numbers.)  A back end
 * finds the mapping through ram_host() and ram_bytes() (ram/ram.h).
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
	/*
	 * Faults are reported to no fault thread: the thread that meets a
	 * missing page serves it itself with ram_fault_wait() (a vCPU on
	 * KVM's exit), and every other access to guest RAM must first call
	 * ram_ensure().  fault_fd() is -1 and read_faults() finds nothing.
	 */
	bool own_thread_faults;
	/* What the kernel must offer, for a refusal's message; NULL: a stock userfaultfd. */
	const char *needs;
	/* 0 if the running kernel supports this back end, else -errno. */
	int (*probe)(void);
	/* Registers the whole RAM range; faults are reported from now on. */
	int (*arm)(struct ram *ram);
	/* fd that polls readable when faults are pending. */
	int (*fault_fd)(struct ram *ram);
	/*
	 * Non-blocking: up to max fault offsets, and in tids[] the id of the
	 * thread that faulted for each (0 where the back end cannot tell);
	 * 0 if none pending.
	 */
	int (*read_faults)(struct ram *ram, uint64_t *offs, uint32_t *tids, int max);
	/* Maps the page-aligned private anonymous page at `off`, and wakes. */
	int (*install)(struct ram *ram, uint64_t off, void *page);
	/*
	 * Optional (NULL: install page by page).  Copies the len bytes of
	 * consecutive pages at `pages` (page aligned; left intact, except by a
	 * moving back end, which takes them as its install() does) to
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
extern const struct ram_backend_ops ram_backend_kvm_exit;  /* patched kernel, own-thread faults */

/*
 * Chooses a back end by name: "uffd", "uffd-move", "userfault",
 * "kvm-exit", or "auto" (the first the kernel supports of userfault, uffd,
 * uffd-move: never kvm-exit, which needs the VMM's exit handling and
 * KVM's exit, neither of which this probe can see).
 * -EINVAL for an unknown name, -EOPNOTSUPP (or the probe's errno) when the
 * kernel lacks it.
 */
int ram_backend_find(const char *name, const struct ram_backend_ops **out);
/* The back end of that name whether the kernel has it or not (its needs), NULL for none. */
const struct ram_backend_ops *ram_backend_named(const char *name);

#endif /* RAM_BACKEND_H */
