// SPDX-License-Identifier: GPL-2.0
/*
 * gup-locked: get_user_pages_locked() through the gup_test debugfs file
 * (GUP_LOCKED_TEST, added by the series to mm/gup_test.c).
 *
 * Plain memory: every page obtained (faulted in), mmap_lock kept.  Bad
 * input: zero or unaligned size (EINVAL), unmapped address and unclaimed
 * MADV_USERFAULT memory (EFAULT).  A missing page claimed by an article
 * userfaultfd: the call blocks in the fault with mmap_lock released (an
 * mmap/munmap completes meanwhile), returns once the page is moved in and
 * woken, and reports that it dropped the lock.  FOLL_NOWAIT on a claimed
 * missing page obtains nothing and must say so (EAGAIN), not succeed.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "kt.h"

/* mm/gup_test.h of the patched tree. */
#define GUP_TEST_MAX_PAGES_TO_DUMP 8
struct gup_test {
	uint64_t get_delta_usec;
	uint64_t put_delta_usec;
	uint64_t addr;
	uint64_t size;
	uint32_t nr_pages_per_call;
	uint32_t gup_flags;
	uint32_t test_flags;
	uint32_t which_pages[GUP_TEST_MAX_PAGES_TO_DUMP];
};
#define GUP_LOCKED_TEST		   _IOWR('g', 7, struct gup_test)
#define GUP_TEST_FLAG_LOCK_DROPPED 0x2
#define FOLL_WRITE		   0x01
#define FOLL_NOWAIT		   0x20

#define GUP_TEST_PATH "/sys/kernel/debug/gup_test"

static long ps;
static int gup_fd;

/* One GUP_LOCKED_TEST call: 0 or -errno; *g holds the answer. */
static int gup_locked(struct gup_test *g, void *addr, uint64_t size, uint32_t flags)
{
	memset(g, 0, sizeof(*g));
	g->addr = (uintptr_t)addr;
	g->size = size;
	g->gup_flags = flags;
	return ioctl(gup_fd, GUP_LOCKED_TEST, g) ? -errno : 0;
}

static void test_plain(void)
{
	uint8_t *m = anon_map(8 * ps), *gone;
	struct gup_test g;

	m[0] = 1; /* one page present, seven missing */
	CHECK(gup_locked(&g, m, 8 * ps, FOLL_WRITE) == 0, "GUP of plain memory");
	CHECK(g.size == (uint64_t)(8 * ps), "all 8 pages obtained (size %llu)",
	      (unsigned long long)g.size);
	CHECK(!(g.test_flags & GUP_TEST_FLAG_LOCK_DROPPED), "mmap_lock kept");
	CHECK(resident(m + 7 * ps) == 1, "missing pages were faulted in");

	CHECK(gup_locked(&g, m, 0, 0) == -EINVAL, "zero size: EINVAL");
	CHECK(gup_locked(&g, m, ps + 1, 0) == -EINVAL, "unaligned size: EINVAL");
	gone = anon_map(ps);
	munmap(gone, ps);
	CHECK(gup_locked(&g, gone, ps, 0) == -EFAULT, "unmapped: EFAULT");
	/* Partial: obtained pages counted up to the hole. */
	munmap(m + 4 * ps, 4 * ps);
	CHECK(gup_locked(&g, m, 8 * ps, 0) == 0 && g.size == (uint64_t)(4 * ps),
	      "range running into a hole: the 4 pages before it");
	munmap(m, 4 * ps);

	m = anon_map(2 * ps);
	madvise(m, 2 * ps, MADV_USERFAULT);
	CHECK(gup_locked(&g, m, ps, FOLL_WRITE) == -EFAULT, "unclaimed MADV_USERFAULT: EFAULT");
	munmap(m, 2 * ps);
}

struct gup_thread {
	uint8_t *addr;
	struct gup_test g;
	int ret;
	volatile int done;
};

static void *gup_thread_main(void *arg)
{
	struct gup_thread *t = arg;

	t->ret = gup_locked(&t->g, t->addr, 2 * ps, 0);
	__atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static volatile int mapper_done;

static void *mapper_main(void *arg)
{
	void *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)arg;
	if (p != MAP_FAILED)
		munmap(p, ps);
	__atomic_store_n(&mapper_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int wait_flag(volatile int *flag, int ms)
{
	for (int i = 0; i < ms && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

static void test_userfault(void)
{
	int fd = article_uffd(O_CLOEXEC);
	uint8_t *m = anon_map(2 * ps), *staging = anon_map(ps);
	struct gup_thread t = { .addr = m };
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	pthread_t th, mth;
	uint64_t addr = 0;
	int ok = 1;

	CHECK(fd >= 0, "article userfaultfd");
	m[0] = 5; /* page 0 present, page 1 missing */
	madvise(m, 2 * ps, MADV_USERFAULT);
	if (fd < 0 || uffd_range(fd, m, m + 2 * ps, 1) != 16) {
		CHECK(0, "claim");
		return;
	}

	if (pthread_create(&th, NULL, gup_thread_main, &t))
		kt_fatal("pthread_create");
	CHECK(poll(&pfd, 1, 10000) == 1 && read(fd, &addr, 8) == 8 && addr == (uintptr_t)(m + ps),
	      "the GUP's fault is reported (%#llx)", (unsigned long long)addr);
	CHECK(!wait_flag(&t.done, 200), "get_user_pages_locked() waits");
	if (pthread_create(&mth, NULL, mapper_main, NULL))
		kt_fatal("pthread_create");
	ok = wait_flag(&mapper_done, 5000);
	CHECK(ok, "mmap/munmap completed while GUP was blocked: mmap_lock released");

	memset(staging, 0x3c, ps);
	CHECK(rap(m + ps, staging, ps, 0) == ps, "move the page in");
	CHECK(uffd_range(fd, m + ps, m + 2 * ps, 0) == 16, "wake");
	CHECK(wait_flag(&t.done, 5000), "GUP returned");
	pthread_join(th, NULL);
	pthread_join(mth, NULL);
	CHECK(t.ret == 0 && t.g.size == (uint64_t)(2 * ps),
	      "both pages obtained (ret %d size %llu)", t.ret, (unsigned long long)t.g.size);
	CHECK(t.g.test_flags & GUP_TEST_FLAG_LOCK_DROPPED, "it reports mmap_lock was dropped");
	CHECK(m[ps] == 0x3c && m[0] == 5, "the memory is what was moved in");
	close(fd);
	munmap(m, 2 * ps);
	munmap(staging, ps);
}

/*
 * FOLL_NOWAIT: a fault that would have to wait is not waited for, so
 * get_user_pages_locked() returns 0 pages with mmap_lock still held.  The
 * test interface must report that as a failure (EAGAIN), not as success with
 * the requested size left in .size; a partial result counts what it got.
 */
static void test_nowait(void)
{
	int fd = article_uffd(O_CLOEXEC | O_NONBLOCK);
	uint8_t *m = anon_map(2 * ps);
	struct gup_test g;
	uint64_t addr;
	int ret;

	CHECK(fd >= 0, "article userfaultfd");
	if (fd < 0)
		return;
	m[0] = 7; /* page 0 present, page 1 missing */
	madvise(m, 2 * ps, MADV_USERFAULT);
	CHECK(uffd_range(fd, m, m + 2 * ps, 1) == 16, "claim");

	ret = gup_locked(&g, m + ps, ps, FOLL_NOWAIT);
	CHECK(ret == -EAGAIN,
	      "FOLL_NOWAIT, only a claimed missing page: EAGAIN (ret %d, size %llu)", ret,
	      (unsigned long long)g.size);
	ret = gup_locked(&g, m, 2 * ps, FOLL_NOWAIT);
	CHECK(ret == 0 && g.size == (uint64_t)ps,
	      "FOLL_NOWAIT, present then missing: one page (ret %d, size %llu)", ret,
	      (unsigned long long)g.size);
	CHECK(!(g.test_flags & GUP_TEST_FLAG_LOCK_DROPPED), "FOLL_NOWAIT keeps mmap_lock");
	CHECK(read(fd, &addr, sizeof(addr)) == -1 && errno == EAGAIN,
	      "FOLL_NOWAIT queued no fault for the handler");
	CHECK(resident(m + ps) == 0, "the missing page is still missing");
	close(fd);
	munmap(m, 2 * ps);
}

int main(void)
{
	kt_name = "gup-locked";
	ps = page_size();

	gup_fd = open(GUP_TEST_PATH, O_RDWR | O_CLOEXEC);
	if (gup_fd < 0 && errno == ENOENT) {
		mkdir("/sys/kernel/debug", 0755);
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
		gup_fd = open(GUP_TEST_PATH, O_RDWR | O_CLOEXEC);
	}
	if (gup_fd < 0)
		kt_skip(GUP_TEST_PATH " not available (CONFIG_GUP_TEST, debugfs)");

	test_plain();
	test_userfault();
	test_nowait();
	return kt_done();
}
