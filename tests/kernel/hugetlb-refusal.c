// SPDX-License-Identifier: GPL-2.0
/*
 * hugetlb-refusal: the series refuses hugetlb memory, and leaves it as it was.
 *
 * MADV_USERFAULT (0002) and remap_anon_pages() (0003) take private anonymous
 * memory only (MADV_NOUSERFAULT, which only clears the flag, takes any vma,
 * as MADV_KEEPONFORK does).  A hugetlb vma is neither (vma_is_anonymous() is false: it
 * has hugetlb_vm_ops), private or shared, and mainline UFFDIO_MOVE refuses
 * it too.  Each refusal must be EINVAL with nothing changed: no flag left on
 * the vma (a later fault still allocates a huge page instead of SIGBUS), no
 * page moved out of or into it, the anonymous side intact.
 *
 * Needs CONFIG_HUGETLBFS and free huge pages: the node script reserves them
 * (vm.nr_hugepages); with none this test fails rather than skips, because
 * both node configs build hugetlbfs in.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>

#include "kt.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

static void on_sigbus(int sig)
{
	(void)sig;
	if (!bus_armed)
		_exit(3);
	bus_armed = 0;
	siglongjmp(bus_jmp, 1);
}

/* Read the byte at @p: its value, or -1 if the read took SIGBUS. */
static int read_byte(volatile uint8_t *p)
{
	int v;

	if (sigsetjmp(bus_jmp, 1))
		return -1;
	bus_armed = 1;
	v = *p;
	bus_armed = 0;
	return v;
}

/* Two huge pages of private anonymous hugetlb memory, the first faulted in. */
static uint8_t *hugetlb_private(void)
{
	uint8_t *h = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (h == MAP_FAILED)
		kt_fatal("mmap MAP_HUGETLB (CONFIG_HUGETLBFS, vm.nr_hugepages?)");
	fill_pattern(h, HUGE, 0x31);
	return h;
}

static void test_madvise(uint8_t *h)
{
	CHECK(madvise(h, 2 * HUGE, MADV_USERFAULT) == -1 && errno == EINVAL,
	      "MADV_USERFAULT on private hugetlb: EINVAL");
	CHECK(madvise(h + HUGE, HUGE, MADV_USERFAULT) == -1 && errno == EINVAL,
	      "MADV_USERFAULT on its missing half: EINVAL");
	/* Clearing a flag a vma cannot have is harmless: as MADV_KEEPONFORK. */
	CHECK(madvise(h, 2 * HUGE, MADV_NOUSERFAULT) == 0,
	      "MADV_NOUSERFAULT on private hugetlb: accepted, as on any vma");
	/* No flag was left behind: the missing huge page faults in as zeroes. */
	CHECK(read_byte(h + HUGE + 4096) == 0, "missing huge page: demand-zero, no SIGBUS");
	CHECK(has_pattern(h, HUGE, 0x31), "present huge page: unchanged");
}

static void test_rap(uint8_t *h, long ps)
{
	uint8_t *anon = anon_map(2 * ps);

	fill_pattern(anon, ps, 0x52);
	CHECK(rap(anon + ps, h, ps, 0) == -1 && errno == EINVAL,
	      "remap_anon_pages from hugetlb: EINVAL");
	CHECK(rap(anon + ps, h, ps, RAP_ALLOW_SRC_HOLES) == -1 && errno == EINVAL,
	      "remap_anon_pages from hugetlb, holes allowed: EINVAL");
	CHECK(rap(h + HUGE, anon, ps, 0) == -1 && errno == EINVAL,
	      "remap_anon_pages into hugetlb: EINVAL");
	CHECK(rap(h, h + HUGE, HUGE, RAP_ALLOW_SRC_HOLES) == -1 && errno == EINVAL,
	      "remap_anon_pages hugetlb to hugetlb: EINVAL");
	CHECK(has_pattern(h, HUGE, 0x31), "hugetlb source: unchanged");
	CHECK(has_pattern(anon, ps, 0x52), "anonymous source: unchanged");
	CHECK(resident(anon + ps) == 0, "anonymous destination: still missing");
	munmap(anon, 2 * ps);
}

/* A shared hugetlbfs file (memfd): the same refusals. */
static void test_shared(long ps)
{
	int fd = memfd_create("hugetlb-refusal", MFD_HUGETLB);
	uint8_t *s, *anon;

	CHECK(fd >= 0, "memfd_create(MFD_HUGETLB)");
	if (fd < 0)
		return;
	CHECK(ftruncate(fd, HUGE) == 0, "ftruncate to one huge page");
	s = mmap(NULL, HUGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(s != MAP_FAILED, "mmap the hugetlbfs file shared");
	if (s == MAP_FAILED) {
		close(fd);
		return;
	}
	fill_pattern(s, ps, 0x63);
	anon = anon_map(ps);
	CHECK(madvise(s, HUGE, MADV_USERFAULT) == -1 && errno == EINVAL,
	      "MADV_USERFAULT on shared hugetlb: EINVAL");
	CHECK(rap(anon, s, ps, 0) == -1 && errno == EINVAL,
	      "remap_anon_pages from shared hugetlb: EINVAL");
	CHECK(has_pattern(s, ps, 0x63), "shared hugetlb page: unchanged");
	munmap(anon, ps);
	munmap(s, HUGE);
	close(fd);
}

int main(void)
{
	long ps = page_size();
	uint8_t *h;

	kt_name = "hugetlb-refusal";
	signal(SIGBUS, on_sigbus);
	h = hugetlb_private();
	test_madvise(h);
	test_rap(h, ps);
	munmap(h, 2 * HUGE);
	test_shared(ps);
	return kt_done();
}
