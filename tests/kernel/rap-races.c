// SPDX-License-Identifier: GPL-2.0
/*
 * rap-races: remap_anon_pages() against whatever else may happen to the same
 * memory at the same time, each race for a bounded time.
 *
 * A mover shuttles NPAGES marked pages between two regions A and B while
 * another thread faults on them, zaps them (MADV_DONTNEED), unmaps and maps
 * the region again, mremaps it away and back, forks, or moves the same pages
 * too.  Each page carries its number at both ends, so a torn, duplicated or
 * foreign page is seen.  Afterwards every page must be where exactly one
 * copy of it is expected (or gone, where the race may legitimately drop it),
 * the mover must only have seen the errnos the race explains, and the kernel
 * log must stay clean (the node harness checks it).
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "kt.h"

#define NPAGES	     8
#define RACE_SECONDS 3
#define MAGIC	     0x5241500000000000ULL /* "RAP" */

static long ps;
static int stop; /* atomic: the race is over */

struct region {
	uint8_t *a, *b; /* NPAGES pages each */
	size_t len;
};

static void mark(uint8_t *page, int id)
{
	uint64_t v = MAGIC | (uint64_t)id;

	memcpy(page, &v, 8);
	memcpy(page + ps - 8, &v, 8);
}

/* 0 for a page of zeroes, the page's id (1..NPAGES), or -1 for anything else. */
static int page_id(const uint8_t *page)
{
	uint64_t head, tail;

	memcpy(&head, page, 8);
	memcpy(&tail, page + ps - 8, 8);
	if (!head && !tail)
		return 0;
	if (head != tail || (head & ~0xffffULL) != MAGIC || (head & 0xffff) < 1 ||
	    (head & 0xffff) > NPAGES)
		return -1;
	return (int)(head & 0xffff);
}

static void region_setup(struct region *r)
{
	r->len = NPAGES * ps;
	r->a = anon_map(r->len);
	r->b = anon_map(r->len);
	madvise(r->a, r->len, MADV_NOHUGEPAGE);
	madvise(r->b, r->len, MADV_NOHUGEPAGE);
	for (int i = 0; i < NPAGES; i++)
		mark(r->a + i * ps, i + 1);
}

static void region_free(struct region *r)
{
	munmap(r->a, r->len);
	munmap(r->b, r->len);
}

/* Only residency is looked at: a read of an unmapped slot would fault a page in. */
static int count_ids(struct region *r, int seen[NPAGES + 1])
{
	int bad = 0;

	memset(seen, 0, sizeof(int) * (NPAGES + 1));
	for (int side = 0; side < 2; side++)
		for (int i = 0; i < NPAGES; i++) {
			uint8_t *p = (side ? r->b : r->a) + i * ps;
			int id = resident(p) == 1 ? page_id(p) : 0;

			if (id < 0)
				bad++;
			else
				seen[id]++;
		}
	return bad;
}

/* Every page exactly once (@may_lose: at most once), nothing foreign. */
static void check_conserved(struct region *r, const char *race, int may_lose)
{
	int seen[NPAGES + 1], ok = 1;

	CHECK(count_ids(r, seen) == 0, "%s: no torn or foreign page", race);
	for (int id = 1; id <= NPAGES; id++)
		ok &= may_lose ? seen[id] <= 1 : seen[id] == 1;
	CHECK(ok, "%s: every page %s", race, may_lose ? "at most once" : "exactly once");
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int race_over(double end)
{
	return __atomic_load_n(&stop, __ATOMIC_ACQUIRE) || now() > end;
}

/*
 * Move every page of @from to @to.  A destination slot holding the zero page
 * (a racing read fault) is zapped and the move goes on.  Returns 0 or the
 * errno that stopped it; *moved counts the bytes moved.
 */
static int move_all(uint8_t *to, uint8_t *from, size_t len, unsigned long flags, size_t *moved)
{
	size_t done = 0;
	long r;

	while (done < len) {
		r = rap(to + done, from + done, len - done, flags);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (errno == EEXIST && page_id(to + done) == 0) {
			madvise(to + done, ps, MADV_DONTNEED);
			continue;
		}
		*moved += done;
		return errno;
	}
	*moved += done;
	return 0;
}

/* A thread that does @fn(@r) until the race is over. */
struct actor {
	struct region *r;
	void (*fn)(struct region *r);
	double end;
	pthread_t th;
};

static void *actor_main(void *arg)
{
	struct actor *a = arg;

	while (!race_over(a->end))
		a->fn(a->r);
	return NULL;
}

static void actor_start(struct actor *a, struct region *r, void (*fn)(struct region *), double end)
{
	a->r = r;
	a->fn = fn;
	a->end = end;
	if (pthread_create(&a->th, NULL, actor_main, a))
		kt_fatal("pthread_create");
}

/*
 * Shuttle the pages A -> B -> A ... until @end, while @fn runs in another
 * thread.  Errnos in @allowed (a 0-terminated list) are part of the race;
 * returns the number of unexpected ones.
 */
static int shuttle(struct region *r, void (*fn)(struct region *), const int *allowed,
		   unsigned long flags, unsigned long *rounds)
{
	double end = now() + RACE_SECONDS;
	struct actor act;
	int at_b = 0, unexpected = 0, err;
	size_t moved = 0;

	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	actor_start(&act, r, fn, end);
	*rounds = 0;
	while (!race_over(end)) {
		err = at_b ? move_all(r->a, r->b, r->len, flags, &moved)
			   : move_all(r->b, r->a, r->len, flags, &moved);
		if (!err) {
			at_b = !at_b;
			(*rounds)++;
			continue;
		}
		const int *e = allowed;

		while (*e && *e != err)
			e++;
		if (!*e) {
			fprintf(stderr, "rap-races: unexpected errno %d (%s)\n", err,
				strerror(err));
			unexpected++;
		}
		sched_yield();
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(act.th, NULL);
	return unexpected;
}

/* Read faults on both regions: empty slots get the zero page. */
static void reader(struct region *r)
{
	for (int i = 0; i < NPAGES; i++) {
		if (page_id(r->a + i * ps) < 0 || page_id(r->b + i * ps) < 0) {
			fprintf(stderr, "rap-races: reader saw a torn page\n");
			__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
			__atomic_fetch_add(&kt_failures, 1, __ATOMIC_RELAXED);
		}
	}
}

static void zapper(struct region *r)
{
	madvise(r->a, ps, MADV_DONTNEED);
	madvise(r->b + (NPAGES - 1) * ps, ps, MADV_DONTNEED);
	sched_yield();
}

static void unmapper(struct region *r)
{
	munmap(r->b, r->len);
	if (mmap(r->b, r->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		 0) != r->b)
		kt_fatal("mmap MAP_FIXED");
	madvise(r->b, r->len, MADV_NOHUGEPAGE);
	sched_yield();
}

static uint8_t *spare; /* where remapper parks region B */

static void remapper(struct region *r)
{
	if (mremap(r->b, r->len, r->len, MREMAP_MAYMOVE | MREMAP_FIXED, spare) != spare ||
	    mremap(spare, r->len, r->len, MREMAP_MAYMOVE | MREMAP_FIXED, r->b) != r->b)
		kt_fatal("mremap");
	sched_yield();
}

static int fork_failures;

static void forker(struct region *r)
{
	int seen[NPAGES + 1], status, ok = 1;
	pid_t pid = fork();

	if (pid == 0) {
		/* fork took mmap_lock for write: a snapshot between two moves. */
		if (count_ids(r, seen))
			_exit(1);
		for (int id = 1; id <= NPAGES; id++)
			ok &= seen[id] == 1;
		_exit(ok ? 0 : 2);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		fork_failures++;
}

static void test_faults(void)
{
	static const int allowed[] = { 0 };
	struct region r;
	unsigned long rounds;

	region_setup(&r);
	CHECK(shuttle(&r, reader, allowed, 0, &rounds) == 0, "faults: no unexpected errno");
	check_conserved(&r, "faults", 0);
	printf("rap-races: faults: %lu rounds\n", rounds);
	region_free(&r);
}

static void test_dontneed(void)
{
	static const int allowed[] = { 0 };
	struct region r;
	unsigned long rounds;

	region_setup(&r);
	CHECK(shuttle(&r, zapper, allowed, RAP_ALLOW_SRC_HOLES, &rounds) == 0,
	      "MADV_DONTNEED: no unexpected errno");
	check_conserved(&r, "MADV_DONTNEED", 1);
	printf("rap-races: MADV_DONTNEED: %lu rounds\n", rounds);
	region_free(&r);
}

static void test_munmap(void)
{
	static const int allowed[] = { EINVAL, 0 };
	struct region r;
	unsigned long rounds;

	region_setup(&r);
	CHECK(shuttle(&r, unmapper, allowed, RAP_ALLOW_SRC_HOLES, &rounds) == 0,
	      "munmap: only EINVAL while B is unmapped");
	check_conserved(&r, "munmap", 1);
	printf("rap-races: munmap: %lu rounds\n", rounds);
	region_free(&r);
}

static void test_mremap(void)
{
	static const int allowed[] = { EINVAL, 0 };
	struct region r;
	unsigned long rounds;

	region_setup(&r);
	spare = anon_map(r.len);
	CHECK(shuttle(&r, remapper, allowed, RAP_ALLOW_SRC_HOLES, &rounds) == 0,
	      "mremap: only EINVAL while B is away");
	check_conserved(&r, "mremap", 0);
	printf("rap-races: mremap: %lu rounds\n", rounds);
	munmap(spare, r.len);
	region_free(&r);
}

/* Pages COW-shared with a child are EBUSY; writing them makes them ours again. */
static void test_fork(void)
{
	struct region r;
	unsigned long rounds = 0;
	struct actor act;
	double end;
	int at_b = 0, unexpected = 0, err;
	size_t moved = 0;

	region_setup(&r);
	fork_failures = 0;
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	end = now() + RACE_SECONDS;
	actor_start(&act, &r, forker, end);
	while (!race_over(end)) {
		uint8_t *from = at_b ? r.b : r.a, *to = at_b ? r.a : r.b;

		/* Holes: the pages a refused call had already moved. */
		err = move_all(to, from, r.len, RAP_ALLOW_SRC_HOLES, &moved);
		if (!err) {
			at_b = !at_b;
			rounds++;
			continue;
		}
		if (err != EBUSY) {
			unexpected++;
			continue;
		}
		/* Break COW on every page still at the source, keeping its mark. */
		for (int i = 0; i < NPAGES; i++)
			if (resident(from + i * ps) == 1 && page_id(from + i * ps) > 0)
				mark(from + i * ps, page_id(from + i * ps));
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(act.th, NULL);
	CHECK(unexpected == 0, "fork: only EBUSY");
	CHECK(fork_failures == 0, "fork: every child saw each page exactly once (%d did not)",
	      fork_failures);
	check_conserved(&r, "fork", 0);
	printf("rap-races: fork: %lu rounds\n", rounds);
	region_free(&r);
}

/* Two threads move the same single page back and forth. */
struct twin {
	uint8_t *a, *b;
	unsigned long moves;
	int unexpected;
	double end;
};

static void *twin_main(void *arg)
{
	struct twin *t = arg;

	while (!race_over(t->end)) {
		long r1 = rap(t->b, t->a, ps, 0), r2 = rap(t->a, t->b, ps, 0);

		t->moves += (r1 == ps) + (r2 == ps);
		if ((r1 < 0 && errno != ENOENT && errno != EEXIST) ||
		    (r2 < 0 && errno != ENOENT && errno != EEXIST))
			t->unexpected++;
	}
	return NULL;
}

static void test_same_page(void)
{
	uint8_t *a = anon_map(ps), *b = anon_map(ps);
	pthread_t th[2];
	struct twin t[2];
	unsigned long moves = 0;
	int unexpected = 0, at_a, at_b;

	mark(a, 1);
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		t[i] = (struct twin){ .a = a, .b = b, .end = now() + RACE_SECONDS };
		if (pthread_create(&th[i], NULL, twin_main, &t[i]))
			kt_fatal("pthread_create");
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		moves += t[i].moves;
		unexpected += t[i].unexpected;
	}
	at_a = resident(a) == 1 ? page_id(a) : 0;
	at_b = resident(b) == 1 ? page_id(b) : 0;
	CHECK(unexpected == 0, "same page: only ENOENT or EEXIST for the loser");
	CHECK((at_a == 1) + (at_b == 1) == 1 && at_a >= 0 && at_b >= 0,
	      "same page: in exactly one place (a %d, b %d)", at_a, at_b);
	printf("rap-races: same page: %lu moves\n", moves);
	munmap(a, ps);
	munmap(b, ps);
}

int main(void)
{
	kt_name = "rap-races";
	ps = page_size();
	errno = 0;
	if (rap(NULL, NULL, 0, 0) == -1 && errno == ENOSYS)
		kt_skip("remap_anon_pages() not in this kernel (not the patched one?)");

	test_faults();
	test_dontneed();
	test_munmap();
	test_mremap();
	test_fork();
	test_same_page();
	return kt_done();
}
