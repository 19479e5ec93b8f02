// SPDX-License-Identifier: GPL-2.0
/*
 * uffd, uffd-move: the upstream userfaultfd ioctl API (stock kernels).
 * UFFDIO_API, UFFDIO_REGISTER in missing mode over guest RAM, faults read
 * as struct uffd_msg, pages installed with UFFDIO_COPY (uffd) or
 * UFFDIO_MOVE (uffd-move, Linux 6.8+, probed through the feature bits
 * UFFDIO_API returns), zero pages with UFFDIO_ZEROPAGE, UFFDIO_WAKE.
 * The descriptor is opened without UFFD_USER_MODE_ONLY: KVM's own accesses
 * to guest RAM fault in kernel mode.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compat/userfault.h"
#include "internal.h"

static int open_uffd(uint64_t want, uint64_t *have)
{
	struct uffdio_api api = { .api = UFFD_API, .features = want };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	if (have)
		*have = api.features;
	return fd;
}

static int probe_features(uint64_t *features)
{
	int fd = open_uffd(0, features);

	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

static int uffd_probe(void)
{
	uint64_t f;

	return probe_features(&f);
}

static int uffd_move_probe(void)
{
	uint64_t f;
	int r = probe_features(&f);

	if (r < 0)
		return r;
	return (f & UFFD_FEATURE_MOVE) ? 0 : -EOPNOTSUPP;
}

static int arm(struct ram *ram, bool move)
{
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)ram->host, .len = ram->size },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	uint64_t need = (1ULL << _UFFDIO_WAKE) | (1ULL << _UFFDIO_ZEROPAGE) |
			(move ? 1ULL << _UFFDIO_MOVE : 1ULL << _UFFDIO_COPY);
	uint64_t tid = 0;
	int fd;

	/* The faulting thread's id where the kernel gives it (4.14+): blocked vCPU time. */
	if (probe_features(&tid) < 0)
		tid = 0;
	tid &= UFFD_FEATURE_THREAD_ID;
	fd = open_uffd((move ? UFFD_FEATURE_MOVE : 0) | tid, NULL);
	if (fd < 0)
		return fd;
	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	/* UFFDIO_MOVE is not a per-range ioctl on every kernel: trust the feature. */
	if ((reg.ioctls & need & ~(1ULL << _UFFDIO_MOVE)) != (need & ~(1ULL << _UFFDIO_MOVE))) {
		close(fd);
		return -EOPNOTSUPP;
	}
	ram->fd = fd;
	ram->fault_tids = tid != 0;
	return 0;
}

static int uffd_arm(struct ram *ram)
{
	return arm(ram, false);
}

static int uffd_move_arm(struct ram *ram)
{
	return arm(ram, true);
}

static int uffd_fault_fd(struct ram *ram)
{
	return ram->fd;
}

static int uffd_read_faults(struct ram *ram, uint64_t *offs, uint32_t *tids, int max)
{
	struct uffd_msg msgs[64];
	ssize_t n;
	int count = 0;

	if (max > (int)ARRAY_SIZE(msgs))
		max = (int)ARRAY_SIZE(msgs);
	n = read(ram->fd, msgs, (size_t)max * sizeof(msgs[0]));
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	for (ssize_t i = 0; i < n / (ssize_t)sizeof(msgs[0]); i++) {
		uint64_t addr;

		if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
			continue;
		addr = msgs[i].arg.pagefault.address & ~(PAGE_SIZE - 1);
		if (addr < (uintptr_t)ram->host || addr - (uintptr_t)ram->host >= ram->size)
			return -EFAULT;
		tids[count] = ram->fault_tids ? msgs[i].arg.pagefault.feat.ptid : 0;
		offs[count++] = addr - (uintptr_t)ram->host;
	}
	return count;
}

static int uffd_wake(struct ram *ram, uint64_t off, uint64_t len);

enum run_op {
	RUN_COPY,
	RUN_MOVE,
	RUN_ZERO
};

/*
 * One ioctl of op over len bytes at off (from pages, NULL for zero
 * pages): 0 when it did them all, else the kernel's count, bytes done
 * (> 0) or -errno.
 */
static int64_t run_ioctl(struct ram *ram, enum run_op op, uint64_t off, void *pages, uint64_t len)
{
	uint64_t dst = (uintptr_t)ram->host + off;

	if (op == RUN_COPY) {
		struct uffdio_copy c = { .dst = dst, .src = (uintptr_t)pages, .len = len };

		return ioctl(ram->fd, UFFDIO_COPY, &c) == 0 ? 0 : c.copy ? c.copy : -errno;
	}
	if (op == RUN_MOVE) {
		struct uffdio_move m = { .dst = dst, .src = (uintptr_t)pages, .len = len };

		return ioctl(ram->fd, UFFDIO_MOVE, &m) == 0 ? 0 : m.move ? m.move : -errno;
	}
	struct uffdio_zeropage z = { .range = { .start = dst, .len = len } };

	return ioctl(ram->fd, UFFDIO_ZEROPAGE, &z) == 0 ? 0 : z.zeropage ? z.zeropage : -errno;
}

/*
 * One ioctl for the run.  The kernel stops at a page already there
 * (EEXIST for that page if it is the first, else a partial count and
 * EAGAIN) or when the address space changes (EAGAIN): continue after the
 * pages done, skipping (and waking) a page found there.  A page UFFDIO_MOVE
 * cannot take (EBUSY: not exclusive to this process) is copied instead.
 * How many pages were there already, or a fatal -errno.
 */
static int uffd_run(struct ram *ram, enum run_op op, uint64_t off, void *pages, uint64_t len)
{
	uint64_t done = 0;
	int existed = 0;

	while (done < len) {
		void *from = pages ? (char *)pages + done : NULL;
		int64_t r = run_ioctl(ram, op, off + done, from, len - done);

		if (r == -EBUSY && op == RUN_MOVE) {
			r = run_ioctl(ram, RUN_COPY, off + done, from, PAGE_SIZE);
			if (r == 0)
				r = PAGE_SIZE;
		}
		if (r == 0)
			return existed;
		if (r > 0) {
			done += (uint64_t)r;
		} else if (r == -EEXIST) {
			int w = uffd_wake(ram, off + done, PAGE_SIZE);

			if (w < 0)
				return w;
			existed++;
			done += PAGE_SIZE;
		} else if (r == -EAGAIN) {
			sched_yield();
		} else {
			return (int)r;
		}
	}
	return existed;
}

static int uffd_copy_run(struct ram *ram, uint64_t off, void *pages, uint64_t len)
{
	return uffd_run(ram, RUN_COPY, off, pages, len);
}

static int uffd_move_run(struct ram *ram, uint64_t off, void *pages, uint64_t len)
{
	return uffd_run(ram, RUN_MOVE, off, pages, len);
}

static int uffd_zero_run(struct ram *ram, uint64_t off, uint64_t len)
{
	return uffd_run(ram, RUN_ZERO, off, NULL, len);
}

/*
 * One ioctl of op without the run's retries: 0, or -errno (-EEXIST: the
 * page is there; a partial count reads as -EAGAIN, as the kernel's errno).
 */
static int one_ioctl(struct ram *ram, enum run_op op, uint64_t off, void *page, uint64_t len)
{
	int64_t r = run_ioctl(ram, op, off, page, len);

	return r > 0 ? -EAGAIN : (int)r;
}

static int uffd_copy(struct ram *ram, uint64_t off, void *page)
{
	return one_ioctl(ram, RUN_COPY, off, page, PAGE_SIZE);
}

/* As the run: a page the kernel will not move (EBUSY) is copied. */
static int uffd_move(struct ram *ram, uint64_t off, void *page)
{
	int r = one_ioctl(ram, RUN_MOVE, off, page, PAGE_SIZE);

	return r == -EBUSY ? one_ioctl(ram, RUN_COPY, off, page, PAGE_SIZE) : r;
}

static int uffd_zero(struct ram *ram, uint64_t off, uint64_t len)
{
	return one_ioctl(ram, RUN_ZERO, off, NULL, len);
}

static int uffd_wake(struct ram *ram, uint64_t off, uint64_t len)
{
	struct uffdio_range r = { .start = (uintptr_t)ram->host + off, .len = len };

	return ioctl(ram->fd, UFFDIO_WAKE, &r) < 0 ? -errno : 0;
}

static void uffd_disarm(struct ram *ram)
{
	struct uffdio_range r = { .start = (uintptr_t)ram->host, .len = ram->size };

	if (ram->fd < 0)
		return;
	ioctl(ram->fd, UFFDIO_UNREGISTER, &r);
	close(ram->fd);
	ram->fd = -1;
}

const struct ram_backend_ops ram_backend_uffd = {
	.name = "uffd",
	.moves_pages = false,
	.probe = uffd_probe,
	.arm = uffd_arm,
	.fault_fd = uffd_fault_fd,
	.read_faults = uffd_read_faults,
	.install = uffd_copy,
	.install_run = uffd_copy_run,
	.zero_run = uffd_zero_run,
	.zero = uffd_zero,
	.wake = uffd_wake,
	.disarm = uffd_disarm,
};

const struct ram_backend_ops ram_backend_uffd_move = {
	.name = "uffd-move",
	.moves_pages = true,
	.probe = uffd_move_probe,
	.arm = uffd_move_arm,
	.fault_fd = uffd_fault_fd,
	.read_faults = uffd_read_faults,
	.install = uffd_move,
	.install_run = uffd_move_run,
	.zero_run = uffd_zero_run,
	.zero = uffd_zero,
	.wake = uffd_wake,
	.disarm = uffd_disarm,
};
