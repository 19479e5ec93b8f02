// SPDX-License-Identifier: GPL-2.0
/*
 * mig-memtest: the migration library end to end on plain memory, without a
 * VM: the "guest RAM" is an anonymous mapping, the "VM state" a small blob
 * carrying the RAM checksum taken at the pause, and the "vCPUs" are threads.
 * The destination's RAM is the VMM's own lazy RAM (ram/ram.h) with the
 * stock-kernel back end (userfaultfd, UFFDIO_COPY / UFFDIO_ZEROPAGE), its
 * page record and its fault thread, so demand faults, the background push,
 * recovery and the metrics are all exercised for real, through the same
 * code as in the VMM.
 *
 *   mig-memtest source --to tcp:H:P --mem SIZE [--seed N] [--precopy-rounds N]
 *                      [--compress] [--metrics FILE] [--recover-ms MS] [--lockstep]
 *                      [--channels N] [--prepage-fixed] [--prepage N] [--push-runs]
 *                      [--max-bandwidth B] [--caps-stdin]
 *   either:        [--idle-ms MS] (the link watchdog's limit, default 10000)
 *   mig-memtest dest --listen tcp:H:P --mem SIZE [--touch seq|random|stride|none]
 *                    [--stride PAGES] [--touch-start PAGE] [--touch-ns NS] [--touchers N]
 *                    [--metrics FILE] [--ram-backend uffd|uffd-move|userfault]
 *                    [--recover-ms MS] [--busy-poll] [--x-stager-delay-us US]
 *   either, TLS:   [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]
 *   either:        [--features-off MASK] (HELLO features not announced, as
 *                  an older peer: 2 = no PAGE_RUN, 4 = payload CRCs kept)
 *
 * The source keeps a writer thread dirtying pages until the pause (so
 * precopy rounds have something to resend).  --lockstep replaces it by a
 * guest that rewrites its hot eighth of RAM, whole, just before each dirty
 * log fetch until the pause, and nothing after: precopy always finds the
 * hot set dirty again (it cannot converge), and a page whose dirty bit was
 * fetched but not resent shows in the checksum.  --touch stride reads every
 * --stride'th page (default 16), then the same from the next page, until
 * every page was read once.  --touch-start: seq and stride begin at that
 * page (wrapping), not where the push begins (page 0), so that their
 * faults are not all on pages the push is sending anyway.  --touch-ns: the
 * "vCPU" works NS nanoseconds per page it reads (a busy wait), as a guest
 * computing between pages; without it, it reads a byte per page and
 * outruns any push.  --touchers N: N "vCPUs" (default 1, at most 8) read
 * the same pages in the same order, so they fault on a page together and
 * the RAM merges their faults into one request (COMPLETE's
 * requests_deduped).  --prepage-fixed: the fixed pre-paging window
 * (the adaptive one's baseline).  --max-bandwidth: the push's cap in
 * bytes/s; --caps-stdin: each line read from stdin is a new cap, set while
 * the migration runs (as QMP's migrate-set-parameters does), or "postcopy"
 * (leave precopy now, as migrate-start-postcopy does), and the source
 * prints "memtest: cap OLD -> NEW at T ms (monotonic N ns), S bytes sent"
 * first, S the bytes sent on both channels (src_publish()'s figure), and
 * the same for each phase ("memtest: phase NAME at ...").  --x-stager-delay-us:
 * the destination installs what precopy staged that much slower per page
 * (mig_opts.x_stager_delay_us), as a slow host does.  --ram-backend: the
 * lazy RAM's back end (ram/ram.h; default uffd); kvm-exit is refused, its
 * faults are a vCPU's.  The destination exits 0 only
 * if every page arrived and the checksum of its RAM equals the source's.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/parse.h"
#include "migrate/migrate.h"
#include "migrate/net.h"
#include "migrate/params.h"
#include "ram/backend.h"
#include "ram/ram.h"

#define STATE_MAGIC 0x54534d4dull

struct blob {
	uint64_t magic;
	uint64_t ram_size;
	uint32_t checksum;
	uint32_t pad;
};

static uint8_t *ram;
static uint64_t ram_size, nr_pages;
static uint64_t seed = 1;

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/*
 * Page i: a quarter are zero at first, the rest a pattern from (seed, i,
 * gen).  A rewrite (gen > 0) zeroes one page in eight, so that a page can
 * go from data to zero and back between precopy rounds: the destination
 * stages zero pages apart from data (dest.c, stage_zero).
 */
static void fill_page(uint64_t i, uint64_t gen)
{
	uint64_t *p = (uint64_t *)(ram + i * PAGE_SIZE);
	if (gen == 0 ? mix(i ^ seed) % 4 == 0 : mix(i ^ seed ^ (gen << 20)) % 8 == 0) {
		memset(p, 0, PAGE_SIZE);
		return;
	}
	uint64_t x = mix(seed * 1000003 + i * 7 + gen);
	/* Half the pattern pages compress well, half do not. */
	int easy = (i & 1) == 0;
	for (unsigned k = 0; k < PAGE_SIZE / 8; k++) {
		p[k] = easy ? x + (k / 64) : (x = mix(x));
	}
}

/* ---- Source ---- */

static pthread_t writer;
static int writer_stop;
static int lockstep; /* no writer thread: see --lockstep above */
static uint64_t lockstep_gen = 1ull << 40;
static uint64_t *dirty;
static pthread_mutex_t dirty_lock = PTHREAD_MUTEX_INITIALIZER;
static int dirty_on;

/* The "guest": rewrites random pages until paused, logging them dirty. */
static void *writer_thread(void *arg)
{
	uint64_t gen = 1, x = seed;
	while (!__atomic_load_n(&writer_stop, __ATOMIC_ACQUIRE)) {
		x = mix(x + 1);
		uint64_t i = x % (nr_pages / 8 + 1); /* a hot eighth of RAM */
		pthread_mutex_lock(&dirty_lock);
		fill_page(i, gen++);
		if (dirty_on)
			dirty[i / 64] |= 1ull << (i % 64);
		pthread_mutex_unlock(&dirty_lock);
		if ((gen & 63) == 0)
			nanosleep(&(struct timespec){ 0, 100000 }, NULL);
	}
	return arg;
}

/* A thread of this test, or the test fails here: it cannot run without it. */
static void start_thread(pthread_t *t, void *(*fn)(void *), const char *what)
{
	int r = pthread_create(t, NULL, fn, NULL);
	if (r) {
		fprintf(stderr, "memtest: cannot start the %s thread: %s\n", what, strerror(r));
		_exit(1);
	}
}

static int src_pause(void *ctx)
{
	__atomic_store_n(&writer_stop, 1, __ATOMIC_RELEASE);
	if (!lockstep)
		pthread_join(writer, NULL);
	return 0;
}

static int src_resume(void *ctx)
{
	writer_stop = 0;
	if (!lockstep)
		start_thread(&writer, writer_thread, "writer");
	return 0;
}

static int src_save(void *ctx, void **out, size_t *len)
{
	struct blob *b = malloc(sizeof(*b));
	b->magic = STATE_MAGIC;
	b->ram_size = ram_size;
	b->checksum = crc32c(0, ram, ram_size);
	b->pad = 0;
	*out = b;
	*len = sizeof(*b);
	fprintf(stderr, "memtest: source checksum 0x%08x\n", b->checksum);
	return 0;
}

static int src_dirty_start(void *ctx)
{
	pthread_mutex_lock(&dirty_lock);
	dirty_on = 1;
	memset(dirty, 0, (nr_pages + 63) / 64 * 8);
	pthread_mutex_unlock(&dirty_lock);
	return 0;
}

static int src_dirty_fetch(void *ctx, uint64_t *bm)
{
	pthread_mutex_lock(&dirty_lock);
	if (lockstep && !__atomic_load_n(&writer_stop, __ATOMIC_ACQUIRE))
		for (uint64_t i = 0; i < nr_pages / 8 + 1; i++) {
			fill_page(i, lockstep_gen++);
			dirty[i / 64] |= 1ull << (i % 64);
		}
	for (uint64_t w = 0; w < (nr_pages + 63) / 64; w++) {
		bm[w] |= dirty[w];
		dirty[w] = 0;
	}
	pthread_mutex_unlock(&dirty_lock);
	return 0;
}

static int src_dirty_stop(void *ctx)
{
	dirty_on = 0;
	return 0;
}

/* ---- Source: the cap, live (--max-bandwidth, --caps-stdin) ---- */

static struct mig_ctl ctl;
static int caps_stdin;
static uint64_t t0_ns;

static void say_at(const char *what)
{
	uint64_t now = now_ns();
	fprintf(stderr, "memtest: %s at %llu ms (monotonic %llu ns), %llu bytes sent\n", what,
		(unsigned long long)((now - t0_ns) / 1000000), (unsigned long long)now,
		(unsigned long long)__atomic_load_n(&ctl.bytes_sent, __ATOMIC_RELAXED));
}

static void phase_changed(void *arg, enum mig_phase phase)
{
	char what[64];
	snprintf(what, sizeof(what), "phase %s", mig_phase_name(phase));
	say_at(what);
}

/* A line on stdin: a new cap, or "postcopy" (detached: the process ends with the migration). */
static void *caps_thread(void *arg)
{
	char line[64], what[96];
	while (fgets(line, sizeof(line), stdin)) {
		uint64_t cap = strtoull(line, NULL, 0);
		if (!strncmp(line, "postcopy", 8)) { /* as QMP's migrate-start-postcopy */
			say_at("start-postcopy");
			__atomic_store_n(&ctl.start_postcopy, 1, __ATOMIC_RELEASE);
			continue;
		}
		snprintf(what, sizeof(what), "cap %llu -> %llu",
			 (unsigned long long)__atomic_load_n(&ctl.max_bandwidth, __ATOMIC_RELAXED),
			 (unsigned long long)cap);
		say_at(what);
		__atomic_store_n(&ctl.max_bandwidth, cap, __ATOMIC_RELAXED);
	}
	return arg;
}

static void start_caps(struct mig_opts *o)
{
	pthread_t t;
	t0_ns = now_ns();
	ctl.phase = MIG_PHASE_SETUP;
	ctl.phase_changed = phase_changed;
	o->ctl = &ctl;
	if (caps_stdin && !pthread_create(&t, NULL, caps_thread, NULL))
		pthread_detach(t);
}

static int run_source(struct mig_opts *o)
{
	if (ctl.max_bandwidth || caps_stdin)
		start_caps(o);
	for (uint64_t i = 0; i < nr_pages; i++)
		fill_page(i, 0);
	dirty = calloc((nr_pages + 63) / 64, 8);
	if (!lockstep)
		start_thread(&writer, writer_thread, "writer");
	struct mig_source_vm vm = {
		.ram = ram,
		.ram_size = ram_size,
		.nr_regions = 1,
		.regions = { { .gpa = 0, .size = ram_size } },
		.pause = src_pause,
		.resume = src_resume,
		.save_state = src_save,
		.dirty_start = src_dirty_start,
		.dirty_fetch = src_dirty_fetch,
		.dirty_stop = src_dirty_stop,
	};
	char err[400];
	int switched;
	int r = mig_source_run(&vm, o, &switched, err, sizeof(err));
	if (r) {
		fprintf(stderr, "memtest: source: migration failed%s: %s\n",
			switched ? " after the switch-over" : "", err);
		if (!switched)
			src_pause(NULL);
		/* The migration failed: the "VM" runs on here, without dirty logging. */
		if (dirty_on)
			fprintf(stderr,
				"memtest: source: dirty logging left on after the failure\n");
		return 1;
	}
	fprintf(stderr, "memtest: source: migration complete\n");
	return 0;
}

/* ---- Destination: the VMM's lazy RAM ---- */

static struct ram *dram;
static bool busy_poll; /* the fault thread spins instead of sleeping in poll() */
static struct mig_dest *dest;
static uint32_t expect_sum;
static int have_state;

static int dst_load(void *ctx, const void *blob, size_t len)
{
	struct blob b;
	if (len != sizeof(b))
		return -EINVAL;
	memcpy(&b, blob, sizeof(b));
	if (b.magic != STATE_MAGIC || b.ram_size != ram_size)
		return -EINVAL;
	expect_sum = b.checksum;
	have_state = 1;
	return 0;
}

static const char *touch = "random";
static const char *backend_name = "uffd"; /* --ram-backend */
static uint64_t touched, stride = 16, touch_start, touch_ns, touchers = 1;

/* The k-th page --touch stride reads: k * stride, wrapping one page on. */
static uint64_t stride_page(uint64_t k)
{
	uint64_t per = (nr_pages + stride - 1) / stride; /* pages per pass */
	uint64_t i = (k % per) * stride + k / per;
	return i < nr_pages ? i : (k * 7919) % nr_pages; /* the last pass's tail */
}

/* The "vCPU": reads pages while postcopy runs, so faults really happen. */
static void *toucher_thread(void *arg)
{
	volatile uint8_t sink = 0;
	uint64_t x = seed * 31 + 7;
	for (uint64_t k = 0; k < nr_pages && mig_dest_status(dest) == 0; k++) {
		uint64_t i = k;
		if (strcmp(touch, "random") == 0) {
			x = mix(x);
			i = x % nr_pages;
		} else if (strcmp(touch, "stride") == 0) {
			i = stride_page(k);
		}
		if (strcmp(touch, "random"))
			i = (i + touch_start) % nr_pages;
		sink ^= ram[i * PAGE_SIZE + (k % PAGE_SIZE)];
		__atomic_fetch_add(&touched, 1, __ATOMIC_RELAXED); /* touchers share it */
		/* --touch-ns: the work between pages (a fault's wait is not work) */
		for (uint64_t t = now_ns(); touch_ns && now_ns() - t < touch_ns;)
			;
	}
	(void)sink;
	return arg;
}

/* The destination's resident memory at the end, for the memory check. */
static void print_rss(void)
{
	char line[128];
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6) || !strncmp(line, "VmHWM:", 6))
			fprintf(stderr, "memtest: dest: %s", line);
	if (f)
		fclose(f);
}

static int run_dest(struct mig_opts *o)
{
	char err[400];
	dest = mig_dest_listen(o, err, sizeof(err));
	if (!dest) {
		fprintf(stderr, "memtest: dest: %s\n", err);
		return 1;
	}
	const struct ram_backend_ops *ops = ram_backend_named(backend_name);
	if (!ops || ops->own_thread_faults) {
		fprintf(stderr, "memtest: dest: --ram-backend %s: %s\n", backend_name,
			ops ? "its faults are a vCPU's KVM exits, and mig-memtest has no vCPUs"
			    : "unknown (uffd, uffd-move, userfault)");
		return 2;
	}
	int r = ram_backend_find(backend_name, &ops);
	if (!r)
		r = ram_create(ram_size, ops, &dram);
	if (r) {
		fprintf(stderr, "memtest: dest: lazy RAM (%s%s%s): %s\n", backend_name,
			ops->needs ? ", which needs " : "", ops->needs ? ops->needs : "",
			strerror(-r));
		return 77;
	}
	ram = ram_host(dram);
	struct ram_source *src = mig_dest_page_source(dest);
	r = src ? ram_start_faults(dram, src, busy_poll) : -ENOMEM;
	if (r) {
		fprintf(stderr, "memtest: dest: cannot start the fault thread: %s\n", strerror(-r));
		return 1;
	}
	pthread_t tt[8];
	struct mig_dest_vm vm = {
		.ram = dram,
		.nr_regions = 1,
		.regions = { { .gpa = 0, .size = ram_size } },
		.load_state = dst_load,
	};
	printf("memtest: dest: listening on %s\n", o->addr);
	fflush(stdout);
	r = mig_dest_incoming(dest, &vm, err, sizeof(err));
	if (r) {
		fprintf(stderr, "memtest: dest: incoming migration failed: %s\n", err);
		ram_stop_faults(dram);
		mig_dest_free(dest);
		return 1;
	}
	mig_dest_resumed(dest);
	int touching = strcmp(touch, "none") != 0;
	if (touching)
		for (uint64_t k = 0; k < touchers; k++)
			start_thread(&tt[k], toucher_thread, "toucher");
	r = mig_dest_wait(dest, err, sizeof(err));
	if (r) {
		fprintf(stderr, "memtest: dest: migration failed: %s\n", err);
		/* The toucher may be blocked on a page that never comes. */
		_exit(1);
	}
	if (touching)
		for (uint64_t k = 0; k < touchers; k++)
			pthread_join(tt[k], NULL);
	ram_stop_faults(dram);
	if (o->metrics) {
		FILE *f = strcmp(o->metrics, "-") ? fopen(o->metrics, "w") : stdout;
		if (f) {
			mig_dest_report(dest, f);
			if (f != stdout)
				fclose(f);
		}
	}
	uint32_t sum = crc32c(0, ram, ram_size);
	print_rss(); /* while the migration object lives, as in the VMM */
	mig_dest_free(dest);
	if (!have_state || sum != expect_sum) {
		fprintf(stderr, "memtest: dest: CHECKSUM MISMATCH: 0x%08x, source had 0x%08x\n",
			sum, expect_sum);
		return 1;
	}
	fprintf(stderr, "memtest: dest: checksum ok 0x%08x (%llu pages touched)\n", sum,
		(unsigned long long)touched);
	return 0;
}

/* --channels: the one table's range (migrate/params.h). */
static bool parse_channels(const char *v, unsigned *out)
{
	char err[200];
	uint64_t n;
	if (mig_param_parse(MIG_P_CHANNELS, "--channels", v, &n, err, sizeof(err))) {
		fprintf(stderr, "memtest: %s\n", err);
		return false;
	}
	*out = (unsigned)n;
	return true;
}

/* --max-bandwidth: the one table's range. */
static bool parse_cap(const char *v)
{
	char err[200];
	if (mig_param_parse(MIG_P_MAX_BANDWIDTH, "--max-bandwidth", v, &ctl.max_bandwidth, err,
			    sizeof(err))) {
		fprintf(stderr, "memtest: %s\n", err);
		return false;
	}
	return true;
}

/* An option with a value: 0, -1 when unknown, -2 when its value is refused (said). */
static int value_opt(struct mig_opts *o, const char *a, const char *v)
{
	if (!strcmp(a, "--to") || !strcmp(a, "--listen"))
		o->addr = v;
	else if (!strcmp(a, "--mem"))
		ram_size = parse_size(v, &ram_size) ? 0 : ram_size; /* 0: refused below */
	else if (!strcmp(a, "--seed"))
		seed = strtoull(v, NULL, 0);
	else if (!strcmp(a, "--precopy-rounds"))
		o->precopy_rounds = atoi(v);
	else if (!strcmp(a, "--metrics"))
		o->metrics = v;
	else if (!strcmp(a, "--recover-ms"))
		o->recover_ms = atoi(v);
	else if (!strcmp(a, "--idle-ms"))
		o->idle_ms = atoi(v);
	else if (!strcmp(a, "--x-stager-delay-us"))
		o->x_stager_delay_us = (unsigned)strtoul(v, NULL, 0);
	else if (!strcmp(a, "--channels"))
		return parse_channels(v, &o->channels) ? 0 : -2;
	else if (!strcmp(a, "--max-bandwidth"))
		return parse_cap(v) ? 0 : -2;
	else if (!strcmp(a, "--features-off"))
		o->features_off = (uint32_t)strtoul(v, NULL, 0);
	else if (!strcmp(a, "--touch"))
		touch = v;
	else if (!strcmp(a, "--ram-backend"))
		backend_name = v;
	else if (!strcmp(a, "--touchers")) {
		if (!parse_u64(v, 1, 8, &touchers))
			return 0;
		fprintf(stderr, "memtest: --touchers: '%s' is not a number from 1 to 8\n", v);
		return -2;
	} else if (!strcmp(a, "--touch-ns"))
		touch_ns = strtoull(v, NULL, 0);
	else if (!strcmp(a, "--touch-start"))
		touch_start = strtoull(v, NULL, 0);
	else if (!strcmp(a, "--stride"))
		stride = strtoull(v, NULL, 0) ? strtoull(v, NULL, 0) : 1;
	else if (!strcmp(a, "--prepage"))
		o->prepage = (unsigned)strtoul(v, NULL, 0);
	else if (!strcmp(a, "--tls-creds"))
		o->tls.creds_dir = v;
	else if (!strcmp(a, "--tls-psk"))
		o->tls.psk_file = v;
	else if (!strcmp(a, "--tls-hostname"))
		o->tls.hostname = v;
	else
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct mig_opts o = { .progress = -1 };
	const char *mode = argc > 1 ? argv[1] : "";
	ram_size = 16 << 20;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--compress")) {
			o.compress = 1;
			continue;
		}
		if (!strcmp(a, "--lockstep")) {
			lockstep = 1;
			continue;
		}
		if (!strcmp(a, "--prepage-fixed")) {
			o.prepage_fixed = 1;
			continue;
		}
		if (!strcmp(a, "--push-runs")) {
			o.push_runs = 1;
			continue;
		}
		if (!strcmp(a, "--caps-stdin")) {
			caps_stdin = 1;
			continue;
		}
		if (!strcmp(a, "--busy-poll")) {
			busy_poll = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "memtest: %s needs a value\n", a);
			return 2;
		}
		i++;
		int r = value_opt(&o, a, v);
		if (r == -2)
			return 2;
		if (r) {
			fprintf(stderr, "memtest: unknown option %s\n", a);
			return 2;
		}
	}
	if (!o.addr || (strcmp(mode, "source") && strcmp(mode, "dest")) || !ram_size ||
	    ram_size % PAGE_SIZE) {
		fprintf(stderr, "usage: mig-memtest source --to tcp:H:P | dest --listen tcp:H:P "
				"[--mem SIZE] ...\n");
		return 2;
	}
	nr_pages = ram_size / PAGE_SIZE;
	if (!strcmp(mode, "dest"))
		ram = NULL; /* run_dest() maps lazy RAM */
	else
		ram = mmap(NULL, ram_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			   0);
	if (ram == MAP_FAILED) {
		perror("memtest: mmap");
		return 1;
	}
	if (o.progress < 0)
		o.progress = 0;
	signal(SIGPIPE, SIG_IGN); /* as in the VMM (OpenSSL writes with write()) */
	return strcmp(mode, "source") == 0 ? run_source(&o) : run_dest(&o);
}
