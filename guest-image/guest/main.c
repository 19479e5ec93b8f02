// SPDX-License-Identifier: GPL-2.0
/*
 * guest: the freestanding program the VMM (or QEMU -kernel) runs.
 *
 * Command line (key=value, space separated; other words are ignored, so
 * QEMU's leading image name is harmless):
 *   workload=seq|random|hotset|idle  what to do (default seq)
 *   mem=SIZE     bytes of RAM the workload uses (default: all RAM above the
 *                image, 2 MiB aligned); K/M/G suffixes
 *   seed=N       generator seed (default 1)
 *   iters=N      iterations (default 4); one iteration = `ops` operations
 *   secs=N       run for N seconds instead (checksum then depends on timing)
 *   ops=N        operations per iteration for random/hotset (default: pages)
 *   ws=SIZE      random: working set (default: mem)
 *   hot=SIZE     hotset: hot set at the start of the region (default 256K)
 *   cold=N       hotset: one cold touch every N operations (default 64)
 *   verify=0|1   hash every word of the region at the end (default 1)
 *   quiet=1      no per-iteration serial lines
 *   mark=N       print iteration N's serial line even when quiet (a cheap
 *                "now" for a host that only sees the serial port)
 *   exit=N       the status to exit with once done (default 0): how a host
 *                checks that the VMM passes the guest's status through
 *
 * Output: serial lines "guest: ..." and reports on GUEST_PORT_REPORT, the
 * last one "done" with the final checksum, then the status on
 * GUEST_PORT_EXIT.  For a given command line and vCPU count the checksum
 * is deterministic (except with secs=), so a migrated or lazily started
 * run can be compared with a plain one.
 */
#include <stdint.h>

#include "common/page.h"
#include "vmm/guest-abi.h"

#define WORDS_PER_PAGE (PAGE_SIZE / 8)

extern char __bss_end[];
void guest_vmm_main(struct guest_bootinfo *bi, uint64_t cpu);
void guest_multiboot_main(uint32_t magic, uint32_t mbi);
void guest_halt(void) __attribute__((noreturn));
void *memset(void *s, int c, unsigned long n);
void *memcpy(void *d, const void *s, unsigned long n);

/* ---- port I/O and serial ---- */

static inline void outb(uint16_t port, uint8_t v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port) : "memory");
}

static inline void outl(uint16_t port, uint32_t v)
{
	__asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port) : "memory");
}

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;

	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* The privilege level this code runs at (0 or 3): the low bits of CS. */
static inline uint32_t current_ring(void)
{
	uint16_t cs;

	__asm__ volatile("mov %%cs, %0" : "=r"(cs));
	return cs & 3;
}

static inline void cpu_relax(void)
{
	__asm__ volatile("pause" ::: "memory");
}

void *memset(void *s, int c, unsigned long n)
{
	unsigned char *p = s;

	while (n--)
		*p++ = (unsigned char)c;
	return s;
}

void *memcpy(void *d, const void *s, unsigned long n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;

	while (n--)
		*dp++ = *sp++;
	return d;
}

static void putc_serial(char c)
{
	if (c == '\n')
		outb(GUEST_SERIAL_BASE, '\r');
	outb(GUEST_SERIAL_BASE, (uint8_t)c);
}

static void puts_serial(const char *s)
{
	while (*s)
		putc_serial(*s++);
}

static void put_dec(uint64_t v)
{
	char buf[24];
	int i = 0;

	do {
		buf[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i)
		putc_serial(buf[--i]);
}

static void put_hex(uint64_t v)
{
	puts_serial("0x");
	for (int shift = 60; shift >= 0; shift -= 4)
		putc_serial("0123456789abcdef"[(v >> shift) & 15]);
}

/* ---- configuration ---- */

struct config {
	int workload;
	uint64_t mem, seed, iters, secs, ops, ws, hot, cold, mark, exit;
	int verify, quiet;
};

struct shared {
	struct config cfg;
	uint64_t region, pages; /* guest-physical start, pages in use */
	uint32_t nr_cpus;
	uint64_t tsc_khz;
	volatile uint32_t go;	/* set by cpu 0 once configured */
	volatile uint32_t done; /* cpus finished */
	uint64_t sums[GUEST_MAX_CPUS];
	uint64_t tsc_back[GUEST_MAX_CPUS]; /* per vCPU: largest TSC step back */
	struct guest_report report[GUEST_MAX_CPUS];
};

static struct shared sh;

static const char *const workload_names[] = {
	[GUEST_WL_SEQ] = "seq",
	[GUEST_WL_RANDOM] = "random",
	[GUEST_WL_HOTSET] = "hotset",
	[GUEST_WL_IDLE] = "idle",
};

static int word_eq(const char *a, const char *alen_end, const char *b)
{
	while (a < alen_end && *b && *a == *b)
		a++, b++;
	return a == alen_end && !*b;
}

/* Parses a decimal number with an optional K/M/G suffix; -1 if invalid. */
static int parse_num(const char *s, const char *end, uint64_t *out)
{
	uint64_t v = 0;

	if (s == end)
		return -1;
	for (; s < end && *s >= '0' && *s <= '9'; s++)
		v = v * 10 + (uint64_t)(*s - '0');
	if (s < end) {
		if (s + 1 != end)
			return -1;
		switch (*s) {
		case 'K':
		case 'k':
			v <<= 10;
			break;
		case 'M':
		case 'm':
			v <<= 20;
			break;
		case 'G':
		case 'g':
			v <<= 30;
			break;
		default:
			return -1;
		}
	}
	*out = v;
	return 0;
}

static int parse_cmdline(const char *s, struct config *c)
{
	*c = (struct config){ .workload = GUEST_WL_SEQ,
			      .seed = 1,
			      .iters = 4,
			      .hot = 256 << 10,
			      .cold = 64,
			      .verify = 1 };
	while (*s) {
		const char *k, *eq = 0, *v, *e;
		uint64_t n = 0;
		int bad = 0;

		while (*s == ' ')
			s++;
		if (!*s)
			break;
		k = s;
		while (*s && *s != ' ') {
			if (*s == '=' && !eq)
				eq = s;
			s++;
		}
		e = s;
		if (!eq)
			continue;
		v = eq + 1;
		if (word_eq(k, eq, "workload")) {
			c->workload = 0;
			for (int w = GUEST_WL_SEQ; w <= GUEST_WL_IDLE; w++)
				if (word_eq(v, e, workload_names[w]))
					c->workload = w;
			bad = !c->workload;
		} else {
			bad = parse_num(v, e, &n);
			if (word_eq(k, eq, "mem"))
				c->mem = n;
			else if (word_eq(k, eq, "seed"))
				c->seed = n;
			else if (word_eq(k, eq, "iters"))
				c->iters = n;
			else if (word_eq(k, eq, "secs"))
				c->secs = n;
			else if (word_eq(k, eq, "ops"))
				c->ops = n;
			else if (word_eq(k, eq, "ws"))
				c->ws = n;
			else if (word_eq(k, eq, "hot"))
				c->hot = n;
			else if (word_eq(k, eq, "cold"))
				c->cold = n ? n : 1;
			else if (word_eq(k, eq, "verify"))
				c->verify = n != 0;
			else if (word_eq(k, eq, "quiet"))
				c->quiet = n != 0;
			else if (word_eq(k, eq, "mark"))
				c->mark = n;
			else if (word_eq(k, eq, "exit"))
				bad |= (c->exit = n) > 0xffffffffu;
			else
				bad = 1;
		}
		if (bad) {
			puts_serial("guest: bad command-line word: ");
			while (k < e)
				putc_serial(*k++);
			putc_serial('\n');
			return -1;
		}
	}
	return 0;
}

/* ---- reports ---- */

static void report(uint32_t cpu, uint32_t kind, uint64_t iter, uint64_t ops, uint64_t sum,
		   uint64_t value)
{
	struct guest_report *r = &sh.report[cpu];

	r->magic = GUEST_REPORT_MAGIC;
	r->kind = kind;
	r->cpu = cpu;
	r->workload = (uint32_t)sh.cfg.workload;
	r->iter = iter;
	r->ops = ops;
	r->checksum = sum;
	r->value = value;
	outl(GUEST_PORT_REPORT, (uint32_t)(uintptr_t)r);
}

static void __attribute__((noreturn)) guest_exit(uint32_t status)
{
	puts_serial("guest: exit status ");
	put_dec(status);
	putc_serial('\n');
	outl(GUEST_PORT_EXIT, status);
	guest_halt();
}

/* ---- workloads ---- */

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static inline uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t touch(uint64_t *page, uint64_t word, uint64_t sum, uint64_t val)
{
	uint64_t old = page[word];

	page[word] = val;
	return mix64(sum ^ old) + word;
}

struct part {
	uint32_t cpu;
	uint64_t *base;
	uint64_t pages;
	uint64_t rng;
	uint64_t sum;
	uint64_t ops;
	uint64_t last_tsc; /* the latest TSC this vCPU has read */
	uint64_t tsc_back; /* the largest step back seen, in cycles (0: none) */
};

/*
 * A guest must never see its TSC go backwards, migrated or not: time in a
 * guest is built on it.  Each vCPU reads it every TSC_CHECK_OPS operations
 * (cheap against a page touch) and remembers the largest step back.
 */
#define TSC_CHECK_OPS 1024

static inline void tsc_check(struct part *p)
{
	uint64_t now = rdtsc();

	if (now < p->last_tsc && p->last_tsc - now > p->tsc_back)
		p->tsc_back = p->last_tsc - now;
	if (now > p->last_tsc)
		p->last_tsc = now;
}

static void one_iteration(struct part *p, uint64_t it)
{
	const struct config *c = &sh.cfg;
	uint64_t *base = p->base, n = p->pages, ops;

	switch (c->workload) {
	case GUEST_WL_SEQ:
		for (uint64_t i = 0; i < n; i++) {
			uint64_t *pg = base + i * WORDS_PER_PAGE;
			uint64_t w = (i * 7 + it) & (WORDS_PER_PAGE - 1);

			p->sum = touch(pg, 0, p->sum, mix64(c->seed ^ (it << 40) ^ i));
			p->sum = touch(pg, w, p->sum, p->sum);
			if (i % TSC_CHECK_OPS == 0)
				tsc_check(p);
		}
		p->ops += n;
		break;
	case GUEST_WL_RANDOM: {
		uint64_t ws = c->ws ? c->ws / PAGE_SIZE / sh.nr_cpus : n;

		if (ws == 0 || ws > n)
			ws = n;
		ops = c->ops ? c->ops : ws;
		for (uint64_t i = 0; i < ops; i++) {
			uint64_t r = next_rand(&p->rng);
			uint64_t *pg = base + (r % ws) * WORDS_PER_PAGE;

			p->sum = touch(pg, (r >> 40) & (WORDS_PER_PAGE - 1), p->sum, r);
			if (i % TSC_CHECK_OPS == 0)
				tsc_check(p);
		}
		p->ops += ops;
		break;
	}
	case GUEST_WL_HOTSET: {
		uint64_t hot = c->hot / PAGE_SIZE / sh.nr_cpus;

		if (hot == 0)
			hot = 1;
		if (hot > n)
			hot = n;
		ops = c->ops ? c->ops : n;
		for (uint64_t i = 0; i < ops; i++) {
			uint64_t r = next_rand(&p->rng);
			uint64_t page = (r % c->cold == 0) ? (r >> 8) % n : (r >> 8) % hot;

			p->sum = touch(base + page * WORDS_PER_PAGE,
				       (r >> 40) & (WORDS_PER_PAGE - 1), p->sum, r);
			if (i % TSC_CHECK_OPS == 0)
				tsc_check(p);
		}
		p->ops += ops;
		break;
	}
	case GUEST_WL_IDLE:
		for (int i = 0; i < 100000; i++) {
			cpu_relax();
			if (i % TSC_CHECK_OPS == 0)
				tsc_check(p);
		}
		p->sum = mix64(p->sum ^ it);
		break;
	}
}

static uint64_t verify_pass(const struct part *p, uint64_t sum)
{
	const uint64_t *w = p->base;
	uint64_t words = p->pages * WORDS_PER_PAGE;

	for (uint64_t i = 0; i < words; i++)
		sum = (sum ^ w[i]) * 0x100000001b3ULL;
	return mix64(sum);
}

static uint64_t run_part(uint32_t cpu)
{
	const struct config *c = &sh.cfg;
	uint64_t per = sh.pages / sh.nr_cpus, it = 0, deadline = 0;
	struct part p = {
		.cpu = cpu,
		.base = (uint64_t *)(uintptr_t)(sh.region + cpu * per * PAGE_SIZE),
		.pages = cpu == sh.nr_cpus - 1 ? sh.pages - cpu * per : per,
		.rng = mix64(c->seed + cpu + 1) | 1,
		.sum = mix64(c->seed ^ ((uint64_t)cpu << 32)),
		.last_tsc = rdtsc(),
	};

	if (c->secs)
		deadline = rdtsc() + c->secs * sh.tsc_khz * 1000;
	for (;;) {
		if (c->secs ? rdtsc() >= deadline : it >= c->iters)
			break;
		one_iteration(&p, it);
		tsc_check(&p);
		it++;
		if (cpu == 0) {
			report(0, GUEST_REPORT_PROGRESS, it, p.ops, p.sum, 0);
			if (!c->quiet || it == c->mark) {
				puts_serial("guest: iter ");
				put_dec(it);
				puts_serial(" checksum=");
				put_hex(p.sum);
				putc_serial('\n');
			}
		}
	}
	if (c->verify && c->workload != GUEST_WL_IDLE)
		p.sum = verify_pass(&p, p.sum);
	if (cpu == 0)
		sh.report[0].iter = it;
	sh.tsc_back[cpu] = p.tsc_back;
	return p.sum;
}

/* Exits with GUEST_EXIT_TSC_BACKWARDS if any vCPU saw its TSC go back. */
static void check_time(void)
{
	for (uint32_t i = 0; i < sh.nr_cpus; i++) {
		if (!sh.tsc_back[i])
			continue;
		puts_serial("guest: TSC went backwards on cpu ");
		put_dec(i);
		puts_serial(" by ");
		put_dec(sh.tsc_back[i]);
		puts_serial(" cycles\n");
		report(0, GUEST_REPORT_ERROR, 0, 0, 0, GUEST_EXIT_TSC_BACKWARDS);
		guest_exit(GUEST_EXIT_TSC_BACKWARDS);
	}
}

static void __attribute__((noreturn)) run_cpu0(const char *cmdline, uint64_t mem_size)
{
	struct config *c = &sh.cfg;
	uint64_t start = ((uint64_t)(uintptr_t)__bss_end + (2UL << 20) - 1) & ~((2UL << 20) - 1);
	uint64_t sum, iters;

	if (parse_cmdline(cmdline, c) < 0) {
		report(0, GUEST_REPORT_ERROR, 0, 0, 0, 2);
		guest_exit(2);
	}
	if (mem_size > GUEST_MAX_MEM)
		mem_size = GUEST_MAX_MEM;
	if (start + PAGE_SIZE * sh.nr_cpus > mem_size || (c->mem && c->mem > mem_size - start)) {
		puts_serial("guest: not enough RAM for the workload (have ");
		put_dec(mem_size > start ? (mem_size - start) >> 10 : 0);
		puts_serial(" KiB above the image)\n");
		report(0, GUEST_REPORT_ERROR, 0, 0, 0, 3);
		guest_exit(3);
	}
	sh.region = start;
	sh.pages = (c->mem ? c->mem : mem_size - start) / PAGE_SIZE;
	if (sh.pages < sh.nr_cpus)
		sh.pages = sh.nr_cpus;
	if (!sh.tsc_khz)
		sh.tsc_khz = 2000000;

	puts_serial("guest: workload=");
	puts_serial(workload_names[c->workload]);
	puts_serial(" cpus=");
	put_dec(sh.nr_cpus);
	puts_serial(" pages=");
	put_dec(sh.pages);
	puts_serial(" seed=");
	put_dec(c->seed);
	puts_serial(c->secs ? " secs=" : " iters=");
	put_dec(c->secs ? c->secs : c->iters);
	/* Under PVM only ring 3 runs natively: show which one this is. */
	puts_serial(" ring=");
	put_dec(current_ring());
	putc_serial('\n');
	report(0, GUEST_REPORT_START, 0, 0, 0, sh.pages);

	__atomic_store_n(&sh.go, 1, __ATOMIC_RELEASE);
	sh.sums[0] = run_part(0);
	while (__atomic_load_n(&sh.done, __ATOMIC_ACQUIRE) != sh.nr_cpus - 1)
		cpu_relax();

	check_time();
	sum = 0;
	for (uint32_t i = 0; i < sh.nr_cpus; i++)
		sum = mix64(sum ^ sh.sums[i]);
	iters = sh.report[0].iter;
	puts_serial("guest: done workload=");
	puts_serial(workload_names[c->workload]);
	puts_serial(" iters=");
	put_dec(iters);
	puts_serial(" checksum=");
	put_hex(sum);
	putc_serial('\n');
	report(0, GUEST_REPORT_DONE, iters, 0, sum, 0);
	guest_exit((uint32_t)c->exit);
}

void guest_vmm_main(struct guest_bootinfo *bi, uint64_t cpu)
{
	if (cpu == 0) {
		if (bi->magic != GUEST_BOOTINFO_MAGIC || bi->nr_cpus == 0 ||
		    bi->nr_cpus > GUEST_MAX_CPUS)
			guest_exit(4);
		sh.nr_cpus = bi->nr_cpus;
		sh.tsc_khz = bi->tsc_khz;
		bi->cmdline[GUEST_CMDLINE_MAX - 1] = 0;
		run_cpu0(bi->cmdline, bi->mem_size);
	}
	while (!__atomic_load_n(&sh.go, __ATOMIC_ACQUIRE))
		cpu_relax();
	sh.sums[cpu] = run_part((uint32_t)cpu);
	__atomic_fetch_add(&sh.done, 1, __ATOMIC_RELEASE);
}

/* Multiboot v1 information, the fields used here. */
struct mb_info {
	uint32_t flags;
	uint32_t mem_lower; /* KiB below 1 MiB */
	uint32_t mem_upper; /* KiB above 1 MiB */
	uint32_t boot_device;
	uint32_t cmdline;
};

void guest_multiboot_main(uint32_t magic, uint32_t mbi)
{
	const struct mb_info *mb = (const struct mb_info *)(uintptr_t)mbi;
	uint64_t mem = 0;
	const char *cmdline = "";

	if (magic != 0x2badb002) {
		puts_serial("guest: not started by a multiboot loader\n");
		guest_exit(4);
	}
	if (mb->flags & 1)
		mem = ((uint64_t)mb->mem_upper + 1024) << 10;
	if (mb->flags & 4)
		cmdline = (const char *)(uintptr_t)mb->cmdline;
	sh.nr_cpus = 1;
	run_cpu0(cmdline, mem);
}
