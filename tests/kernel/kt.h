/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small helpers shared by the in-node kernel tests (tests/kernel/).
 *
 * Every test counts its checks; CHECK() records a failure with the line and
 * errno and goes on, so one run reports everything that is wrong.  main()
 * ends with kt_done(), which prints the summary and returns the exit code
 * (0 all passed, 1 something failed).  kt_skip() exits 77 with a reason.
 */
#ifndef TESTS_KERNEL_KT_H
#define TESTS_KERNEL_KT_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compat/userfault.h"

static const char *kt_name = "kt";
static int kt_checks, kt_failures;

#define CHECK(cond, ...) kt_check(!!(cond), __LINE__, #cond, __VA_ARGS__)

__attribute__((format(printf, 4, 5))) static inline void
kt_check(int ok, int line, const char *expr, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	kt_checks++;
	if (ok)
		return;
	kt_failures++;
	fprintf(stderr, "%s: FAIL line %d: %s (errno %d %s): ", kt_name, line, expr, saved,
		strerror(saved));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	errno = saved;
}

static inline int kt_done(void)
{
	if (kt_failures) {
		fprintf(stderr, "%s: %d of %d checks failed\n", kt_name, kt_failures, kt_checks);
		return 1;
	}
	printf("%s: all %d checks passed\n", kt_name, kt_checks);
	return 0;
}

__attribute__((noreturn)) static inline void kt_skip(const char *why)
{
	printf("%s: SKIP: %s\n", kt_name, why);
	exit(77);
}

__attribute__((noreturn)) static inline void kt_fatal(const char *what)
{
	fprintf(stderr, "%s: FATAL: %s: %s\n", kt_name, what, strerror(errno));
	exit(1);
}

static inline long page_size(void)
{
	return sysconf(_SC_PAGESIZE);
}

/* remap_anon_pages(dst, src, len, flags): bytes moved or -1 with errno. */
static inline long rap(void *dst, void *src, unsigned long len, unsigned long flags)
{
	return syscall(__NR_remap_anon_pages, dst, src, len, flags);
}

/* A fresh private anonymous mapping, aborting the test if there is none. */
static inline void *anon_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		kt_fatal("mmap");
	return p;
}

/* @len bytes at an address aligned to @align (a power of two). */
static inline void *anon_map_aligned(size_t len, size_t align)
{
	uint8_t *p = anon_map(len + align);
	uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);

	if (a > (uintptr_t)p)
		munmap(p, a - (uintptr_t)p);
	munmap((void *)(a + len), (uintptr_t)p + align - a);
	return (void *)a;
}

/* Is the page at @addr resident (mincore)? */
static inline int resident(void *addr)
{
	unsigned char v = 0;

	if (mincore((void *)((uintptr_t)addr & ~(uintptr_t)(page_size() - 1)), 1, &v))
		return -1;
	return v & 1;
}

/* Physical frame of the page at @addr from /proc/self/pagemap, 0 if none. */
static inline uint64_t pfn_of(void *addr)
{
	uint64_t entry = 0;
	FILE *f = fopen("/proc/self/pagemap", "rb");

	if (!f)
		return 0;
	if (fseek(f, (long)((uintptr_t)addr / page_size() * 8), SEEK_SET) ||
	    fread(&entry, sizeof(entry), 1, f) != 1)
		entry = 0;
	fclose(f);
	if (!(entry & (1ULL << 63)))
		return 0;
	return entry & ((1ULL << 55) - 1);
}

#define HUGE (2UL << 20) /* a pmd-mapped transparent huge page */

/* Fill @len bytes with a pattern derived from @seed and the offset. */
static inline void fill_pattern(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* Does [p, p + len) hold fill_pattern(p, len, seed)'s bytes? */
static inline int has_pattern(const uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(seed + i * 7))
			return 0;
	return 1;
}

/*
 * A fork child that shares @n chunks of @chunk bytes at @p (so the kernel
 * sees their pages as not exclusive) until kt_child_kept_view(); then it
 * checks that chunk i still holds fill_pattern(seed0 + i).  Its pid, and
 * in *wfd the pipe end that releases it.
 */
static inline pid_t kt_share_with_child(const uint8_t *p, size_t chunk, long n, uint8_t seed0,
					int *wfd)
{
	int pipefd[2];
	pid_t pid;
	char c;

	if (pipe(pipefd))
		kt_fatal("pipe");
	pid = fork();
	if (pid < 0)
		kt_fatal("fork");
	if (pid == 0) {
		close(pipefd[1]);
		(void)!read(pipefd[0], &c, 1);
		for (long i = 0; i < n; i++)
			if (!has_pattern(p + i * chunk, chunk, (uint8_t)(seed0 + i)))
				_exit(1);
		_exit(0);
	}
	close(pipefd[0]);
	*wfd = pipefd[1];
	return pid;
}

/* Releases kt_share_with_child()'s child: did it still see its data? */
static inline int kt_child_kept_view(pid_t pid, int wfd)
{
	int status;

	close(wfd);
	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/*
 * The "FIELD: N kB" line of the /proc/self/smaps entry of the vma holding
 * @addr (e.g. "AnonHugePages"), in kB; -1 if there is no such vma or field.
 */
static inline long smaps_kb(const void *addr, const char *field)
{
	char line[256], name[64];
	unsigned long lo, hi;
	long kb = -1, v;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
		else if (in && sscanf(line, "%63[^:]: %ld kB", name, &v) == 2 &&
			 !strcmp(name, field)) {
			kb = v;
			break;
		}
	}
	fclose(f);
	return kb;
}

/* The "FIELD: N kB" line of /proc/self/status (e.g. "VmPTE"), -1 if none. */
static inline long status_kb(const char *field)
{
	char line[256], name[64];
	long kb = -1, v;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63[^:]: %ld kB", name, &v) == 2 && !strcmp(name, field)) {
			kb = v;
			break;
		}
	fclose(f);
	return kb;
}

/* A new article-protocol userfaultfd after a correct handshake, or -1. */
static inline int article_uffd(int flags)
{
	uint64_t v = USERFAULTFD_PROTOCOL;
	int fd = syscall(__NR_userfaultfd, flags);

	if (fd < 0)
		return -1;
	if (write(fd, &v, sizeof(v)) != sizeof(v) || read(fd, &v, sizeof(v)) != sizeof(v) ||
	    v != USERFAULTFD_PROTOCOL) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Write one (start, end) pair: claim if @claim, else wake. */
static inline long uffd_range(int fd, void *start, void *end, int claim)
{
	uint64_t pair[2] = { (uintptr_t)start | (claim ? USERFAULTFD_RANGE_REGISTER : 0),
			     (uintptr_t)end };

	return write(fd, pair, sizeof(pair));
}

#endif /* TESTS_KERNEL_KT_H */
