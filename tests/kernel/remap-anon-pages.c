// SPDX-License-Identifier: GPL-2.0
/*
 * remap-anon-pages: the remap_anon_pages() system call (x86_64 451).
 *
 * Moves pages and checks that the very same physical page (pagemap PFN)
 * appears at the destination with its contents, and that the source is
 * empty; bad inputs (alignment, zero/overflowing length, flags, overlap,
 * non-anonymous or shared vmas), dst already mapped (EEXIST, and a partial
 * move returning the bytes done), src missing (ENOENT, or skipped with
 * RAP_ALLOW_SRC_HOLES), src shared with a child (EBUSY), the zero page, a
 * 2 MiB THP moved whole, a THP moved in part, and a move into
 * MADV_USERFAULT memory.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "kt.h"

#define HUGE (2UL << 20)

static void fill(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static int same(const uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(seed + i * 7))
			return 0;
	return 1;
}

static void test_move(long ps)
{
	uint8_t *src = anon_map(4 * ps), *dst = anon_map(4 * ps);
	uint64_t pfn[4];
	int moved_same = 1;

	fill(src, 4 * ps, 1);
	for (int i = 0; i < 4; i++)
		pfn[i] = pfn_of(src + i * ps);
	CHECK(pfn[0] != 0, "pagemap shows PFNs (root)");
	CHECK(rap(dst, src, 4 * ps, 0) == 4 * ps, "move 4 pages returns 4 pages of bytes");
	CHECK(same(dst, 4 * ps, 1), "contents arrived");
	for (int i = 0; i < 4; i++)
		moved_same &= pfn_of(dst + i * ps) == pfn[i];
	CHECK(moved_same, "the same physical pages moved (no copy)");
	CHECK(resident(src) == 0 && resident(src + 3 * ps) == 0, "src is empty after the move");
	CHECK(src[5] == 0, "src faults demand-zero again");
	/* The moved pages are ordinary pages of dst: writable, survive MADV_DONTNEED of src. */
	dst[0] = 0xee;
	CHECK(dst[0] == 0xee, "dst writable");
	munmap(src, 4 * ps);
	munmap(dst, 4 * ps);
}

static void test_einval(long ps)
{
	uint8_t *src = anon_map(4 * ps), *dst = anon_map(4 * ps), *shared, *ro;
	int fd;

	fill(src, 4 * ps, 2);
#define EXPECT_EINVAL(call, what)                                                                  \
	do {                                                                                       \
		errno = 0;                                                                         \
		CHECK((call) == -1 && errno == EINVAL, "%s: EINVAL", what);                        \
	} while (0)
	EXPECT_EINVAL(rap(dst + 1, src, ps, 0), "misaligned dst");
	EXPECT_EINVAL(rap(dst, src + 8, ps, 0), "misaligned src");
	EXPECT_EINVAL(rap(dst, src, ps + 1, 0), "misaligned len");
	EXPECT_EINVAL(rap(dst, src, 0, 0), "zero len");
	EXPECT_EINVAL(rap(dst, src, ps, 2), "unknown flag");
	EXPECT_EINVAL(rap(dst, src, -(unsigned long)ps, 0), "len overflowing src");
	EXPECT_EINVAL(rap((void *)(-(long)ps), src, 2 * ps, 0), "dst overflowing");
	EXPECT_EINVAL(rap(src + ps, src, 2 * ps, 0), "overlapping ranges");
	ro = anon_map(8 * ps);
	munmap(ro + 4 * ps, 4 * ps);
	EXPECT_EINVAL(rap(ro, src, 8 * ps, 0), "dst range with a hole");
	EXPECT_EINVAL(rap(dst, ro, 8 * ps, 0), "src range with a hole");
	munmap(ro, 4 * ps);

	shared = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	shared[0] = 1;
	EXPECT_EINVAL(rap(shared, src, ps, 0), "dst shared anon");
	EXPECT_EINVAL(rap(dst, shared, ps, 0), "src shared anon");
	munmap(shared, ps);

	fd = open("/proc/self/exe", O_RDONLY);
	ro = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	close(fd);
	EXPECT_EINVAL(rap(ro, src, ps, 0), "dst private file mapping");
	munmap(ro, ps);

	ro = anon_map(ps);
	mprotect(ro, ps, PROT_READ);
	EXPECT_EINVAL(rap(ro, src, ps, 0), "dst read-only");
	munmap(ro, ps);
	CHECK(same(src, 4 * ps, 2) && resident(dst) == 0, "nothing moved by failed calls");
	munmap(src, 4 * ps);
	munmap(dst, 4 * ps);
}

static void test_eexist_enoent(long ps)
{
	uint8_t *src = anon_map(4 * ps), *dst = anon_map(4 * ps);
	long r;

	fill(src, 4 * ps, 3);
	dst[ps] = 42;
	errno = 0;
	CHECK(rap(dst + ps, src, ps, 0) == -1 && errno == EEXIST, "dst mapped: EEXIST");
	CHECK(dst[ps] == 42 && same(src, ps, 3), "nothing overwritten");

	/* Partial: pages 0 moves, page 1 of dst is mapped: the bytes done come back. */
	r = rap(dst, src, 2 * ps, 0);
	CHECK(r == ps, "partial move returns the bytes moved (%ld)", r);
	CHECK(same(dst, ps, 3) && dst[ps] == 42, "first page moved, second kept");
	errno = 0;
	CHECK(rap(dst + ps, src + ps, ps, 0) == -1 && errno == EEXIST,
	      "retrying at the first unmoved page reports the error");

	/* src page 0 is now a hole. */
	errno = 0;
	CHECK(rap(dst + 2 * ps, src, ps, 0) == -1 && errno == ENOENT, "src hole: ENOENT");
	CHECK(rap(dst + 2 * ps, src, 2 * ps, RAP_ALLOW_SRC_HOLES) == 2 * ps,
	      "RAP_ALLOW_SRC_HOLES skips the hole and moves the rest");
	CHECK(resident(dst + 2 * ps) == 0, "the hole left dst empty");
	CHECK(same(dst + 3 * ps, ps, (uint8_t)(3 + ps * 7)), "the page after the hole moved");
	munmap(src, 4 * ps);
	munmap(dst, 4 * ps);
}

static void test_ebusy(long ps)
{
	uint8_t *src = anon_map(2 * ps), *dst = anon_map(2 * ps);
	int pipefd[2], status;
	pid_t pid;
	char c;

	fill(src, 2 * ps, 4);
	if (pipe(pipefd))
		kt_fatal("pipe");
	pid = fork();
	if (pid == 0) {
		/* Keep the COW-shared pages mapped until the parent is done. */
		close(pipefd[1]);
		(void)!read(pipefd[0], &c, 1);
		_exit(src[0] == 4 ? 0 : 1);
	}
	close(pipefd[0]);
	errno = 0;
	CHECK(rap(dst, src, ps, 0) == -1 && errno == EBUSY, "src shared with a child: EBUSY");
	CHECK(resident(dst) == 0, "nothing moved");
	close(pipefd[1]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child still saw its data");
	/* After a write the parent's page is its own again. */
	src[ps] = 1;
	CHECK(rap(dst + ps, src + ps, ps, 0) == ps, "a COW-broken page moves");
	munmap(src, 2 * ps);
	munmap(dst, 2 * ps);
}

static void test_zero_page(long ps)
{
	uint8_t *src = anon_map(ps), *dst = anon_map(ps);

	CHECK(src[0] == 0, "read fault maps the zero page");
	CHECK(rap(dst, src, ps, 0) == ps, "the zero page moves");
	CHECK(resident(dst) == 1 && dst[100] == 0 && resident(src) == 0, "dst maps zeroes");
	dst[0] = 3;
	CHECK(dst[0] == 3, "write after moving the zero page (COW)");
	munmap(src, ps);
	munmap(dst, ps);
}

/* Bytes of AnonHugePages of the vma containing @addr (smaps), -1 if unknown. */
static long anon_huge_kb(void *addr)
{
	char line[256];
	unsigned long lo, hi;
	long kb = -1;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
		else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

static void test_thp(long ps)
{
	uint8_t *src = anon_map_aligned(HUGE, HUGE), *dst = anon_map_aligned(HUGE, HUGE);
	uint8_t *dst2 = anon_map(ps);
	uint64_t pfn;

	madvise(src, HUGE, MADV_HUGEPAGE);
	madvise(dst, HUGE, MADV_HUGEPAGE);
	fill(src, HUGE, 5);
	if (anon_huge_kb(src) < 2048) {
		printf("remap-anon-pages: no THP backs the source (AnonHugePages %ld kB): "
		       "THP cases not run\n",
		       anon_huge_kb(src));
		munmap(src, HUGE);
		munmap(dst, HUGE);
		munmap(dst2, ps);
		return;
	}
	pfn = pfn_of(src);
	CHECK(rap(dst, src, HUGE, 0) == (long)HUGE, "2 MiB THP move");
	CHECK(same(dst, HUGE, 5), "THP contents arrived");
	CHECK(pfn_of(dst) == pfn && pfn_of(dst + HUGE - ps) == pfn + HUGE / ps - 1,
	      "the same huge page moved");
	CHECK(anon_huge_kb(dst) >= 2048, "still a huge page at dst (not split): %ld kB",
	      anon_huge_kb(dst));
	CHECK(resident(src) == 0, "src empty");

	/* Moving 4 KiB out of the middle of a THP splits it. */
	CHECK(rap(dst2, dst + 5 * ps, ps, 0) == ps, "4 KiB out of a THP");
	CHECK(same(dst2, ps, (uint8_t)(5 + 5 * ps * 7)), "the piece arrived");
	CHECK(resident(dst + 5 * ps) == 0 && same(dst + 6 * ps, ps, (uint8_t)(5 + 6 * ps * 7)),
	      "the rest of the split THP stays");
	munmap(src, HUGE);
	munmap(dst, HUGE);
	munmap(dst2, ps);
}

static void test_into_userfault(long ps)
{
	uint8_t *src = anon_map(ps), *dst = anon_map(ps);

	fill(src, ps, 6);
	CHECK(madvise(dst, ps, MADV_USERFAULT) == 0, "MADV_USERFAULT dst");
	CHECK(rap(dst, src, ps, 0) == ps, "move into MADV_USERFAULT memory");
	CHECK(same(dst, ps, 6), "readable without SIGBUS");
	munmap(src, ps);
	munmap(dst, ps);
}

int main(void)
{
	long ps = page_size();

	kt_name = "remap-anon-pages";
	errno = 0;
	if (rap(NULL, NULL, 0, 0) == -1 && errno == ENOSYS)
		kt_skip("remap_anon_pages() not in this kernel (not the patched one?)");

	test_move(ps);
	test_einval(ps);
	test_eexist_enoent(ps);
	test_ebusy(ps);
	test_zero_page(ps);
	test_thp(ps);
	test_into_userfault(ps);
	return kt_done();
}
