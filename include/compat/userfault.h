/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User-space view of the page-fault interfaces this project uses, for
 * builds against headers that predate them.
 *
 * Two families live here:
 *
 *  1. The seeds' API, added to linux-source-6.1 by kernel-patches/:
 *     MADV_USERFAULT/MADV_NOUSERFAULT, the remap_anon_pages() system call
 *     and the article's userfaultfd protocol.  The numbers below must match
 *     the uapi headers the series adds (docs/kernel-interfaces.md).
 *
 *  2. Upstream UFFDIO_MOVE (Linux 6.8+), which Debian 12's linux-libc-dev
 *     (6.1) does not define although the host kernel may implement it.
 *     Definitions match include/uapi/linux/userfaultfd.h upstream; whether
 *     the running kernel has it is probed at run time through the feature
 *     bits UFFDIO_API returns, never assumed from these macros.
 *
 * Every definition is guarded so that newer system headers win.
 */
#ifndef COMPAT_USERFAULT_H
#define COMPAT_USERFAULT_H

#include <linux/types.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

/* ---- MADV_USERFAULT (kernel-patches, asm-generic/mman-common.h) ---- */

/* Missing-page faults in the range go to user space (SIGBUS or userfaultfd). */
#ifndef MADV_USERFAULT
#define MADV_USERFAULT 26
#endif
/* Back to ordinary demand-zero faults. */
#ifndef MADV_NOUSERFAULT
#define MADV_NOUSERFAULT 27
#endif

/* ---- remap_anon_pages() (kernel-patches, x86_64 syscall 451) ---- */

#ifndef __NR_remap_anon_pages
#define __NR_remap_anon_pages 451
#endif
/* Skip unmapped source pages instead of failing with -ENOENT. */
#ifndef RAP_ALLOW_SRC_HOLES
#define RAP_ALLOW_SRC_HOLES (1UL << 0)
#endif

/* ---- The article's userfaultfd protocol (kernel-patches) ---- */

/*
 * A userfaultfd whose first operation is write() of this 64-bit number
 * speaks the article's protocol; read() then answers the same number, or
 * USERFAULTFD_UNKNOWN_PROTOCOL if the kernel does not speak it.
 */
#ifndef USERFAULTFD_PROTOCOL
#define USERFAULTFD_PROTOCOL ((__u64)0xaa)
#endif
#ifndef USERFAULTFD_UNKNOWN_PROTOCOL
#define USERFAULTFD_UNKNOWN_PROTOCOL ((__u64)-1)
#endif
/* Set on the start address of a (start, end) write: claim, not wake. */
#ifndef USERFAULTFD_RANGE_REGISTER
#define USERFAULTFD_RANGE_REGISTER ((__u64)1)
#endif
/* Set instead: release this fd's claim on [start, end). */
#ifndef USERFAULTFD_RANGE_UNREGISTER
#define USERFAULTFD_RANGE_UNREGISTER ((__u64)2)
#endif

/* ---- Upstream UFFDIO_MOVE (Linux 6.8+) ---- */

#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1ULL << 16)
#endif

#ifndef _UFFDIO_MOVE
#define _UFFDIO_MOVE (0x05)
#endif

#ifndef UFFDIO_MOVE
struct uffdio_move {
	__u64 dst;
	__u64 src;
	__u64 len;
#define UFFDIO_MOVE_MODE_DONTWAKE	 ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
	__u64 mode;
	/* Bytes moved, or a negated errno. */
	__s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif

#endif /* COMPAT_USERFAULT_H */
