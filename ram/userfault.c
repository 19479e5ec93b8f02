// SPDX-License-Identifier: GPL-2.0
/*
 * userfault: the seeds' API, on the patched node kernel only.
 *   madvise(MADV_USERFAULT) over guest RAM;
 *   fd = userfaultfd(O_CLOEXEC | O_NONBLOCK) (syscall 323); write the 64-bit
 *   USERFAULTFD_PROTOCOL, read it back (an unknown version reads all ones);
 *   claim the range: write {start | USERFAULTFD_RANGE_REGISTER, end};
 *   faults: read() returns 64-bit page-aligned fault addresses;
 *   install: remap_anon_pages(dst, src, 4096, 0) (syscall 451) moves the
 *   caller's page into place; then wake: write {start, end}.
 * Zero pages are installed by moving the shared zero page (ram_rap_zero()).
 * A staging page the kernel will not move (EBUSY: swapped, KSM, shared,
 * pinned) is copied into a fresh page first, so a migration never fails
 * on it.
 * A stock kernel fails the protocol write (EINVAL) or MADV_USERFAULT.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compat/userfault.h"
#include "internal.h"

static int open_protocol(void)
{
	uint64_t v = USERFAULTFD_PROTOCOL;
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	int r;

	if (fd < 0)
		return -errno;
	errno = 0;
	if (write(fd, &v, sizeof(v)) != sizeof(v)) {
		r = errno ? -errno : -EIO;
		goto fail;
	}
	v = 0;
	errno = 0;
	if (read(fd, &v, sizeof(v)) != sizeof(v)) {
		r = errno ? -errno : -EIO;
		goto fail;
	}
	if (v != USERFAULTFD_PROTOCOL) {
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return r == -EINVAL ? -EOPNOTSUPP : r;
}

static int userfault_probe(void)
{
	void *p = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int r, fd;

	if (p == MAP_FAILED)
		return -ENOMEM;
	r = madvise(p, PAGE_SIZE, MADV_USERFAULT) < 0 ? -EOPNOTSUPP : 0;
	munmap(p, PAGE_SIZE);
	if (r < 0)
		return r;
	fd = open_protocol();
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

static int write_range(int fd, uint64_t start, uint64_t end)
{
	uint64_t range[2] = { start, end };
	ssize_t n = write(fd, range, sizeof(range));

	if (n == sizeof(range))
		return 0;
	return n < 0 ? -errno : -EIO;
}

static int userfault_arm(struct ram *ram)
{
	uint64_t start = (uintptr_t)ram->host;
	int fd, r;

	if (madvise(ram->host, ram->size, MADV_USERFAULT) < 0)
		return errno == EINVAL ? -EOPNOTSUPP : -errno;
	fd = open_protocol();
	if (fd < 0)
		return fd;
	r = write_range(fd, start | USERFAULTFD_RANGE_REGISTER, start + ram->size);
	if (r < 0) {
		close(fd);
		madvise(ram->host, ram->size, MADV_NOUSERFAULT);
		return r;
	}
	ram->fd = fd;
	return 0;
}

static int userfault_fault_fd(struct ram *ram)
{
	return ram->fd;
}

/* The protocol's fault is an address alone: which thread faulted is not said (tid 0). */
static int userfault_read_faults(struct ram *ram, uint64_t *offs, uint32_t *tids, int max)
{
	uint64_t addrs[64];
	ssize_t n;
	int count = 0;

	if (max > (int)ARRAY_SIZE(addrs))
		max = (int)ARRAY_SIZE(addrs);
	n = read(ram->fd, addrs, (size_t)max * sizeof(addrs[0]));
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	for (ssize_t i = 0; i < n / 8; i++) {
		uint64_t a = addrs[i] & ~(PAGE_SIZE - 1);

		if (a < (uintptr_t)ram->host || a - (uintptr_t)ram->host >= ram->size)
			return -EFAULT;
		tids[count] = 0;
		offs[count++] = a - (uintptr_t)ram->host;
	}
	return count;
}

static int userfault_wake(struct ram *ram, uint64_t off, uint64_t len)
{
	uint64_t start = (uintptr_t)ram->host + off;

	return write_range(ram->fd, start, start + len);
}

/*
 * remap_anon_pages() refuses (EBUSY) a source page that is not this
 * process's alone: swapped out or in the swap cache, KSM-merged, shared
 * with a fork child, pinned.  Only its contents matter here: copy them into
 * a fresh private page, which is exclusive and present, and move that one.
 * The caller's page is left as it was.
 */
static int install_copy(struct ram *ram, uint64_t off, const void *page)
{
	uint8_t *fresh =
	    mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long r;

	if (fresh == MAP_FAILED)
		return -ENOMEM;
	memcpy(fresh, page, PAGE_SIZE);
	r = syscall(__NR_remap_anon_pages, ram->host + off, fresh, PAGE_SIZE, 0UL);
	r = r < 0 ? -errno : 0;
	munmap(fresh, PAGE_SIZE);
	return (int)r;
}

int ram_rap_install(struct ram *ram, uint64_t off, void *page)
{
	long r = syscall(__NR_remap_anon_pages, ram->host + off, page, PAGE_SIZE, 0UL);

	r = r < 0 ? -errno : 0;
	if (r == -EBUSY)
		r = install_copy(ram, off, page);
	return (int)r;
}

int ram_rap_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t len, uint64_t *there)
{
	*there = 0;
	for (uint64_t done = 0; done < len;) {
		long r = syscall(__NR_remap_anon_pages, ram->host + off + done,
				 (char *)pages + done, len - done, 0UL);
		int e;

		if (r > 0) {
			done += (uint64_t)r;
			continue;
		}
		if (r == 0)
			return -EIO; /* nothing moved and no error: never expected */
		e = errno == EBUSY ? install_copy(ram, off + done, (char *)pages + done) : -errno;
		if (e == -EAGAIN) {
			sched_yield(); /* the address space is changing: again */
			continue;
		}
		if (e == -EEXIST)
			(*there)++;
		else if (e < 0)
			return e;
		done += PAGE_SIZE; /* that page done (copied) or already there */
	}
	return 0;
}

static int userfault_install(struct ram *ram, uint64_t off, void *page)
{
	int r = ram_rap_install(ram, off, page);

	return r < 0 ? r : userfault_wake(ram, off, PAGE_SIZE);
}

/*
 * Zero pages are moved in as the shared zero page: a page of the RAM's
 * zero source that was only ever read maps the zero page, and
 * remap_anon_pages() moves that mapping as it is (docs/kernel-interfaces.md),
 * leaving a hole behind that the next read maps again.  So a zero page
 * costs a read fault and its share of one system call, and allocates
 * nothing.  (Until issue 29 each call mapped, wrote and unmapped a buffer
 * of fresh pages: in a TCG node the bulk receiver took 7.5 s of CPU for
 * the 8000 zero pages of a 32 MiB migration, against 0.15 s with uffd's
 * UFFDIO_ZEROPAGE.)  One source per RAM, under zero.lock: installers of
 * several threads share it.
 */
/* The zero source's first n bytes map the zero page again (a hole reads it in). */
static void map_zero_src(struct ram *ram, uint64_t n)
{
	for (uint64_t i = 0; i < n; i += PAGE_SIZE)
		(void)*(volatile uint8_t *)(ram->zero.src + i);
}

/*
 * Moves zero pages over [off, off + len): as few calls as the source's
 * size allows, each a TLB flush of the source (an IPI to every CPU that
 * runs a thread of this process: a vCPU in its guest must exit for it).
 * A short count goes on from the first page not done; a page already
 * there (EEXIST) is skipped and counted in *there.  0 or -errno.
 */
static int zero_moves(struct ram *ram, uint64_t off, uint64_t len, uint64_t *there)
{
	for (uint64_t done = 0; done < len;) {
		uint64_t n = len - done < RAM_ZERO_SRC_BYTES ? len - done : RAM_ZERO_SRC_BYTES;
		long r;

		map_zero_src(ram, n);
		r = syscall(__NR_remap_anon_pages, ram->host + off + done, ram->zero.src, n, 0UL);
		if (r > 0) {
			done += (uint64_t)r;
		} else if (r == 0) {
			return -EIO; /* nothing moved and no error: never expected */
		} else if (errno == EEXIST) {
			(*there)++;
			done += PAGE_SIZE;
		} else if (errno == EAGAIN) {
			sched_yield(); /* the address space is changing: again */
		} else {
			return -errno;
		}
	}
	return 0;
}

int ram_rap_zero(struct ram *ram, uint64_t off, uint64_t len, uint64_t *there)
{
	int r = 0;

	*there = 0;
	pthread_mutex_lock(&ram->zero.lock);
	if (!ram->zero.src) {
		void *p = mmap(NULL, RAM_ZERO_SRC_BYTES, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			r = -ENOMEM;
		else
			madvise(p, RAM_ZERO_SRC_BYTES, MADV_NOHUGEPAGE); /* no huge zero page */
		ram->zero.src = p == MAP_FAILED ? NULL : p;
	}
	if (r == 0)
		r = zero_moves(ram, off, len, there);
	pthread_mutex_unlock(&ram->zero.lock);
	return r;
}

/* The back end's zero(): one page (record.c), -EEXIST when it was there. */
static int userfault_zero(struct ram *ram, uint64_t off, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_zero(ram, off, len, &there);

	if (r == 0)
		r = userfault_wake(ram, off, len);
	return r == 0 && there ? -EEXIST : r;
}

/* install_run: moved in as few calls as the kernel allows, woken at once; the pages already there. */
static int userfault_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_install_run(ram, off, pages, len, &there);

	if (r == 0)
		r = userfault_wake(ram, off, len);
	return r < 0 ? r : (int)there;
}

/* zero_run: the pages already there are woken with the rest, and counted. */
static int userfault_zero_run(struct ram *ram, uint64_t off, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_zero(ram, off, len, &there);

	if (r == 0)
		r = userfault_wake(ram, off, len);
	return r < 0 ? r : (int)there;
}

static void userfault_disarm(struct ram *ram)
{
	if (ram->fd < 0)
		return;
	/* Flag off first: threads woken by the close then get zero-fill, not SIGBUS. */
	madvise(ram->host, ram->size, MADV_NOUSERFAULT);
	close(ram->fd);
	ram->fd = -1;
}

const struct ram_backend_ops ram_backend_userfault = {
	.name = "userfault",
	.moves_pages = true,
	.needs = "MADV_USERFAULT, remap_anon_pages() and the article's userfaultfd protocol "
		 "(the patched node kernel, kernel-patches/0002-0004)",
	.probe = userfault_probe,
	.arm = userfault_arm,
	.fault_fd = userfault_fault_fd,
	.read_faults = userfault_read_faults,
	.install = userfault_install,
	.install_run = userfault_install_run,
	.zero = userfault_zero,
	.zero_run = userfault_zero_run,
	.wake = userfault_wake,
	.disarm = userfault_disarm,
};
