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
 * Zero pages are installed by moving a freshly zeroed page.  A staging page
 * the kernel will not move (EBUSY: swapped, KSM, shared, pinned) is copied
 * into a fresh page first, so a migration never fails on it.
 * A stock kernel fails the protocol write (EINVAL) or MADV_USERFAULT.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

static int userfault_install(struct ram *ram, uint64_t off, void *page)
{
	long r = syscall(__NR_remap_anon_pages, ram->host + off, page, PAGE_SIZE, 0UL);

	r = r < 0 ? -errno : 0;
	if (r == -EBUSY)
		r = install_copy(ram, off, page);
	if (r < 0)
		return (int)r;
	return userfault_wake(ram, off, PAGE_SIZE);
}

static int userfault_zero(struct ram *ram, uint64_t off, uint64_t len)
{
	uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long r;

	if (buf == MAP_FAILED)
		return -ENOMEM;
	madvise(buf, len, MADV_NOHUGEPAGE);
	/* remap_anon_pages wants mapped source pages: write them. */
	for (uint64_t i = 0; i < len; i += PAGE_SIZE)
		buf[i] = 0;
	r = syscall(__NR_remap_anon_pages, ram->host + off, buf, len, 0UL);
	r = r < 0 ? -errno : 0;
	munmap(buf, len);
	if (r < 0)
		return (int)r;
	return userfault_wake(ram, off, len);
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
	.probe = userfault_probe,
	.arm = userfault_arm,
	.fault_fd = userfault_fault_fd,
	.read_faults = userfault_read_faults,
	.install = userfault_install,
	.zero = userfault_zero,
	.wake = userfault_wake,
	.disarm = userfault_disarm,
};
