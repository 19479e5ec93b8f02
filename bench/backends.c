// SPDX-License-Identifier: GPL-2.0
/*
 * bench-backends: what a page install and a fault round trip cost with each
 * guest-RAM back end the kernel has (uffd = UFFDIO_COPY, uffd-move =
 * UFFDIO_MOVE, userfault = remap_anon_pages on the patched kernel), through
 * the VMM's own RAM code (ram/, libram.a).  JSON on stdout.
 *
 *   install        ram_install() of a page the caller has filled; prep =
 *                  filling the bounce page (for a moving back end this
 *                  includes allocating a fresh page, since the last one moved)
 *   fault_poll     a thread writes to a missing page; the VMM's fault thread
 *                  (sleeping in poll()) serves it from a buffer source
 *   fault_busy     the same with a busy-polling fault thread
 *   memcpy         the push's floor (docs/bench.md, "Floors"): MIB of
 *                  non-zero pages copied into fresh anonymous memory (its
 *                  first-touch faults included, as a destination pays them),
 *                  median of 3, GiB/s; "warm": into memory already faulted
 *
 * usage: bench-backends [--pages N] [--backend NAME]... [--memcpy-mib MIB]
 *        (default 4096 pages, all back ends, 256 MiB; --memcpy-mib 0: none)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include "ram/backend.h"
#include "ram/ram.h"
#include "vmm/util.h"

struct stats {
	double p50, p99, max, mean, pages_per_s;
};

static struct stats summarize(uint64_t *ns, size_t n, uint64_t wall_ns)
{
	struct stats s = { 0 };
	double sum = 0;

	sort_u64(ns, n);
	for (size_t i = 0; i < n; i++)
		sum += (double)ns[i];
	s.p50 = ns[n / 2] / 1000.0;
	s.p99 = ns[(n * 99) / 100] / 1000.0;
	s.max = ns[n - 1] / 1000.0;
	s.mean = sum / n / 1000.0;
	s.pages_per_s = wall_ns ? n / (wall_ns / 1e9) : 0;
	return s;
}

static void print_stats(const char *name, struct stats s, int last)
{
	printf("      \"%s\": {\"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f, "
	       "\"mean_us\": %.2f, \"pages_per_s\": %.0f}%s\n",
	       name, s.p50, s.p99, s.max, s.mean, s.pages_per_s, last ? "" : ",");
}

static void fill(uint8_t *page, uint64_t i)
{
	uint64_t *w = (uint64_t *)page;

	for (size_t k = 0; k < PAGE_SIZE / 8; k++)
		w[k] = i * 0x9e3779b97f4a7c15ULL + k;
}

/* ram_install of n pages, no faults involved. */
static int bench_install(const struct ram_backend_ops *ops, size_t n, struct stats *inst,
			 struct stats *prep_inst)
{
	struct ram *ram = NULL;
	uint64_t *t = calloc(n, sizeof(*t)), *tp = calloc(n, sizeof(*tp)), wall;
	uint8_t *bounce =
	    mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int r = ram_create(n * PAGE_SIZE, ops, &ram);

	if (r < 0 || !t || !tp || bounce == MAP_FAILED) {
		free(t);
		free(tp);
		return r < 0 ? r : -ENOMEM;
	}
	wall = now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t a = now_ns(), b, c;

		fill(bounce, i);
		b = now_ns();
		r = ram_install(ram, i, bounce);
		c = now_ns();
		if (r != 0)
			break;
		t[i] = c - b;
		tp[i] = c - a;
	}
	wall = now_ns() - wall;
	if (r == 0 && ((uint64_t *)ram_host(ram))[n * PAGE_SIZE / 8 - 1] !=
			  (n - 1) * 0x9e3779b97f4a7c15ULL + 511)
		r = -EIO; /* the last page does not hold what was installed */
	if (r == 0) {
		*inst = summarize(t, n, wall);
		*prep_inst = summarize(tp, n, wall);
	}
	ram_destroy(ram);
	munmap(bounce, PAGE_SIZE);
	free(t);
	free(tp);
	return r < 0 ? r : (r ? -EEXIST : 0);
}

struct toucher {
	uint8_t *host;
	size_t n;
	uint64_t *t;
	uint64_t wall;
	int bad;
};

static void *touch_thread(void *arg)
{
	struct toucher *tc = arg;
	uint64_t start = now_ns();

	for (size_t i = 0; i < tc->n; i++) {
		volatile uint64_t *p = (volatile uint64_t *)(tc->host + i * PAGE_SIZE);
		uint64_t a = now_ns(), v;

		v = *p; /* missing: the fault thread installs it */
		tc->t[i] = now_ns() - a;
		if (v != i * 0x9e3779b97f4a7c15ULL)
			tc->bad++;
		*p = v + 1;
	}
	tc->wall = now_ns() - start;
	return NULL;
}

static int bench_faults(const struct ram_backend_ops *ops, size_t n, bool busy, struct stats *out)
{
	struct ram *ram;
	struct ram_source *src = NULL;
	struct toucher tc = { .n = n };
	uint8_t *img =
	    mmap(NULL, n * PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pthread_t th;
	int r;

	if (img == MAP_FAILED)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		fill(img + i * PAGE_SIZE, i);
	tc.t = calloc(n, sizeof(*tc.t));
	r = tc.t ? ram_create(n * PAGE_SIZE, ops, &ram) : -ENOMEM;
	if (r < 0)
		goto out;
	r = ram_source_buffer_create(img, n * PAGE_SIZE, &src);
	if (!r)
		r = ram_start_faults(ram, src, busy);
	if (r < 0) {
		if (src)
			src->destroy(src);
		ram_destroy(ram);
		goto out;
	}
	tc.host = ram_host(ram);
	r = -pthread_create(&th, NULL, touch_thread, &tc);
	if (!r) {
		pthread_join(th, NULL);
		r = ram_fault_error(ram);
	}
	ram_destroy(ram);
	if (!r && tc.bad)
		r = -EIO;
	if (!r)
		*out = summarize(tc.t, n, tc.wall);
out:
	free(tc.t);
	munmap(img, n * PAGE_SIZE);
	return r;
}

/* Baseline: an ordinary first-touch anonymous page fault, no user space involved. */
static struct stats bench_first_touch(size_t n)
{
	uint8_t *m =
	    mmap(NULL, n * PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *t = calloc(n, sizeof(*t)), wall = now_ns();
	struct stats s;

	madvise(m, n * PAGE_SIZE, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < n; i++) {
		uint64_t a = now_ns();

		((volatile uint8_t *)m)[i * PAGE_SIZE] = 1;
		t[i] = now_ns() - a;
	}
	s = summarize(t, n, now_ns() - wall);
	free(t);
	munmap(m, n * PAGE_SIZE);
	return s;
}

static double gib_per_s(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (1 << 30) / (ns / 1e9) : 0;
}

/*
 * One copy of n bytes of src into fresh anonymous memory (fresh) and then
 * again into the same, now faulted, memory (warm): GiB/s each.  Page by
 * page, as a destination installs them.  -1 when out of memory.
 */
static int memcpy_once(const uint8_t *src, size_t n, double *fresh, double *warm)
{
	uint8_t *d = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t t;

	if (d == MAP_FAILED)
		return -1;
	/* Base pages, as lazy RAM's installs: no THP would fill 2 MiB per fault. */
	madvise(d, n, MADV_NOHUGEPAGE);
	t = now_ns();
	for (size_t off = 0; off < n; off += PAGE_SIZE)
		memcpy(d + off, src + off, PAGE_SIZE);
	*fresh = gib_per_s(n, now_ns() - t);
	t = now_ns();
	for (size_t off = 0; off < n; off += PAGE_SIZE)
		memcpy(d + off, src + off, PAGE_SIZE);
	*warm = gib_per_s(n, now_ns() - t);
	if (d[n - 1] != src[n - 1]) /* keeps the copies from being optimised out */
		*fresh = 0;
	munmap(d, n);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The memcpy floor: median of 3 copies of mib MiB of non-zero pages. */
static void bench_memcpy(uint64_t mib)
{
	size_t n = (size_t)mib << 20;
	uint8_t *src = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double fresh[3], warm[3];

	if (src == MAP_FAILED) {
		printf("  \"memcpy\": {\"error\": \"%s\"},\n", strerror(errno));
		return;
	}
	for (size_t i = 0; i < n; i += 8) /* no zero page: each has data */
		*(uint64_t *)(src + i) = (i * 0x9e3779b97f4a7c15ull) | 1;
	for (int k = 0; k < 3; k++) {
		if (memcpy_once(src, n, &fresh[k], &warm[k])) {
			printf("  \"memcpy\": {\"error\": \"out of memory\"},\n");
			munmap(src, n);
			return;
		}
	}
	munmap(src, n);
	qsort(fresh, 3, sizeof(double), cmp_double);
	qsort(warm, 3, sizeof(double), cmp_double);
	printf("  \"memcpy\": {\"mib\": %llu, \"runs\": 3, \"fresh_GiB_per_s\": %.3f, "
	       "\"fresh_min\": %.3f, \"fresh_max\": %.3f, \"warm_GiB_per_s\": %.3f},\n",
	       (unsigned long long)mib, fresh[1], fresh[0], fresh[2], warm[1]);
}

struct args {
	const char *want[8];
	int nwant;
	uint64_t pages, memcpy_mib;
};

/* The command line into a; 0, or -1 after the usage line. */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const char *const all[] = { "uffd", "uffd-move", "userfault" };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--pages") && i + 1 < argc &&
		    !parse_u64(argv[i + 1], 100, 1 << 20, &a->pages)) {
			i++;
		} else if (!strcmp(argv[i], "--backend") && i + 1 < argc && a->nwant < 8) {
			a->want[a->nwant++] = argv[++i];
		} else if (!strcmp(argv[i], "--memcpy-mib") && i + 1 < argc &&
			   !parse_u64(argv[i + 1], 0, 65536, &a->memcpy_mib)) {
			i++;
		} else {
			fprintf(stderr,
				"usage: bench-backends [--pages 100..1048576] [--backend NAME]... "
				"[--memcpy-mib MIB]\n");
			return -1;
		}
	}
	if (!a->nwant)
		for (size_t i = 0; i < ARRAY_SIZE(all); i++)
			a->want[a->nwant++] = all[i];
	return 0;
}

int main(int argc, char **argv)
{
	struct args a = { .pages = 4096, .memcpy_mib = 256 };
	const char *const *want = a.want;
	int first = 1;
	uint64_t pages, memcpy_mib;
	struct utsname u;

	if (parse_args(argc, argv, &a))
		return 2;
	pages = a.pages;
	memcpy_mib = a.memcpy_mib;
	uname(&u);
	printf("{\n  \"bench\": \"backends\",\n  \"kernel\": \"%s\",\n  \"pages\": %llu,\n",
	       u.release, (unsigned long long)pages);
	if (memcpy_mib)
		bench_memcpy(memcpy_mib);
	printf("  \"first_touch\": {\n");
	print_stats("fault", bench_first_touch(pages), 1);
	printf("  },\n  \"backends\": [\n");
	for (int i = 0; i < a.nwant; i++) {
		const struct ram_backend_ops *ops;
		struct stats inst, prep, fp, fb;
		int r = ram_backend_find(want[i], &ops);

		if (!first)
			printf(",\n");
		first = 0;
		if (r < 0) {
			printf("    {\"name\": \"%s\", \"available\": false, \"error\": \"%s\"}",
			       want[i], strerror(-r));
			continue;
		}
		r = bench_install(ops, pages, &inst, &prep);
		if (!r)
			r = bench_faults(ops, pages, false, &fp);
		if (!r)
			r = bench_faults(ops, pages, true, &fb);
		if (r < 0) {
			printf("    {\"name\": \"%s\", \"available\": true, \"error\": \"%s\"}",
			       want[i], strerror(-r));
			continue;
		}
		printf("    {\n      \"name\": \"%s\",\n      \"available\": true,\n      "
		       "\"zero_copy\": %s,\n",
		       ops->name, ops->moves_pages ? "true" : "false");
		print_stats("install", inst, 0);
		print_stats("prep_and_install", prep, 0);
		print_stats("fault_poll", fp, 0);
		print_stats("fault_busy", fb, 1);
		printf("    }");
	}
	printf("\n  ]\n}\n");
	return 0;
}
