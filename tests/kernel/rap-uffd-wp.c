// SPDX-License-Identifier: GPL-2.0
/*
 * rap-uffd-wp: a page write-protected by userfaultfd (UFFDIO_WRITEPROTECT in
 * a VM_UFFD_WP range) stays write-protected when remap_anon_pages() moves
 * it (kernel-patches 0003.2): the first write at its new place is reported
 * to the handler as a write-protect fault, and completes only once the
 * handler removes the protection.  A page, the zero page and a whole THP
 * (the pmd path); an unprotected page still moves writable (no fault).
 * Without the fix the destination was made writable and the write went by
 * unreported.
 *
 * The bit stays only where a handler registered the destination for write
 * protection, as fork keeps it: moved into a vma that is not VM_UFFD_WP,
 * the same page, zero page and THP lose it: pagemap must not report them
 * write-protected (PM_UFFD_WP, bit 57) after the move nor after a write,
 * and after a later UFFDIO_REGISTER in WP mode a write nobody protected
 * must not fault.  Before issue 31 the stale bit stayed on all three.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>

#include "kt.h"

static long ps;
static int uffd;

static int wp(void *addr, size_t len, int on)
{
	struct uffdio_writeprotect w = { .range = { (uintptr_t)addr, len },
					 .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0 };

	return ioctl(uffd, UFFDIO_WRITEPROTECT, &w);
}

struct writer {
	volatile uint8_t *at;
	uint8_t val;
	int done; /* atomic */
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	*w->at = w->val;
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Write @val at @at from another thread and expect (@want_fault) or not a
 * write-protect fault there; resolve it by unprotecting [@at page, +@len).
 */
static void write_expect(const char *how, uint8_t *at, size_t len, uint8_t val, int want_fault)
{
	struct writer w = { .at = at, .val = val };
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	struct uffd_msg msg;
	uint8_t *page = (uint8_t *)((uintptr_t)at & ~(uintptr_t)(len - 1));
	pthread_t th;
	int got;

	if (pthread_create(&th, NULL, writer_main, &w))
		kt_fatal("pthread_create");
	got = poll(&pfd, 1, want_fault ? 10000 : 1000) == 1 &&
	      read(uffd, &msg, sizeof(msg)) == sizeof(msg);
	if (!want_fault) {
		CHECK(!got, "%s: no fault for a write to an unprotected page", how);
		/* A wrong fault: let the writer go rather than hang. */
		if (got)
			CHECK(wp(page, len, 0) == 0, "%s: unprotect after the wrong fault", how);
	} else {
		CHECK(got, "%s: the first write at the new place is reported", how);
		if (got) {
			CHECK(
			    msg.event == UFFD_EVENT_PAGEFAULT &&
				(msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) &&
				(msg.arg.pagefault.address & ~(uint64_t)(ps - 1)) ==
				    ((uintptr_t)at & ~(uintptr_t)(ps - 1)),
			    "%s: as a write-protect fault at %p (event %u flags %#llx addr %#llx)",
			    how, (void *)at, msg.event, (unsigned long long)msg.arg.pagefault.flags,
			    (unsigned long long)msg.arg.pagefault.address);
			CHECK(!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE),
			      "%s: the write waits for the handler", how);
		}
		/* Unprotecting wakes the writer (or there was no fault at all). */
		CHECK(wp(page, len, 0) == 0, "%s: unprotect", how);
	}
	pthread_join(th, NULL);
	CHECK(*at == val, "%s: the write landed", how);
}

/* A registered (missing + wp) region of @len bytes aligned to @align. */
static uint8_t *wp_region(size_t len, size_t align)
{
	uint8_t *p = anon_map_aligned(len, align);
	struct uffdio_register reg = { .range = { (uintptr_t)p, len },
				       .mode = UFFDIO_REGISTER_MODE_WP };

	if (align == HUGE)
		madvise(p, len, MADV_HUGEPAGE);
	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		kt_fatal("UFFDIO_REGISTER wp");
	return p;
}

static void test_page(void)
{
	uint8_t *r = wp_region(8 * ps, ps);

	/* Pages 0 and 1 present; 0 write-protected, 1 not. */
	fill_pattern(r, 2 * ps, 21);
	CHECK(wp(r, ps, 1) == 0, "page: write-protect page 0");
	CHECK(rap(r + 4 * ps, r, ps, 0) == ps, "page: move the protected page");
	CHECK(rap(r + 5 * ps, r + ps, ps, 0) == ps, "page: move the unprotected page");
	CHECK(has_pattern(r + 4 * ps, ps, 21), "page: contents moved");
	write_expect("page", r + 4 * ps + 100, ps, 0xa5, 1);
	write_expect("unprotected page", r + 5 * ps + 100, ps, 0x5a, 0);
	/* Moved once more, now unprotected: writable where it lands. */
	CHECK(rap(r + 6 * ps, r + 4 * ps, ps, 0) == ps, "page: move it again");
	write_expect("page after unprotect", r + 6 * ps + 200, ps, 0x3c, 0);
	munmap(r, 8 * ps);
}

static void test_zero_page(void)
{
	uint8_t *r = wp_region(4 * ps, ps);
	volatile uint8_t c = r[0]; /* the zero page at r */

	(void)c;
	CHECK(wp(r, ps, 1) == 0, "zero page: write-protect it");
	CHECK(rap(r + 2 * ps, r, ps, 0) == ps, "zero page: move it");
	CHECK(r[2 * ps] == 0, "zero page: reads zero at the new place");
	write_expect("zero page", r + 2 * ps + 8, ps, 0x77, 1);
	munmap(r, 4 * ps);
}

static void test_thp(void)
{
	uint8_t *r = wp_region(2 * HUGE, HUGE);
	uint64_t pfn;

	fill_pattern(r, HUGE, 33);
	if (smaps_kb(r, "AnonHugePages") < 2048) {
		printf("rap-uffd-wp: no THP, pmd case not run\n");
		munmap(r, 2 * HUGE);
		return;
	}
	pfn = pfn_of(r);
	CHECK(wp(r, HUGE, 1) == 0, "THP: write-protect it");
	CHECK(rap(r + HUGE, r, HUGE, 0) == (long)HUGE, "THP: move it whole");
	CHECK(pfn_of(r + HUGE) == pfn && smaps_kb(r, "AnonHugePages") >= 2048,
	      "THP: the same huge page, still pmd-mapped");
	write_expect("THP", r + HUGE + 3 * ps + 5, HUGE, 0x99, 1);
	CHECK(has_pattern(r + HUGE, 3 * ps, 33), "THP: the rest kept its contents");
	munmap(r, 2 * HUGE);
}

/* Does pagemap report the page at @addr write-protected by userfaultfd? */
static int pagemap_uffd_wp(void *addr)
{
	uint64_t entry = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0 || pread(fd, &entry, sizeof(entry), (off_t)((uintptr_t)addr / ps * 8)) != 8)
		kt_fatal("pagemap");
	close(fd);
	return !!(entry & (1ULL << 57)); /* PM_UFFD_WP */
}

/*
 * Move a write-protected @len bytes at @src (a page, the zero page or a THP)
 * into @dst, in a vma not registered with any userfaultfd: pagemap must show
 * no uffd-wp bit there.  Then either (@write_first) write: no fault, and
 * still no bit; or register [@dst, +@len) for WP and write: no fault either,
 * since nobody protected it (a stale bit would fault only here: a write in
 * the unregistered vma makes the entry writable, bit or not).
 */
static void unregistered_dst(const char *how, uint8_t *dst, uint8_t *src, size_t len,
			     int write_first)
{
	struct uffdio_register reg = { .range = { (uintptr_t)dst, len },
				       .mode = UFFDIO_REGISTER_MODE_WP };
	char what[80];

	CHECK(pagemap_uffd_wp(src), "%s: write-protected before the move", how);
	CHECK(rap(dst, src, len, 0) == (long)len, "%s: move it into an unregistered vma", how);
	CHECK(!pagemap_uffd_wp(dst), "%s: pagemap shows no uffd-wp after the move", how);
	if (write_first) {
		snprintf(what, sizeof(what), "%s in an unregistered vma", how);
		write_expect(what, dst + 8, len, 0x42, 0);
		CHECK(!pagemap_uffd_wp(dst), "%s: pagemap shows no uffd-wp after a write", how);
		return;
	}
	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		kt_fatal("UFFDIO_REGISTER wp of the destination");
	snprintf(what, sizeof(what), "%s, its vma registered for WP after the move", how);
	write_expect(what, dst + 16, len, 0x43, 0);
}

static void test_unregistered_dst(void)
{
	uint8_t *r = wp_region(4 * ps, ps);
	uint8_t *d = anon_map_aligned(4 * ps, ps);
	volatile uint8_t c = r[2 * ps] + r[3 * ps]; /* the zero page at r + 2, 3 pages */

	(void)c;
	fill_pattern(r, 2 * ps, 45);
	CHECK(wp(r, 4 * ps, 1) == 0, "unregistered dst: write-protect two pages, two zero pages");
	unregistered_dst("page", d, r, ps, 1);
	unregistered_dst("page", d + ps, r + ps, ps, 0);
	unregistered_dst("zero page", d + 2 * ps, r + 2 * ps, ps, 1);
	unregistered_dst("zero page", d + 3 * ps, r + 3 * ps, ps, 0);
	munmap(r, 4 * ps);
	munmap(d, 4 * ps);

	r = wp_region(2 * HUGE, HUGE);
	d = anon_map_aligned(2 * HUGE, HUGE);
	madvise(d, 2 * HUGE, MADV_HUGEPAGE);
	fill_pattern(r, 2 * HUGE, 46);
	if (smaps_kb(r, "AnonHugePages") < 4096) {
		printf("rap-uffd-wp: no THP, unregistered pmd case not run\n");
	} else {
		CHECK(wp(r, 2 * HUGE, 1) == 0, "unregistered dst: write-protect two THPs");
		unregistered_dst("THP", d, r, HUGE, 1);
		unregistered_dst("THP", d + HUGE, r + HUGE, HUGE, 0);
		CHECK(smaps_kb(d, "AnonHugePages") >= 2048,
		      "THP: still pmd-mapped where it landed");
	}
	munmap(r, 2 * HUGE);
	munmap(d, 2 * HUGE);
}

int main(void)
{
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP };

	kt_name = "rap-uffd-wp";
	ps = page_size();
	uffd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api))
		kt_fatal("userfaultfd + UFFDIO_API");
	if (!(api.ioctls & (1ULL << _UFFDIO_REGISTER)))
		kt_fatal("no UFFDIO_REGISTER");
	test_page();
	test_zero_page();
	test_thp();
	test_unregistered_dst();
	return kt_done();
}
