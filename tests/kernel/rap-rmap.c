// SPDX-License-Identifier: GPL-2.0
/*
 * rap-rmap: an rmap walker that does not hold the page lock must never walk
 * a moved page through the anon_vma it had before the move.
 *
 * remap_anon_pages() gives a page a new anon_vma (page->mapping) while
 * holding the old anon_vma's lock.  folio_lock_anon_vma_read(), used by
 * walkers without the page lock (folio_referenced(), page_idle, DAMON), reads
 * page->mapping, then takes that anon_vma's lock, sleeping if the mover holds
 * it; unless it checks page->mapping again afterwards, it walks the old
 * anon_vma, finds no vma mapping the page there and misses its ptes.
 *
 * The observable: page_idle (/sys/kernel/mm/page_idle/bitmap).  Marking a
 * page idle clears the young bits of its ptes; reading it back walks the rmap
 * and reports "idle" only if no pte was young.  Movers move a few pages back
 * and forth between two vmas with anon_vmas of their own (and replace the
 * vma they left by a fresh one now and then, so old anon_vmas are freed), and
 * touch the pages at their new place after each move.  A checker marks its
 * mover's pages idle, waits until the mover has moved and touched them since,
 * and reads the bits: a page reported idle was accessed where the walk did not
 * look: the walk used a stale anon_vma, or it read the new anon_vma while
 * the page was in flight (the new pte not yet set).  Runs for a bounded time.
 *
 * Two things besides a stale walk make page_idle lose a page, and the test
 * rules both out rather than count them:
 * - page_idle's bitmap cannot read or write the 64-page word that max_pfn
 *   cuts (6.1 returns 0 bytes for it): a page there is swapped for another;
 * - compaction may migrate a mover's page, after which its old pfn belongs
 *   to someone else: a page reported idle is confirmed with the mover
 *   paused, at the pfn it has now.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "kt.h"

#define NPAGES	      4 /* pages per mover: few, so walks meet their moves */
#define MOVERS	      2
#define RUN_SECONDS   40
#define REPLACE_EVERY 16 /* rounds between replacing the vma left behind */
#define IDLE_BITMAP   "/sys/kernel/mm/page_idle/bitmap"

struct mover {
	uint8_t *at, *away; /* where the pages are, and the other region */
	uint64_t pfn[NPAGES];
	unsigned long rounds; /* completed move-and-touch rounds (atomic) */
	int error;	      /* errno of a failed step, 0 if none */
	unsigned long checks, stale, migrated;
	int pause, paused; /* checker asks, mover answers between rounds (atomic) */
	int done;	   /* the mover has left its loop (atomic) */
};

static long ps;
static int idle_fd;
static int stop; /* atomic */

/* Where untrackable pages are parked, so that faulting again gets others. */
#define PARK_PAGES 64 /* more than one bitmap word: enough for its cut part */
static uint8_t *park;
static int parked;

/* NPAGES pages between two PROT_NONE guards, so no vma merges with it. */
static uint8_t *region_map(void)
{
	uint8_t *p = anon_map((NPAGES + 2) * ps);

	if (mprotect(p, ps, PROT_NONE) || mprotect(p + (NPAGES + 1) * ps, ps, PROT_NONE))
		kt_fatal("mprotect guard");
	return p + ps;
}

static void region_unmap(uint8_t *r)
{
	munmap(r - ps, (NPAGES + 2) * ps);
}

static void touch_pages(const uint8_t *r)
{
	for (int i = 0; i < NPAGES; i++)
		(void)*(const volatile uint8_t *)(r + i * ps);
}

static void *mover_main(void *arg)
{
	struct mover *m = arg;
	uint8_t *from;

	for (unsigned long r = 1; !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); r++) {
		if (__atomic_load_n(&m->pause, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&m->paused, 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&m->pause, __ATOMIC_ACQUIRE))
				sched_yield();
			__atomic_store_n(&m->paused, 0, __ATOMIC_RELEASE);
		}
		if (rap(m->away, m->at, NPAGES * ps, 0) != NPAGES * ps) {
			m->error = errno ? errno : EIO;
			break;
		}
		from = m->at;
		m->at = m->away;
		touch_pages(m->at);
		if (r % REPLACE_EVERY == 0) {
			/* Free the anon_vma the pages just left. */
			region_unmap(from);
			from = region_map();
		}
		m->away = from;
		__atomic_store_n(&m->rounds, r, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Set (mark idle) or read the idle bit of @pfn: 1 idle, 0 not, -1 error. */
static int idle_bit(uint64_t pfn, int set)
{
	uint64_t word = 1ULL << (pfn % 64);
	off_t off = (off_t)(pfn / 64 * 8);

	if (set)
		return pwrite(idle_fd, &word, 8, off) == 8 ? 1 : -1;
	if (pread(idle_fd, &word, 8, off) != 8)
		return -1;
	return (int)(word >> (pfn % 64) & 1);
}

/* Wait until @m completed round @round (or the run ends): 1 if it did. */
static int wait_round(struct mover *m, unsigned long round)
{
	while (__atomic_load_n(&m->rounds, __ATOMIC_ACQUIRE) < round) {
		if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE) || m->error)
			return 0;
		sched_yield();
	}
	return 1;
}

/*
 * Page @i of @m was reported idle although touched.  With the mover paused,
 * look where the page is now: if it has another pfn, compaction migrated it
 * (not a stale walk: follow it); if not, the walk really missed it.
 */
static int confirm_stale(struct mover *m, int i)
{
	uint64_t now;
	int stale;

	__atomic_store_n(&m->pause, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&m->paused, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&m->done, __ATOMIC_ACQUIRE))
		sched_yield();
	now = pfn_of(m->at + i * ps);
	stale = now == m->pfn[i];
	if (!stale) {
		m->migrated++;
		m->pfn[i] = now;
	}
	__atomic_store_n(&m->pause, 0, __ATOMIC_RELEASE);
	return stale;
}

static void *checker_main(void *arg)
{
	struct mover *m = arg;
	unsigned long r0;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		for (int i = 0; i < NPAGES; i++)
			idle_bit(m->pfn[i], 1);
		/* Round r0 + 2 both moves and touches after the marking. */
		r0 = __atomic_load_n(&m->rounds, __ATOMIC_ACQUIRE);
		if (!wait_round(m, r0 + 2))
			break;
		for (int i = 0; i < NPAGES; i++)
			if (idle_bit(m->pfn[i], 0) == 1 && confirm_stale(m, i)) {
				m->stale++;
				fprintf(stderr, "rap-rmap: pfn %#llx touched but reported idle\n",
					(unsigned long long)m->pfn[i]);
			}
		m->checks++;
		if (m->stale)
			__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/*
 * Fresh pages sit in a per-CPU batch before they reach the LRU, and
 * page_idle ignores pages off the LRU: fault them in on one CPU, then fill
 * that CPU's batch with other pages so it drains.
 */
static void setup_mover(struct mover *m)
{
	m->at = region_map();
	m->away = region_map();
	for (int i = 0; i < NPAGES; i++) {
		m->at[i * ps] = (uint8_t)(i + 1);
		m->pfn[i] = pfn_of(m->at + i * ps);
		while (m->pfn[i] && idle_bit(m->pfn[i], 0) < 0) {
			if (parked == PARK_PAGES)
				kt_fatal("no page outside page_idle's cut bitmap word");
			if (rap(park + parked++ * ps, m->at + i * ps, ps, 0) != ps)
				kt_fatal("park an untrackable page");
			m->at[i * ps] = (uint8_t)(i + 1);
			m->pfn[i] = pfn_of(m->at + i * ps);
		}
	}
}

/*
 * Without movers, page_idle must see the pages: idle after marking, not after
 * a move and a touch.  (A touch alone may not set the young bit again: the
 * marking clears it without a TLB flush; the move flushes.)
 */
static int idle_tracking_works(struct mover *m)
{
	int idle = 1, touched = 0;
	uint8_t *from = m->at;

	for (int i = 0; i < NPAGES; i++)
		idle_bit(m->pfn[i], 1);
	for (int i = 0; i < NPAGES; i++)
		idle &= idle_bit(m->pfn[i], 0) == 1;
	if (rap(m->away, m->at, NPAGES * ps, 0) != NPAGES * ps)
		return 0;
	m->at = m->away;
	m->away = from;
	touch_pages(m->at);
	for (int i = 0; i < NPAGES; i++)
		touched |= idle_bit(m->pfn[i], 0) != 0;
	return idle && !touched;
}

int main(void)
{
	struct mover movers[MOVERS] = { 0 };
	pthread_t mt[MOVERS], ct[MOVERS];
	unsigned long checks = 0, stale = 0, rounds = 0, migrated = 0;
	struct timespec t0, t1;
	uint8_t *filler;
	cpu_set_t cpu0, all;

	kt_name = "rap-rmap";
	ps = page_size();
	errno = 0;
	if (rap(NULL, NULL, 0, 0) == -1 && errno == ENOSYS)
		kt_skip("remap_anon_pages() not in this kernel (not the patched one?)");
	idle_fd = open(IDLE_BITMAP, O_RDWR | O_CLOEXEC);
	if (idle_fd < 0)
		kt_skip(IDLE_BITMAP " missing (CONFIG_IDLE_PAGE_TRACKING off)");

	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	if (sched_getaffinity(0, sizeof(all), &all))
		kt_fatal("sched_getaffinity");
	sched_setaffinity(0, sizeof(cpu0), &cpu0);
	park = anon_map(PARK_PAGES * ps);
	for (int i = 0; i < MOVERS; i++) {
		setup_mover(&movers[i]);
		CHECK(movers[i].pfn[0] != 0, "pagemap shows PFNs (root)");
	}
	/* A few tries: a page may still sit in a batch, or off the LRU for a while. */
	for (int i = 0, ok = 0, tries = 0; i < MOVERS; i++, ok = tries = 0) {
		while (!ok && tries++ < 10) {
			filler = anon_map(64 * ps);
			for (int k = 0; k < 64; k++)
				filler[k * ps] = 1;
			ok = idle_tracking_works(&movers[i]);
			munmap(filler, 64 * ps);
		}
		CHECK(ok, "page_idle tracks mover %d's pages (%d tries)", i, tries);
	}
	if (kt_failures)
		return kt_done();
	/* The race needs the threads on all CPUs: they inherit this mask. */
	sched_setaffinity(0, sizeof(all), &all);

	for (int i = 0; i < MOVERS; i++)
		if (pthread_create(&mt[i], NULL, mover_main, &movers[i]) ||
		    pthread_create(&ct[i], NULL, checker_main, &movers[i]))
			kt_fatal("pthread_create");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int s = 0; s < RUN_SECONDS * 10 && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); s++)
		usleep(100 * 1000);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < MOVERS; i++) {
		pthread_join(mt[i], NULL);
		pthread_join(ct[i], NULL);
		CHECK(movers[i].error == 0, "mover %d: every move succeeded (errno %d)", i,
		      movers[i].error);
		checks += movers[i].checks;
		stale += movers[i].stale;
		migrated += movers[i].migrated;
		rounds += movers[i].rounds;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("rap-rmap: %lu rounds of moves, %lu checks, %lu stale walks in %ld s"
	       " (%d pages parked, %lu migrated)\n",
	       rounds, checks, stale, (long)(t1.tv_sec - t0.tv_sec), parked, migrated);
	CHECK(checks > 0, "the checkers completed checks");
	CHECK(stale == 0, "no rmap walk missed a moved page (%lu of %lu checks did)", stale,
	      checks);
	return kt_done();
}
