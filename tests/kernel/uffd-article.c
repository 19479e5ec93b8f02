// SPDX-License-Identifier: GPL-2.0
/*
 * uffd-article: the article's userfaultfd protocol (write the version, read
 * it back, read fault addresses, write (start | 1, end) claims and (start,
 * end) wakes) beside the ioctl protocol.
 *
 * Handshake (right and wrong version then a retry, short writes, read before
 * it), the exclusion with UFFDIO_API both ways, what an ioctl-protocol user
 * sees of the fd (F_GETFL, fdinfo, write()'s EBADF, as in 6.1), releasing a
 * claim (USERFAULTFD_RANGE_UNREGISTER), bad writes (sizes, alignment, empty
 * ranges, memory without MADV_USERFAULT, holes), overlapping claims of two
 * fds, several pairs per write, O_NONBLOCK and poll; then faults: one fault
 * resolved with remap_anon_pages() and woken, a second thread faulting while
 * the first is being handled, several addresses in one read, a kernel access
 * (copy_from_user), a GUP from another process (process_vm_readv) blocking
 * without mmap_lock held (an mmap/munmap of the faulting process completes
 * meanwhile), closing the fd with faults pending (SIGBUS), and the claim
 * not surviving fork or mremap.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "kt.h"

static long ps;

/* ---- a thread that touches memory, surviving SIGBUS ---- */

static __thread sigjmp_buf bus_jmp;
static __thread volatile sig_atomic_t bus_armed;
static __thread void *volatile bus_addr;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (!bus_armed)
		_exit(3);
	bus_addr = si->si_addr;
	bus_armed = 0;
	siglongjmp(bus_jmp, 1);
}

enum touch_op {
	TOUCH_READ,
	TOUCH_WRITE,
	TOUCH_KERNEL
};

struct toucher {
	pthread_t th;
	volatile uint8_t *addr;
	enum touch_op op;
	volatile int done;
	int sigbus;	  /* got SIGBUS */
	void *bus_addr;	  /* its si_addr */
	int err;	  /* errno of a failed kernel access */
	uint8_t value[8]; /* what was read */
};

static void *toucher_main(void *arg)
{
	struct toucher *t = arg;
	int pipefd[2];

	if (sigsetjmp(bus_jmp, 1)) {
		t->sigbus = 1;
		t->bus_addr = bus_addr;
		goto out;
	}
	bus_armed = 1;
	switch (t->op) {
	case TOUCH_READ:
		for (int i = 0; i < 8; i++)
			t->value[i] = t->addr[i];
		break;
	case TOUCH_WRITE:
		t->addr[0] = 0x77;
		t->value[0] = t->addr[0];
		break;
	case TOUCH_KERNEL:
		/* copy_from_user() of the missing page, then read it back. */
		if (pipe(pipefd) == 0) {
			if (write(pipefd[1], (void *)t->addr, 8) != 8 ||
			    read(pipefd[0], t->value, 8) != 8)
				t->err = errno;
			close(pipefd[0]);
			close(pipefd[1]);
		}
		break;
	}
	bus_armed = 0;
out:
	__atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void toucher_start(struct toucher *t, void *addr, enum touch_op op)
{
	memset(t, 0, sizeof(*t));
	t->addr = addr;
	t->op = op;
	if (pthread_create(&t->th, NULL, toucher_main, t))
		kt_fatal("pthread_create");
}

/* Wait up to @ms for the toucher to finish; joins it if it did. */
static int toucher_wait(struct toucher *t, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
			pthread_join(t->th, NULL);
			return 1;
		}
		usleep(1000);
	}
	return 0;
}

/* ---- handler side ---- */

/* Next fault address (poll up to @ms first), 0 on timeout or error. */
static uint64_t read_fault(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t addr;

	if (poll(&p, 1, ms) != 1 || !(p.revents & POLLIN))
		return 0;
	if (read(fd, &addr, sizeof(addr)) != sizeof(addr))
		return 0;
	return addr;
}

/* Faults pending (not read yet) on @fd, from /proc/self/fdinfo. */
static long pending_faults(int fd)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "pending: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

static int wait_pending(int fd, long n, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (pending_faults(fd) >= n)
			return 1;
		usleep(1000);
	}
	return 0;
}

/* Put a page whose bytes are seed, seed+1, ... at @dst and wake it. */
static int resolve(int fd, void *dst, uint8_t seed)
{
	uint8_t *staging = anon_map(ps);
	long moved;

	for (long i = 0; i < ps; i++)
		staging[i] = (uint8_t)(seed + i);
	moved = rap(dst, staging, ps, 0);
	munmap(staging, ps);
	return moved == ps && uffd_range(fd, dst, (uint8_t *)dst + ps, 0) == 16;
}

static int value_ok(const struct toucher *t, uint8_t seed)
{
	for (int i = 0; i < 8; i++)
		if (t->value[i] != (uint8_t)(seed + i))
			return 0;
	return 1;
}

/* A MADV_USERFAULT region of @pages pages, claimed by @fd if >= 0. */
static uint8_t *uf_region(int fd, int pages)
{
	uint8_t *m = anon_map(pages * ps);

	if (madvise(m, pages * ps, MADV_USERFAULT))
		kt_fatal("madvise(MADV_USERFAULT)");
	if (fd >= 0 && uffd_range(fd, m, m + pages * ps, 1) != 16)
		kt_fatal("claim");
	return m;
}

static int new_uffd(int flags)
{
	int fd = syscall(__NR_userfaultfd, flags);

	if (fd < 0)
		kt_fatal("userfaultfd");
	return fd;
}

/* ---- protocol cases ---- */

static void test_handshake(void)
{
	uint64_t v, pair[3] = { 0 };
	struct uffdio_api api = { .api = UFFD_API };
	struct pollfd p;
	int fd;
	uint32_t half = 0xaa;

	fd = new_uffd(O_CLOEXEC);
	errno = 0;
	CHECK(read(fd, &v, 8) == -1 && errno == EINVAL, "read before any handshake: EINVAL");
	errno = 0;
	CHECK(write(fd, &half, 4) == -1 && errno == EINVAL, "4-byte handshake: EINVAL");
	v = USERFAULTFD_PROTOCOL;
	CHECK(write(fd, &v, 8) == 8, "handshake write");
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLIN), "answer pending: POLLIN");
	errno = 0;
	CHECK(read(fd, &v, 4) == -1 && errno == EINVAL, "read of less than 8 bytes: EINVAL");
	v = 0;
	CHECK(read(fd, &v, 8) == 8 && v == USERFAULTFD_PROTOCOL, "answer is the version (%#llx)",
	      (unsigned long long)v);
	p.revents = 0;
	CHECK(poll(&p, 1, 0) == 0, "nothing pending: poll 0");
	errno = 0;
	CHECK(ioctl(fd, UFFDIO_API, &api) == -1 && errno == EINVAL,
	      "UFFDIO_API on an article fd: EINVAL");
	v = USERFAULTFD_PROTOCOL;
	errno = 0;
	CHECK(write(fd, &v, 8) == -1 && errno == EINVAL, "second handshake (8 bytes): EINVAL");
	errno = 0;
	CHECK(write(fd, pair, 24) == -1 && errno == EINVAL, "24-byte write: EINVAL");
	close(fd);

	/*
	 * A wrong version is answered with all ones; as in the 2014 code the
	 * client may then try another version.
	 */
	fd = new_uffd(O_CLOEXEC);
	v = 0xbb;
	CHECK(write(fd, &v, 8) == 8, "wrong version accepted for an answer");
	errno = 0;
	CHECK(write(fd, pair, 16) == -1 && errno == EPROTO, "write before the answer: EPROTO");
	CHECK(read(fd, &v, 8) == 8 && v == USERFAULTFD_UNKNOWN_PROTOCOL,
	      "answer to a wrong version is all ones");
	errno = 0;
	CHECK(read(fd, &v, 8) == -1 && errno == EINVAL, "then read: EINVAL, no handshake yet");
	v = USERFAULTFD_PROTOCOL;
	CHECK(write(fd, &v, 8) == 8, "retry with the right version");
	v = 0;
	CHECK(read(fd, &v, 8) == 8 && v == USERFAULTFD_PROTOCOL,
	      "answer to the retry: the version");
	CHECK(fcntl(fd, F_GETFL) >= 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR,
	      "an article fd is O_RDWR in F_GETFL");
	close(fd);
	fd = new_uffd(O_CLOEXEC);
	v = 0xbb;
	CHECK(write(fd, &v, 8) == 8 && read(fd, &v, 8) == 8, "wrong version, answered");
	CHECK(ioctl(fd, UFFDIO_API, &api) == 0, "then UFFDIO_API is fine too");
	close(fd);

	/* The ioctl protocol first: no write(), EBADF as on a read-only fd. */
	fd = new_uffd(O_CLOEXEC);
	CHECK(ioctl(fd, UFFDIO_API, &api) == 0, "UFFDIO_API");
	v = USERFAULTFD_PROTOCOL;
	errno = 0;
	CHECK(write(fd, &v, 8) == -1 && errno == EBADF, "handshake after UFFDIO_API: EBADF");
	close(fd);

	/* O_NONBLOCK. */
	fd = article_uffd(O_CLOEXEC | O_NONBLOCK);
	CHECK(fd >= 0, "non-blocking article fd");
	errno = 0;
	CHECK(read(fd, &v, 8) == -1 && errno == EAGAIN, "nothing pending: EAGAIN");
	close(fd);
}

/* A read() of the handshake answer, on its own thread. */
struct answer_reader {
	pthread_t th;
	int fd;
	uint64_t *buf;
	ssize_t ret;
	volatile int done;
};

static void *answer_reader_main(void *arg)
{
	struct answer_reader *r = arg;

	r->ret = read(r->fd, r->buf, sizeof(*r->buf));
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * The reset after a wrong version's answer belongs to that answer only.  A
 * reader whose copy of the answer to user space is slow (here: it faults
 * on a page another article fd claims, so it waits until that page is
 * moved in) must not undo a handshake that began after another reader took
 * the same answer and reset the fd.  Before the fix the slow reader reset
 * the fd again when it woke: the new handshake's answer was lost and the
 * next read() failed with EINVAL.
 */
static void test_handshake_reset_race(void)
{
	int handler = article_uffd(O_CLOEXEC), fd = new_uffd(O_CLOEXEC);
	uint8_t *trap = uf_region(handler, 1);
	struct answer_reader r = { .fd = fd, .buf = (uint64_t *)trap };
	uint64_t v = 0xbb;

	CHECK(write(fd, &v, 8) == 8, "reset race: wrong version written");
	if (pthread_create(&r.th, NULL, answer_reader_main, &r))
		kt_fatal("pthread_create");
	CHECK(read_fault(handler, 10000) == (uintptr_t)trap,
	      "reset race: the first reader's copy of the answer waits on a claimed page");
	v = 0;
	CHECK(read(fd, &v, 8) == 8 && v == USERFAULTFD_UNKNOWN_PROTOCOL,
	      "reset race: a second reader takes the answer (all ones)");
	v = USERFAULTFD_PROTOCOL;
	CHECK(write(fd, &v, 8) == 8, "reset race: a new handshake, the right version");
	CHECK(resolve(handler, trap, 0), "reset race: the first reader's page moved in, woken");
	for (int i = 0; i < 10000 && !__atomic_load_n(&r.done, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	CHECK(__atomic_load_n(&r.done, __ATOMIC_ACQUIRE), "reset race: the first reader returned");
	if (!r.done)
		kt_fatal("the first reader is stuck in read()");
	pthread_join(r.th, NULL);
	CHECK(r.ret == 8 && *r.buf == USERFAULTFD_UNKNOWN_PROTOCOL,
	      "reset race: the first reader got the answer it began to copy");
	v = 0;
	CHECK(read(fd, &v, 8) == 8 && v == USERFAULTFD_PROTOCOL,
	      "reset race: the new handshake's answer is still there (%#llx)",
	      (unsigned long long)v);
	CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR, "reset race: the fd is an article fd");
	munmap(trap, ps);
	close(fd);
	close(handler);
}

static void test_claims(void)
{
	int a = article_uffd(O_CLOEXEC), b = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(-1, 8), *plain = anon_map(2 * ps), *hole = anon_map(4 * ps);
	uint64_t two[4];

	CHECK(a >= 0 && b >= 0, "two article fds");
#define EXPECT_ERR(call, err, what)                                                                \
	do {                                                                                       \
		errno = 0;                                                                         \
		CHECK((call) == -1 && errno == (err), "%s", what);                                 \
	} while (0)
	EXPECT_ERR(uffd_range(a, m + 2, m + ps, 1), EINVAL, "misaligned claim start");
	EXPECT_ERR(uffd_range(a, m, m + ps + 8, 1), EINVAL, "misaligned claim end");
	EXPECT_ERR(uffd_range(a, m + ps, m + ps, 1), EINVAL, "empty claim");
	EXPECT_ERR(uffd_range(a, m + 2 * ps, m + ps, 1), EINVAL, "reversed claim");
	EXPECT_ERR(uffd_range(a, m + 3, m + ps, 0), EINVAL, "misaligned wake");
	EXPECT_ERR(uffd_range(a, plain, plain + ps, 1), EINVAL, "claim without MADV_USERFAULT");
	madvise(hole, 4 * ps, MADV_USERFAULT);
	munmap(hole + ps, ps);
	EXPECT_ERR(uffd_range(a, hole, hole + 3 * ps, 1), EINVAL, "claim across a hole");
	EXPECT_ERR(uffd_range(a, m, (void *)-4096UL, 1), EINVAL, "claim beyond TASK_SIZE");

	CHECK(uffd_range(a, m, m + 4 * ps, 1) == 16, "fd a claims pages 0-3");
	CHECK(uffd_range(a, m + ps, m + 3 * ps, 1) == 16, "claiming again is fine");
	EXPECT_ERR(uffd_range(b, m + 3 * ps, m + 5 * ps, 1), EBUSY, "overlapping claim: EBUSY");
	CHECK(uffd_range(b, m + 4 * ps, m + 6 * ps, 1) == 16, "fd b claims disjoint pages 4-5");

	/* Two pairs in one write: a claim and a wake. */
	two[0] = (uintptr_t)(m + 6 * ps) | USERFAULTFD_RANGE_REGISTER;
	two[1] = (uintptr_t)(m + 8 * ps);
	two[2] = (uintptr_t)m;
	two[3] = (uintptr_t)(m + ps);
	CHECK(write(b, two, 32) == 32, "claim + wake in one write");
	/* The first pair fails: nothing done, its error. */
	two[0] = (uintptr_t)m | USERFAULTFD_RANGE_REGISTER;
	two[1] = (uintptr_t)(m + ps);
	EXPECT_ERR(write(b, two, 32), EBUSY, "first pair failing: its error");
	/* The second fails: the bytes of the first come back. */
	two[0] = (uintptr_t)m;
	two[1] = (uintptr_t)(m + ps);
	two[2] = (uintptr_t)(m + 2) | USERFAULTFD_RANGE_REGISTER;
	CHECK(write(b, two, 32) == 16, "second pair failing: 16 bytes done");

	/* After fd a is closed its pages are free to claim. */
	close(a);
	CHECK(uffd_range(b, m, m + 4 * ps, 1) == 16, "claim after the owner closed");
	close(b);
	munmap(m, 8 * ps);
	munmap(plain, 2 * ps);
	munmap(hole, 4 * ps);
}

/* The fdinfo "flags:" line of @fd (octal), -1 if none. */
static long fdinfo_flags(int fd)
{
	char path[64], line[128];
	long flags = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "flags: %lo", &flags) == 1)
			break;
	fclose(f);
	return flags;
}

/*
 * What an ioctl-protocol user sees of the fd is what 6.1 gave: read-only in
 * F_GETFL and fdinfo, write() failing with EBADF.  Through userfaultfd(2) and
 * through /dev/userfaultfd (when the node has it).
 */
static void check_ioctl_fd(int fd, const char *how)
{
	struct uffdio_api api = { .api = UFFD_API };
	uint64_t v = USERFAULTFD_PROTOCOL;

	CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY, "%s: F_GETFL is O_RDONLY (%#x)", how,
	      fcntl(fd, F_GETFL));
	CHECK(fdinfo_flags(fd) >= 0 && (fdinfo_flags(fd) & O_ACCMODE) == O_RDONLY,
	      "%s: fdinfo flags read-only (%lo)", how, fdinfo_flags(fd));
	CHECK(ioctl(fd, UFFDIO_API, &api) == 0, "%s: UFFDIO_API", how);
	errno = 0;
	CHECK(write(fd, &v, 8) == -1 && errno == EBADF, "%s: write() after UFFDIO_API: EBADF", how);
	CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY, "%s: still O_RDONLY", how);
	CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK) &&
		  (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY,
	      "%s: F_SETFL O_NONBLOCK keeps O_RDONLY", how);
	close(fd);
}

static void test_ioctl_abi(void)
{
	int dev, fd;

	check_ioctl_fd(new_uffd(O_CLOEXEC), "userfaultfd(2)");
	check_ioctl_fd(new_uffd(O_CLOEXEC | O_NONBLOCK), "userfaultfd(O_NONBLOCK)");
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		printf("uffd-article: no /dev/userfaultfd (%s): that path not checked\n",
		       strerror(errno));
		return;
	}
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC);
	CHECK(fd >= 0, "USERFAULTFD_IOC_NEW");
	if (fd >= 0)
		check_ioctl_fd(fd, "/dev/userfaultfd");
	close(dev);
}

/* Release [start, end) of @fd's claim (USERFAULTFD_RANGE_UNREGISTER). */
static long uffd_release(int fd, void *start, void *end)
{
	uint64_t pair[2] = { (uintptr_t)start | USERFAULTFD_RANGE_UNREGISTER, (uintptr_t)end };

	return write(fd, pair, sizeof(pair));
}

/*
 * USERFAULTFD_RANGE_UNREGISTER releases a claim: a fault waiting there is
 * woken and fails (-EFAULT for a kernel access), the rest of the claim
 * stays, another fd may claim the released part, and releasing what this fd
 * does not claim does nothing.
 */
static void test_release(void)
{
	int a = article_uffd(O_CLOEXEC), b = article_uffd(O_CLOEXEC), c = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(a, 4);
	uint64_t pair[2];
	struct toucher t;

	toucher_start(&t, m + ps, TOUCH_KERNEL);
	CHECK(read_fault(a, 5000) == (uintptr_t)(m + ps), "kernel access to page 1 waits");
	CHECK(uffd_release(a, m + ps, m + 2 * ps) == 16, "release page 1");
	CHECK(toucher_wait(&t, 5000) && t.err == EFAULT, "the waiting access fails: EFAULT (%d)",
	      t.err);
	CHECK(uffd_range(b, m + ps, m + 2 * ps, 1) == 16, "another fd claims page 1");
	errno = 0;
	CHECK(uffd_range(b, m, m + ps, 1) == -1 && errno == EBUSY, "page 0 is still claimed");
	toucher_start(&t, m + 3 * ps, TOUCH_READ);
	CHECK(read_fault(a, 5000) == (uintptr_t)(m + 3 * ps) && resolve(a, m + 3 * ps, 5),
	      "faults on page 3 still come to fd a");
	CHECK(toucher_wait(&t, 5000) && value_ok(&t, 5), "and are resolved");
	CHECK(uffd_release(a, m, m + 4 * ps) == 16, "release all of fd a's claim");
	CHECK(uffd_release(a, m, m + 4 * ps) == 16, "releasing again does nothing");
	errno = 0;
	CHECK(uffd_range(c, m, m + 4 * ps, 1) == -1 && errno == EBUSY,
	      "fd b's page 1 was not released by fd a");
	CHECK(uffd_range(c, m, m + ps, 1) == 16, "a third fd claims page 0 now");
	pair[0] = (uintptr_t)m | 3;
	pair[1] = (uintptr_t)(m + ps);
	errno = 0;
	CHECK(write(a, pair, 16) == -1 && errno == EINVAL, "claim and release at once: EINVAL");
	close(a);
	close(b);
	close(c);
	munmap(m, 4 * ps);
}

/* ---- fault cases ---- */

static void test_one_fault(void)
{
	int fd = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(fd, 4);
	struct toucher t;
	uint64_t addr;

	toucher_start(&t, m + ps + 100, TOUCH_READ);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)(m + ps), "fault address %#llx is the page %p",
	      (unsigned long long)addr, (void *)(m + ps));
	CHECK(!toucher_wait(&t, 200), "the faulting thread waits");
	CHECK(resolve(fd, m + ps, 10), "move the page in and wake");
	CHECK(toucher_wait(&t, 5000), "the faulting thread continues");
	CHECK(!t.sigbus && value_ok(&t, 10 + 100), "it read the moved page");

	/* A write fault goes the same way. */
	toucher_start(&t, m + 3 * ps, TOUCH_WRITE);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)(m + 3 * ps), "write fault address");
	CHECK(resolve(fd, m + 3 * ps, 20), "resolve");
	CHECK(toucher_wait(&t, 5000) && !t.sigbus && t.value[0] == 0x77, "write went through");
	CHECK(m[3 * ps + 1] == 21, "rest of the page is the moved data");
	close(fd);
	munmap(m, 4 * ps);
}

static void test_two_threads(void)
{
	int fd = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(fd, 8);
	struct toucher a, b, c, d;
	uint64_t addr, two[2];
	ssize_t n;

	toucher_start(&a, m, TOUCH_READ);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)m, "first thread's fault");
	/* While it is being handled, a second thread faults elsewhere. */
	toucher_start(&b, m + 2 * ps, TOUCH_READ);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)(m + 2 * ps), "second thread's fault reported meanwhile");
	CHECK(resolve(fd, m + 2 * ps, 30), "resolve the second first");
	CHECK(toucher_wait(&b, 5000) && value_ok(&b, 30), "second thread done");
	CHECK(!toucher_wait(&a, 100), "first thread still waits");
	CHECK(resolve(fd, m, 40), "resolve the first");
	CHECK(toucher_wait(&a, 5000) && value_ok(&a, 40), "first thread done");

	/* Two pending faults come back from one read. */
	toucher_start(&c, m + 4 * ps, TOUCH_READ);
	toucher_start(&d, m + 5 * ps, TOUCH_READ);
	CHECK(wait_pending(fd, 2, 5000), "two faults pending");
	n = read(fd, two, sizeof(two));
	CHECK(n == 16 &&
		  ((two[0] == (uintptr_t)(m + 4 * ps) && two[1] == (uintptr_t)(m + 5 * ps)) ||
		   (two[1] == (uintptr_t)(m + 4 * ps) && two[0] == (uintptr_t)(m + 5 * ps))),
	      "one read returns both addresses (%zd bytes)", n);
	CHECK(resolve(fd, m + 4 * ps, 50) && resolve(fd, m + 5 * ps, 60), "resolve both");
	CHECK(toucher_wait(&c, 5000) && toucher_wait(&d, 5000) && value_ok(&c, 50) &&
		  value_ok(&d, 60),
	      "both threads done");

	/* A kernel access (copy_from_user in write(2)) waits the same way. */
	toucher_start(&a, m + 6 * ps, TOUCH_KERNEL);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)(m + 6 * ps), "copy_from_user fault reported");
	CHECK(resolve(fd, m + 6 * ps, 70), "resolve");
	CHECK(toucher_wait(&a, 5000) && !a.err && value_ok(&a, 70), "write(2) copied the page");
	close(fd);
	munmap(m, 8 * ps);
}

static void test_close_pending(void)
{
	int fd = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(fd, 4);
	struct toucher a, b, c;
	uint64_t addr;

	toucher_start(&a, m, TOUCH_READ);
	addr = read_fault(fd, 5000);
	CHECK(addr == (uintptr_t)m, "fault read, not resolved");
	toucher_start(&b, m + ps, TOUCH_WRITE);
	toucher_start(&c, m + 2 * ps, TOUCH_KERNEL);
	CHECK(wait_pending(fd, 2, 5000), "two more faults pending, unread");
	close(fd);
	CHECK(toucher_wait(&a, 5000) && a.sigbus && a.bus_addr == (void *)m,
	      "read fault gets SIGBUS at its address after close");
	CHECK(toucher_wait(&b, 5000) && b.sigbus && b.bus_addr == (void *)(m + ps),
	      "pending write fault gets SIGBUS");
	CHECK(toucher_wait(&c, 5000) && !c.sigbus && c.err == EFAULT,
	      "pending kernel access gets EFAULT");
	munmap(m, 4 * ps);
}

struct mapper {
	volatile int done;
};

static void *mapper_main(void *arg)
{
	struct mapper *mp = arg;
	void *p = mmap(NULL, 3 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p != MAP_FAILED)
		munmap(p, 3 * ps);
	__atomic_store_n(&mp->done, p != MAP_FAILED ? 1 : 2, __ATOMIC_RELEASE);
	return NULL;
}

static void test_gup_remote(void)
{
	int fd = article_uffd(O_CLOEXEC);
	uint8_t *m = uf_region(fd, 2);
	pid_t parent = getpid(), pid;
	struct mapper mp = { 0 };
	pthread_t th;
	uint64_t addr;
	int status = 0, mapped = 0;

	pid = fork();
	if (pid == 0) {
		uint8_t buf[8];
		struct iovec local = { buf, 8 }, remote = { m + ps + 8, 8 };

		close(fd);
		alarm(30);
		if (process_vm_readv(parent, &local, 1, &remote, 1, 0) != 8)
			_exit(10);
		for (int i = 0; i < 8; i++)
			if (buf[i] != (uint8_t)(80 + 8 + i))
				_exit(11);
		_exit(0);
	}
	addr = read_fault(fd, 10000);
	CHECK(addr == (uintptr_t)(m + ps), "process_vm_readv's GUP fault reported");
	/* The GUP sleeps without our mmap_lock: mmap/munmap here must complete. */
	if (pthread_create(&th, NULL, mapper_main, &mp) == 0) {
		for (int i = 0; i < 5000 && !__atomic_load_n(&mp.done, __ATOMIC_ACQUIRE); i++)
			usleep(1000);
		mapped = __atomic_load_n(&mp.done, __ATOMIC_ACQUIRE) == 1;
	}
	CHECK(mapped, "mmap+munmap completed while the remote GUP was blocked");
	CHECK(waitpid(pid, &status, WNOHANG) == 0, "the reader is still blocked");
	CHECK(resolve(fd, m + ps, 80), "resolve");
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "process_vm_readv returned the moved data (status %#x)", status);
	if (!mapped)
		close(fd); /* releases the GUP so the mapper can finish */
	pthread_join(th, NULL);
	if (mapped)
		close(fd);
	munmap(m, 2 * ps);
}

static void test_fork_mremap(void)
{
	int fd = article_uffd(O_CLOEXEC), status = 0;
	uint8_t *m = uf_region(fd, 2), *n;
	struct toucher t;
	pid_t pid;

	pid = fork();
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = SIG_DFL };

		/* The child does not inherit the claim: the missing page SIGBUSes. */
		alarm(10);
		sigaction(SIGBUS, &sa, NULL);
		(void)*(volatile uint8_t *)m;
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
	      "fork child: SIGBUS, not a wait (status %#x)", status);

	n = mremap(m, 2 * ps, 2 * ps, MREMAP_MAYMOVE | MREMAP_FIXED, anon_map(2 * ps));
	CHECK(n != MAP_FAILED, "mremap");
	toucher_start(&t, n, TOUCH_READ);
	CHECK(toucher_wait(&t, 3000) && t.sigbus,
	      "mremap drops the claim: SIGBUS at the new place");
	if (!t.done) {
		close(fd);
		toucher_wait(&t, 5000);
		fd = -1;
	}
	CHECK(uffd_range(fd, n, n + 2 * ps, 1) == 16, "the moved range can be claimed again");
	toucher_start(&t, n + ps, TOUCH_READ);
	CHECK(read_fault(fd, 5000) == (uintptr_t)(n + ps) && resolve(fd, n + ps, 90),
	      "and faults there are reported");
	CHECK(toucher_wait(&t, 5000) && value_ok(&t, 90), "resolved");
	close(fd);
	munmap(n, 2 * ps);
}

int main(void)
{
	struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER };
	uint64_t v = USERFAULTFD_PROTOCOL;
	int fd;

	kt_name = "uffd-article";
	ps = page_size();
	sigaction(SIGBUS, &sa, NULL);

	fd = syscall(__NR_userfaultfd, O_CLOEXEC);
	if (fd < 0)
		kt_skip("no userfaultfd");
	if (write(fd, &v, 8) != 8)
		kt_skip("userfaultfd has no write(): not the patched kernel");
	close(fd);

	test_handshake();
	test_handshake_reset_race();
	test_ioctl_abi();
	test_claims();
	test_release();
	test_one_fault();
	test_two_threads();
	test_close_pending();
	test_gup_remote();
	test_fork_mremap();
	return kt_done();
}
