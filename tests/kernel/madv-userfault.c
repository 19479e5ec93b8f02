// SPDX-License-Identifier: GPL-2.0
/*
 * madv-userfault: MADV_USERFAULT / MADV_NOUSERFAULT on the patched kernel.
 *
 * A missing page in MADV_USERFAULT memory that no userfaultfd claims gives
 * SIGBUS (BUS_ADRERR, si_addr = the address) on read and write, -EFAULT on a
 * kernel access; present pages are untouched; MADV_NOUSERFAULT restores
 * demand-zero faults; only private anonymous memory qualifies (EINVAL).
 * Also what fork (child inherits the flag), mremap (flag moves) and munmap
 * (flag gone) do, and the THP fault path.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#include "kt.h"

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;
static void *volatile bus_addr;
static volatile int bus_code;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (!bus_armed)
		_exit(3);
	bus_addr = si->si_addr;
	bus_code = si->si_code;
	bus_armed = 0;
	siglongjmp(bus_jmp, 1);
}

/* Touch @p (write if @write): 0 if it worked, 1 if SIGBUS, at bus_addr. */
static int touch(volatile uint8_t *p, int write)
{
	bus_addr = NULL;
	bus_code = 0;
	if (sigsetjmp(bus_jmp, 1))
		return 1;
	bus_armed = 1;
	if (write)
		*p = 0x5a;
	else
		(void)*p;
	bus_armed = 0;
	return 0;
}

/* SIGBUS with BUS_ADRERR at exactly @p. */
static int sigbus_at(volatile uint8_t *p, int write)
{
	return touch(p, write) == 1 && bus_addr == (void *)p && bus_code == BUS_ADRERR;
}

static void test_basic(long ps)
{
	uint8_t *m = anon_map(4 * ps);
	int pipefd[2];

	m[0] = 7; /* present before the advice: stays */
	CHECK(madvise(m, 4 * ps, MADV_USERFAULT) == 0, "MADV_USERFAULT on anon private");
	CHECK(touch(m, 0) == 0 && m[0] == 7, "a present page is untouched");
	CHECK(sigbus_at(m + ps + 123, 0), "read of a missing page: SIGBUS at %p, got %p code %d",
	      (void *)(m + ps + 123), bus_addr, bus_code);
	CHECK(sigbus_at(m + 2 * ps, 1), "write of a missing page: SIGBUS, got %p code %d", bus_addr,
	      bus_code);
	CHECK(resident(m + ps) == 0, "no page was allocated by the failed faults");

	/* Kernel accesses get EFAULT instead of a signal. */
	if (pipe(pipefd) == 0) {
		errno = 0;
		CHECK(write(pipefd[1], m + 3 * ps, 16) == -1 && errno == EFAULT,
		      "copy_from_user of a missing page: EFAULT");
		CHECK(write(pipefd[1], "abcd", 4) == 4, "pipe write");
		errno = 0;
		CHECK(read(pipefd[0], m + 3 * ps, 4) == -1 && errno == EFAULT,
		      "copy_to_user into a missing page: EFAULT");
		close(pipefd[0]);
		close(pipefd[1]);
	}

	/* MADV_DONTNEED makes a page missing again. */
	CHECK(madvise(m, ps, MADV_DONTNEED) == 0, "MADV_DONTNEED");
	CHECK(sigbus_at(m, 0), "a zapped page is missing again");

	/* Part of the range back to demand-zero. */
	CHECK(madvise(m + ps, ps, MADV_NOUSERFAULT) == 0, "MADV_NOUSERFAULT");
	CHECK(touch(m + ps, 0) == 0 && m[ps] == 0, "demand-zero read after MADV_NOUSERFAULT");
	CHECK(touch(m + ps, 1) == 0 && m[ps] == 0x5a, "write after MADV_NOUSERFAULT");
	CHECK(sigbus_at(m + 2 * ps, 0), "the rest of the range still faults to SIGBUS");
	munmap(m, 4 * ps);
}

static void test_einval(long ps)
{
	uint8_t *shared, *file;
	int fd;

	shared = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	errno = 0;
	CHECK(madvise(shared, ps, MADV_USERFAULT) == -1 && errno == EINVAL, "shared anon: EINVAL");
	munmap(shared, ps);

	fd = open("/proc/self/exe", O_RDONLY);
	file = mmap(NULL, ps, PROT_READ, MAP_PRIVATE, fd, 0);
	errno = 0;
	CHECK(file != MAP_FAILED && madvise(file, ps, MADV_USERFAULT) == -1 && errno == EINVAL,
	      "private file mapping: EINVAL");
	if (file != MAP_FAILED)
		munmap(file, ps);
	close(fd);

	errno = 0;
	CHECK(madvise((void *)0x10001, ps, MADV_USERFAULT) == -1 && errno == EINVAL,
	      "misaligned start: EINVAL");
}

static void test_fork(long ps)
{
	uint8_t *m = anon_map(2 * ps);
	int status;
	pid_t pid;

	m[0] = 9;
	CHECK(madvise(m, 2 * ps, MADV_USERFAULT) == 0, "MADV_USERFAULT");
	pid = fork();
	if (pid == 0) {
		/* The child inherits the flag: its present page reads, the missing one SIGBUSes. */
		if (touch(m, 0) || m[0] != 9)
			_exit(10);
		_exit(sigbus_at(m + ps, 0) ? 0 : 11);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "child inherits MADV_USERFAULT (status %#x)", status);
	munmap(m, 2 * ps);
}

static void test_mremap_munmap(long ps)
{
	uint8_t *m = anon_map(2 * ps), *n, *again;

	CHECK(madvise(m, 2 * ps, MADV_USERFAULT) == 0, "MADV_USERFAULT");
	n = mremap(m, 2 * ps, 2 * ps, MREMAP_MAYMOVE | MREMAP_FIXED, anon_map(2 * ps));
	CHECK(n != MAP_FAILED, "mremap");
	CHECK(sigbus_at(n + ps, 0), "the flag moves with mremap");

	munmap(n, 2 * ps);
	again =
	    mmap(n, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(again == n && touch(n + ps, 0) == 0 && n[ps] == 0,
	      "after munmap a new mapping at the same place demand-zero faults");
	munmap(n, 2 * ps);
}

static void test_thp(void)
{
	const size_t huge = 2UL << 20;
	uint8_t *m = anon_map_aligned(2 * huge, huge);

	madvise(m, 2 * huge, MADV_HUGEPAGE);
	CHECK(madvise(m, 2 * huge, MADV_USERFAULT) == 0, "MADV_USERFAULT on a THP-able range");
	CHECK(sigbus_at(m + huge + 4096 * 3, 0), "THP read fault: SIGBUS");
	CHECK(sigbus_at(m, 1), "THP write fault: SIGBUS");
	CHECK(madvise(m, 2 * huge, MADV_NOUSERFAULT) == 0, "MADV_NOUSERFAULT");
	CHECK(touch(m, 1) == 0 && m[0] == 0x5a, "THP range faults normally again");
	munmap(m, 2 * huge);
}

int main(void)
{
	struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER };
	long ps = page_size();
	uint8_t *probe;

	kt_name = "madv-userfault";
	sigaction(SIGBUS, &sa, NULL);

	probe = anon_map(ps);
	if (madvise(probe, ps, MADV_USERFAULT) && errno == EINVAL)
		kt_skip("MADV_USERFAULT not supported by this kernel (not the patched one?)");
	munmap(probe, ps);

	test_basic(ps);
	test_einval(ps);
	test_fork(ps);
	test_mremap_munmap(ps);
	test_thp();
	return kt_done();
}
