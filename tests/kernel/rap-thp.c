// SPDX-License-Identifier: GPL-2.0
/*
 * rap-thp: remap_anon_pages() and transparent huge pages.
 *
 * A 2 MiB THP moves whole (the same huge page, still pmd-mapped) when both
 * windows are 2 MiB aligned and each lies inside one vma; moving 4 KiB of it
 * splits it.  A destination window that spans two vmas must not receive a
 * huge pmd: the pmd would straddle both vmas, and splitting or unmapping
 * either half later corrupts the other (kernel BUG in __split_huge_pmd, or
 * migration entries left behind); this case runs as an unprivileged user
 * (uid 65534), as any user can reach it.  A THP shared with a fork child is
 * refused with EBUSY before anything is split.  Without a THP: SKIP (77).
 *
 * usage: rap-thp [whole|two-vmas|shared]   (default: every case)
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "kt.h"

/* A 2 MiB aligned THP filled from @seed, or NULL if none could be had. */
static uint8_t *thp_map(uint8_t seed)
{
	uint8_t *p = anon_map_aligned(HUGE, HUGE);

	madvise(p, HUGE, MADV_HUGEPAGE);
	fill_pattern(p, HUGE, seed);
	if (smaps_kb(p, "AnonHugePages") < 2048) {
		munmap(p, HUGE);
		return NULL;
	}
	return p;
}

static void test_whole_and_part(long ps)
{
	uint8_t *src = thp_map(5), *dst = anon_map_aligned(HUGE, HUGE);
	uint8_t *dst2 = anon_map(ps);
	uint64_t pfn;

	if (!src) {
		CHECK(0, "a THP to move");
		return;
	}
	pfn = pfn_of(src);
	madvise(dst, HUGE, MADV_HUGEPAGE);
	CHECK(rap(dst, src, HUGE, 0) == (long)HUGE, "2 MiB THP move");
	CHECK(has_pattern(dst, HUGE, 5), "THP contents arrived");
	CHECK(pfn_of(dst) == pfn && pfn_of(dst + HUGE - ps) == pfn + HUGE / ps - 1,
	      "the same huge page moved");
	CHECK(smaps_kb(dst, "AnonHugePages") >= 2048, "still a huge page at dst: %ld kB",
	      smaps_kb(dst, "AnonHugePages"));
	CHECK(resident(src) == 0, "src empty");

	/* Moving 4 KiB out of the middle of a THP splits it. */
	CHECK(rap(dst2, dst + 5 * ps, ps, 0) == ps, "4 KiB out of a THP");
	CHECK(has_pattern(dst2, ps, (uint8_t)(5 + 5 * ps * 7)), "the piece arrived");
	CHECK(resident(dst + 5 * ps) == 0 &&
		  has_pattern(dst + 6 * ps, ps, (uint8_t)(5 + 6 * ps * 7)),
	      "the rest of the split THP stays");
	munmap(src, HUGE);
	munmap(dst, HUGE);
	munmap(dst2, ps);
}

/* One half of @dst (a 1 MiB vma): content, then split and unmap it. */
static void check_half(uint8_t *half, size_t off, long ps)
{
	const size_t len = HUGE / 2;

	CHECK(smaps_kb(half, "AnonHugePages") == 0,
	      "the 1 MiB vma at +%zu KiB maps no huge page (%ld kB)", off >> 10,
	      smaps_kb(half, "AnonHugePages"));
	/* Splitting a huge pmd here must find it inside this vma. */
	madvise(half + ps, ps, MADV_COLD);
	CHECK(has_pattern(half, len, (uint8_t)(6 + off * 7)), "+%zu KiB: contents", off >> 10);
}

/*
 * The dst window [dst, dst + 2 MiB) is aligned and empty but is two vmas
 * (the second half MADV_NOHUGEPAGE).  The move must succeed without a huge
 * pmd there; then each half is split and unmapped on its own.
 */
static int dst_two_vmas(long ps)
{
	uint8_t *src = thp_map(6), *dst = anon_map_aligned(HUGE, HUGE);

	if (!src)
		return 77;
	CHECK(madvise(dst + HUGE / 2, HUGE / 2, MADV_NOHUGEPAGE) == 0, "split dst in two vmas");
	CHECK(rap(dst, src, HUGE, 0) == (long)HUGE, "move 2 MiB into the two vmas");
	check_half(dst, 0, ps);
	check_half(dst + HUGE / 2, HUGE / 2, ps);
	munmap(dst, HUGE / 2);
	CHECK(has_pattern(dst + HUGE / 2, HUGE / 2, (uint8_t)(6 + HUGE / 2 * 7)),
	      "the second half survives unmapping the first");
	munmap(dst + HUGE / 2, HUGE / 2);
	munmap(src, HUGE);
	return kt_failures ? 1 : 0;
}

static void test_dst_two_vmas_unprivileged(long ps)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		kt_fatal("fork");
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			kt_fatal("setuid 65534");
		prctl(PR_SET_DUMPABLE, 1); /* keep /proc/self readable */
		_exit(dst_two_vmas(ps));
	}
	CHECK(waitpid(pid, &status, 0) == pid, "wait");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "unprivileged move into a window of two vmas (status %#x)", status);
}

/*
 * A THP shared with a fork child (COW) is not this process's to move: EBUSY,
 * decided before splitting anything, so the THP stays pmd-mapped.
 */
static void test_shared_not_split(long ps)
{
	uint8_t *src = thp_map(7), *dst = anon_map_aligned(HUGE, HUGE);
	int wfd;
	pid_t pid;

	if (!src) {
		CHECK(0, "a THP to share");
		return;
	}
	pid = kt_share_with_child(src, HUGE, 1, 7, &wfd);
	errno = 0;
	CHECK(rap(dst, src + 5 * ps, ps, 0) == -1 && errno == EBUSY,
	      "4 KiB of a shared THP: EBUSY");
	CHECK(smaps_kb(src, "AnonHugePages") >= 2048, "the refused THP was not split (%ld kB)",
	      smaps_kb(src, "AnonHugePages"));
	errno = 0;
	CHECK(rap(dst, src, HUGE, 0) == -1 && errno == EBUSY, "the whole shared THP: EBUSY");
	errno = 0;
	CHECK(rap(dst + ps, src, HUGE - ps, 0) == -1 && errno == EBUSY,
	      "misaligned move of a shared THP: EBUSY");
	CHECK(smaps_kb(src, "AnonHugePages") >= 2048, "still not split (%ld kB)",
	      smaps_kb(src, "AnonHugePages"));
	CHECK(resident(dst) == 0 && resident(dst + ps) == 0, "nothing moved");
	CHECK(kt_child_kept_view(pid, wfd), "the child still sees its data");
	munmap(src, HUGE);
	munmap(dst, HUGE);
}

static const struct {
	const char *name;
	void (*fn)(long ps);
} cases[] = {
	{ "whole", test_whole_and_part },
	{ "two-vmas", test_dst_two_vmas_unprivileged },
	{ "shared", test_shared_not_split },
};

/* usage: rap-thp [CASE]   (whole, two-vmas, shared; default: all) */
int main(int argc, char **argv)
{
	long ps = page_size();
	uint8_t *probe;
	int ran = 0;

	kt_name = "rap-thp";
	errno = 0;
	if (rap(NULL, NULL, 0, 0) == -1 && errno == ENOSYS)
		kt_skip("remap_anon_pages() not in this kernel (not the patched one?)");
	probe = thp_map(1);
	if (!probe)
		kt_skip("no transparent huge page could be allocated (THP off?)");
	munmap(probe, HUGE);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (argc < 2 || !strcmp(argv[1], cases[i].name)) {
			cases[i].fn(ps);
			ran++;
		}
	CHECK(ran > 0, "a case named %s", argc > 1 ? argv[1] : "");
	return kt_done();
}
