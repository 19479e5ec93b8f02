// SPDX-License-Identifier: GPL-2.0
/*
 * remap-anon-pages: the remap_anon_pages() system call (x86_64 451).
 *
 * Moves pages and checks that the very same physical page (pagemap PFN)
 * appears at the destination with its contents, and that the source is
 * empty; bad inputs (alignment, zero/overflowing length, flags, overlap,
 * non-anonymous or shared vmas, access flags or VM_LOCKED that differ), dst
 * already mapped (EEXIST, and a partial move returning the bytes done), src
 * missing (ENOENT, or skipped with RAP_ALLOW_SRC_HOLES, a page table at a
 * time over a sparse 1 GiB), src shared with a child, pinned by io_uring
 * or merged by KSM (EBUSY), the zero page and a move into MADV_USERFAULT
 * memory, and soft offline migrating a moved page.  THPs: rap-thp.c; races: rap-races.c; rmap walkers: rap-rmap.c.
 */
#include <fcntl.h>
#include <linux/io_uring.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "kt.h"

#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101 /* asm-generic/mman-common.h; glibc lacks it */
#endif

static void test_move(long ps)
{
	uint8_t *src = anon_map(4 * ps), *dst = anon_map(4 * ps);
	uint64_t pfn[4];
	int moved_same = 1;

	fill_pattern(src, 4 * ps, 1);
	for (int i = 0; i < 4; i++)
		pfn[i] = pfn_of(src + i * ps);
	CHECK(pfn[0] != 0, "pagemap shows PFNs (root)");
	CHECK(rap(dst, src, 4 * ps, 0) == 4 * ps, "move 4 pages returns 4 pages of bytes");
	CHECK(has_pattern(dst, 4 * ps, 1), "contents arrived");
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

	fill_pattern(src, 4 * ps, 2);
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
	CHECK(has_pattern(src, 4 * ps, 2) && resident(dst) == 0, "nothing moved by failed calls");
	munmap(src, 4 * ps);
	munmap(dst, 4 * ps);
}

static void test_eexist_enoent(long ps)
{
	uint8_t *src = anon_map(4 * ps), *dst = anon_map(4 * ps);
	long r;

	fill_pattern(src, 4 * ps, 3);
	dst[ps] = 42;
	errno = 0;
	CHECK(rap(dst + ps, src, ps, 0) == -1 && errno == EEXIST, "dst mapped: EEXIST");
	CHECK(dst[ps] == 42 && has_pattern(src, ps, 3), "nothing overwritten");

	/* Partial: pages 0 moves, page 1 of dst is mapped: the bytes done come back. */
	r = rap(dst, src, 2 * ps, 0);
	CHECK(r == ps, "partial move returns the bytes moved (%ld)", r);
	CHECK(has_pattern(dst, ps, 3) && dst[ps] == 42, "first page moved, second kept");
	errno = 0;
	CHECK(rap(dst + ps, src + ps, ps, 0) == -1 && errno == EEXIST,
	      "retrying at the first unmoved page reports the error");

	/* src page 0 is now a hole. */
	errno = 0;
	CHECK(rap(dst + 2 * ps, src, ps, 0) == -1 && errno == ENOENT, "src hole: ENOENT");
	CHECK(rap(dst + 2 * ps, src, 2 * ps, RAP_ALLOW_SRC_HOLES) == 2 * ps,
	      "RAP_ALLOW_SRC_HOLES skips the hole and moves the rest");
	CHECK(resident(dst + 2 * ps) == 0, "the hole left dst empty");
	CHECK(has_pattern(dst + 3 * ps, ps, (uint8_t)(3 + ps * 7)),
	      "the page after the hole moved");
	munmap(src, 4 * ps);
	munmap(dst, 4 * ps);
}

static void test_ebusy(long ps)
{
	uint8_t *src = anon_map(2 * ps), *dst = anon_map(2 * ps);
	int pipefd[2], status;
	pid_t pid;
	char c;

	fill_pattern(src, 2 * ps, 4);
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

/*
 * The two vmas of a move must agree on what user space may do with the pages
 * (access flags) and on VM_LOCKED, as UFFDIO_MOVE's validate_move_areas()
 * requires: a page must not gain execute permission or leave mlocked memory
 * by moving.
 */
static void test_vma_compat(long ps)
{
	uint8_t *src = anon_map(2 * ps), *dst = anon_map(2 * ps);

	fill_pattern(src, 2 * ps, 9);
	CHECK(mprotect(dst, ps, PROT_READ | PROT_WRITE | PROT_EXEC) == 0, "dst rwx");
	errno = 0;
	CHECK(rap(dst, src, ps, 0) == -1 && errno == EINVAL, "rw- page into rwx vma: EINVAL");
	errno = 0;
	CHECK(rap(src, dst, ps, 0) == -1 && errno == EINVAL, "rwx vma into rw- vma: EINVAL");
	CHECK(mprotect(dst, ps, PROT_READ | PROT_WRITE) == 0, "dst rw again");

	if (mlock(dst + ps, ps) == 0) {
		/* The dst range starts unlocked and ends locked, src is not. */
		errno = 0;
		CHECK(rap(dst, src, 2 * ps, 0) == -1 && errno == EINVAL,
		      "dst partly mlocked, src not: EINVAL");
		errno = 0;
		CHECK(rap(dst + ps, src + ps, ps, 0) == -1 && errno == EINVAL,
		      "into mlocked from unlocked: EINVAL");
		munlock(dst + ps, ps);
		madvise(dst + ps, ps, MADV_DONTNEED); /* mlock populated it */
	} else {
		CHECK(0, "mlock (root in the node)");
	}
	CHECK(has_pattern(src, 2 * ps, 9) && resident(dst) == 0, "nothing moved by refused calls");
	CHECK(rap(dst, src, 2 * ps, 0) == 2 * ps, "compatible again: moves");
	munmap(src, 2 * ps);
	munmap(dst, 2 * ps);
}

/*
 * RAP_ALLOW_SRC_HOLES over a huge, nearly empty source: holes are skipped a
 * page table at a time, and no destination page table is allocated for them,
 * not even where the source still has an (emptied) page table.  Here the
 * source's first 256 MiB had a page in every 2 MiB, all dropped again with
 * MADV_DONTNEED: 128 empty pte tables.  The dst may gain the two pte tables
 * of the two pages that really move (4 kB each), not 128 more.
 */
static void test_sparse_holes(long ps)
{
	const size_t len = 1UL << 30, used = 256UL << 20;
	uint8_t *src = mmap(NULL, len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint8_t *dst = mmap(NULL, len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	long pte_before, pte_after;

	if (src == MAP_FAILED || dst == MAP_FAILED)
		kt_fatal("mmap 1 GiB");
	madvise(src, len, MADV_NOHUGEPAGE);
	madvise(dst, len, MADV_NOHUGEPAGE);
	for (size_t off = 0; off < used; off += HUGE)
		src[off] = 1;
	madvise(src, used, MADV_DONTNEED);
	src[len / 2] = 0x5a;
	src[len - ps] = 0xa5;
	pte_before = status_kb("VmPTE");
	CHECK(rap(dst, src, len, RAP_ALLOW_SRC_HOLES) == (long)len,
	      "1 GiB with two pages: the whole length is reported");
	pte_after = status_kb("VmPTE");
	CHECK(dst[len / 2] == 0x5a && dst[len - ps] == (uint8_t)0xa5, "both pages moved");
	CHECK(resident(dst) == 0 && resident(dst + used / 2) == 0, "holes stay holes");
	CHECK(pte_before >= 0 && pte_after - pte_before <= 16,
	      "no dst page tables for holes (VmPTE %ld -> %ld kB)", pte_before, pte_after);
	munmap(src, len);
	munmap(dst, len);
}

/*
 * A page pinned for DMA (io_uring fixed buffers: FOLL_PIN | FOLL_LONGTERM)
 * must not move away from the device's view of it: EBUSY until unpinned.
 */
static void test_pinned(long ps)
{
	struct io_uring_params params = { 0 };
	uint8_t *src = anon_map(ps), *dst = anon_map(ps);
	struct iovec iov = { .iov_base = src, .iov_len = ps };
	int ring;

	fill_pattern(src, ps, 10);
	ring = syscall(__NR_io_uring_setup, 4, &params);
	CHECK(ring >= 0, "io_uring_setup");
	if (ring < 0)
		return;
	CHECK(syscall(__NR_io_uring_register, ring, IORING_REGISTER_BUFFERS, &iov, 1) == 0,
	      "register src as a fixed buffer (pins it)");
	errno = 0;
	CHECK(rap(dst, src, ps, 0) == -1 && errno == EBUSY, "pinned page: EBUSY");
	CHECK(has_pattern(src, ps, 10) && resident(dst) == 0, "pinned page stayed");
	CHECK(syscall(__NR_io_uring_register, ring, IORING_UNREGISTER_BUFFERS, NULL, 0) == 0,
	      "unregister");
	CHECK(rap(dst, src, ps, 0) == ps, "unpinned: moves");
	close(ring);
	munmap(src, ps);
	munmap(dst, ps);
}

static int write_sysfs(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, val, strlen(val)) == (ssize_t)strlen(val);
	close(fd);
	return ok ? 0 : -1;
}

/* A KSM-merged page is shared by nature: EBUSY, and it stays merged. */
static void test_ksm(long ps)
{
	const int n = 4;
	uint8_t *src = anon_map(n * ps), *dst = anon_map(ps);
	uint64_t pfn0 = 0;
	int merged = 0;

	memset(src, 0x77, n * ps);
	CHECK(madvise(src, n * ps, MADV_MERGEABLE) == 0, "MADV_MERGEABLE (CONFIG_KSM)");
	CHECK(write_sysfs("/sys/kernel/mm/ksm/sleep_millisecs", "0") == 0 &&
		  write_sysfs("/sys/kernel/mm/ksm/run", "1") == 0,
	      "start ksmd");
	/* Wait for ksmd's progress (bounded): identical pages share one PFN. */
	for (int i = 0; i < 3000 && !merged; i++) {
		pfn0 = pfn_of(src);
		merged = pfn0 && pfn_of(src + ps) == pfn0;
		if (!merged)
			usleep(10000);
	}
	CHECK(merged, "ksmd merged the identical pages");
	if (merged) {
		errno = 0;
		CHECK(rap(dst, src, ps, 0) == -1 && errno == EBUSY, "KSM page: EBUSY");
		CHECK(pfn_of(src) == pfn0 && resident(dst) == 0, "the KSM page stayed");
	}
	write_sysfs("/sys/kernel/mm/ksm/run", "2"); /* unmerge everything, stop */
	munmap(src, n * ps);
	munmap(dst, ps);
}

/*
 * The rmap of a moved page must lead to its new place: migrating it (soft
 * offline migrates a page through rmap: unmap everywhere, copy, remap) has
 * to find and replace the destination pte.  Afterwards the address maps a
 * new PFN with the same contents, and the page moves on as usual.
 */
static void test_migrate_after_move(long ps)
{
	uint8_t *src = anon_map(2 * ps), *dst = anon_map(2 * ps), *back = anon_map(2 * ps);
	uint64_t pfn[2];

	fill_pattern(src, 2 * ps, 11);
	CHECK(rap(dst, src, 2 * ps, 0) == 2 * ps, "move two pages");
	pfn[0] = pfn_of(dst);
	pfn[1] = pfn_of(dst + ps);
	CHECK(madvise(dst, 2 * ps, MADV_SOFT_OFFLINE) == 0,
	      "migrate the moved pages (MADV_SOFT_OFFLINE, CONFIG_MEMORY_FAILURE)");
	CHECK(pfn_of(dst) && pfn_of(dst) != pfn[0] && pfn_of(dst + ps) != pfn[1],
	      "they live in new frames now");
	CHECK(has_pattern(dst, 2 * ps, 11), "with the same contents");
	CHECK(rap(back, dst, 2 * ps, 0) == 2 * ps && has_pattern(back, 2 * ps, 11),
	      "and still move");
	munmap(src, 2 * ps);
	munmap(dst, 2 * ps);
	munmap(back, 2 * ps);
}

static void test_into_userfault(long ps)
{
	uint8_t *src = anon_map(ps), *dst = anon_map(ps);

	fill_pattern(src, ps, 6);
	CHECK(madvise(dst, ps, MADV_USERFAULT) == 0, "MADV_USERFAULT dst");
	CHECK(rap(dst, src, ps, 0) == ps, "move into MADV_USERFAULT memory");
	CHECK(has_pattern(dst, ps, 6), "readable without SIGBUS");
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
	test_into_userfault(ps);
	test_vma_compat(ps);
	test_sparse_holes(ps);
	test_pinned(ps);
	test_ksm(ps);
	test_migrate_after_move(ps);
	return kt_done();
}
