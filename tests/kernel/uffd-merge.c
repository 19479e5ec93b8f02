// SPDX-License-Identifier: GPL-2.0
/*
 * uffd-merge: claiming, releasing, registering or unregistering the tail of
 * a vma must not merge that tail with the next vma unless their page
 * offsets really follow each other (kernel-patches 0003.3 and 0004).
 *
 * The layout, which needs no privilege: V = [S, S + 2P) holds two present
 * pages and has vm_pgoff p (mremap() keeps it); right after it N = [S + 2P,
 * S + 3P) has vm_pgoff p + 1 and the same anon_vma (both are pieces of one
 * mapping, moved and grown with mremap()).  N is claimed or registered; then the
 * same is done to V's tail [S + P, S + 2P).  Passing V's own vm_pgoff (p)
 * to vma_merge() for that tail makes it look like the page before N
 * (p + 1 = p + 1 page), so 6.1's code merged it into N, which then starts
 * at S + P with offset p: the page there has index p + 1, rmap looks for
 * it at S + 2P and does not find it.
 *
 * Observed two ways: the tail must be a vma of its own (/proc/self/maps),
 * and soft offline (MADV_SOFT_OFFLINE, which migrates the page through
 * rmap) must move the page to a new frame with its contents.  Each of the
 * four operations: article claim, article release, UFFDIO_REGISTER and
 * UFFDIO_UNREGISTER (an ioctl fd with UFFD_USER_MODE_ONLY, which any user
 * may create).  The layout and the maps check also run as user nobody.
 */
#include <fcntl.h>
#include <sys/wait.h>

#include "kt.h"

#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

static long ps;

enum op {
	CLAIM,
	RELEASE,
	REGISTER,
	UNREGISTER
};
static const char *const op_name[] = { "article claim", "article release", "UFFDIO_REGISTER",
				       "UFFDIO_UNREGISTER" };

/* [lo, hi) of the vma holding @addr in /proc/self/maps; 0 if found. */
static int vma_bounds(const void *addr, unsigned long *lo, unsigned long *hi)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int ret = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", lo, hi) == 2 && (uintptr_t)addr >= *lo &&
		    (uintptr_t)addr < *hi) {
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

static int ioctl_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	int fd = syscall(__NR_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);

	if (fd < 0 || ioctl(fd, UFFDIO_API, &api))
		kt_fatal("userfaultfd + UFFDIO_API");
	return fd;
}

static int uffd_register(int fd, void *start, size_t len)
{
	struct uffdio_register reg = { .range = { (uintptr_t)start, len },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };

	return ioctl(fd, UFFDIO_REGISTER, &reg);
}

static int uffd_unregister(int fd, void *start, size_t len)
{
	struct uffdio_range r = { (uintptr_t)start, len };

	return ioctl(fd, UFFDIO_UNREGISTER, &r);
}

static int article_release(int fd, void *start, void *end)
{
	uint64_t pair[2] = { (uintptr_t)start | USERFAULTFD_RANGE_UNREGISTER, (uintptr_t)end };

	return write(fd, pair, sizeof(pair)) == sizeof(pair) ? 0 : -1;
}

/* Claim or register [start, start + len) with @fd, as @op's fd does. */
static int take(enum op op, int fd, uint8_t *start, size_t len)
{
	if (op == CLAIM || op == RELEASE)
		return uffd_range(fd, start, start + len, 1) == 16 ? 0 : -1;
	return uffd_register(fd, start, len);
}

/*
 * Build V and N at a fresh S (see the top comment); V's pages hold
 * fill_pattern(seed).  Both come from one mapping of two pages at x (vm_pgoff
 * p = x / P), so they share its anon_vma, which vma_merge() requires of a
 * vma with pages: V is its first page moved to S and grown to two pages, N
 * its second page (vm_pgoff p + 1) moved right after V.  Returns S.
 */
static uint8_t *layout(uint8_t seed)
{
	uint8_t *s, *x;

	/* Where V and N will live: reserved, so nothing else lands there. */
	s = mmap(NULL, 3 * ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		kt_fatal("mmap reserve");
	x = anon_map(2 * ps);
	fill_pattern(x, 2 * ps, (uint8_t)(seed + 1));
	if (mremap(x, ps, 2 * ps, MREMAP_MAYMOVE | MREMAP_FIXED, s) != s)
		kt_fatal("mremap V");
	fill_pattern(s, 2 * ps, seed); /* V's second page is a new one */
	if (mremap(x + ps, ps, ps, MREMAP_MAYMOVE | MREMAP_FIXED, s + 2 * ps) != s + 2 * ps)
		kt_fatal("mremap N");
	if (madvise(s, 3 * ps, MADV_USERFAULT))
		kt_fatal("MADV_USERFAULT");
	return s;
}

/*
 * @op on V's tail with N already in the state the tail gets; then check the
 * tail is a vma of its own and, if @offline, that rmap finds its page.
 */
static void test_op(enum op op, int offline)
{
	const char *how = op_name[op];
	int fd = op <= RELEASE ? article_uffd(O_CLOEXEC | UFFD_USER_MODE_ONLY) : ioctl_uffd();
	uint8_t *s = layout((uint8_t)(op + 3)), *tail;
	unsigned long lo = 0, hi = 0;
	uint64_t pfn;
	int found;

	CHECK(fd >= 0, "%s: userfaultfd", how);
	tail = s + ps;
	switch (op) {
	case CLAIM:
	case REGISTER:
		/* N taken, V not: now take V's tail. */
		CHECK(take(op, fd, s + 2 * ps, ps) == 0, "%s: N", how);
		CHECK(take(op, fd, tail, ps) == 0, "%s: V's tail", how);
		break;
	case RELEASE:
		/* V taken, N not: now give back V's tail. */
		CHECK(take(op, fd, s, 2 * ps) == 0, "%s: claim V", how);
		CHECK(article_release(fd, tail, tail + ps) == 0, "%s: V's tail", how);
		break;
	case UNREGISTER:
		CHECK(take(op, fd, s, 2 * ps) == 0, "%s: register V", how);
		CHECK(uffd_unregister(fd, tail, ps) == 0, "%s: V's tail", how);
		break;
	}
	found = vma_bounds(tail, &lo, &hi) == 0;
	CHECK(found && lo == (uintptr_t)tail && hi == lo + ps,
	      "%s: V's tail [%p, %p) is a vma of its own, not merged with N (vma %#lx-%#lx)", how,
	      (void *)tail, (void *)(tail + ps), lo, hi);
	CHECK(has_pattern(s, 2 * ps, (uint8_t)(op + 3)), "%s: V's pages kept their contents", how);
	if (offline) {
		pfn = pfn_of(tail);
		CHECK(pfn != 0, "%s: pagemap shows the tail's PFN", how);
		CHECK(madvise(tail, ps, MADV_SOFT_OFFLINE) == 0,
		      "%s: soft offline migrates the tail's page (rmap finds it)", how);
		CHECK(pfn_of(tail) != pfn && has_pattern(s, 2 * ps, (uint8_t)(op + 3)),
		      "%s: it lives in a new frame with the same contents", how);
	}
	close(fd);
	munmap(s, 3 * ps);
}

/* The same, without privilege: the layout and the vma check as nobody. */
static void test_unprivileged(void)
{
	pid_t pid;
	int status = 0;

	if (getuid() != 0) {
		for (enum op op = CLAIM; op <= UNREGISTER; op++)
			test_op(op, 0);
		return;
	}
	pid = fork();
	if (pid < 0)
		kt_fatal("fork");
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		kt_name = "uffd-merge (nobody)";
		for (enum op op = CLAIM; op <= UNREGISTER; op++)
			test_op(op, 0);
		_exit(kt_failures ? 1 : 0);
	}
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "as user nobody: every tail a vma of its own (status %#x)", status);
}

int main(void)
{
	kt_name = "uffd-merge";
	ps = page_size();
	for (enum op op = CLAIM; op <= UNREGISTER; op++)
		test_op(op, getuid() == 0);
	test_unprivileged();
	return kt_done();
}
