// SPDX-License-Identifier: GPL-2.0
/*
 * rap-stress: many threads fault on the same claimed MADV_USERFAULT memory
 * at once while one handler resolves every fault by moving a page in with
 * remap_anon_pages() and waking it: the remap_anon_pages() counterpart of
 * upstream's uffd-stress in "move" mode (concurrent faulting threads).
 *
 * THREADS threads read every page of a region in orders of their own, so a
 * page is often faulted by several threads at once; the handler reads fault
 * addresses and moves each page in from a staging buffer filled beforehand;
 * a fault on a page already in place (another thread's fault on it was
 * resolved meanwhile) is only woken.  Every thread
 * must read every page's own contents, each page must be moved in exactly
 * once (the same frame as the staging page), and the handler must see no
 * other errno.  Each round runs twice: 4 KiB staging pages, then staging
 * pages carved from a THP (each move splits it further).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>

#include "kt.h"

#define THREADS 6
#define NPAGES	128
#define ROUNDS	4

static long ps;

struct toucher {
	pthread_t th;
	uint8_t *mem;
	unsigned int seed;
	int bad; /* pages read with the wrong contents */
};

static uint64_t page_word(int page, int round)
{
	return 0x5354524553530000ULL ^ ((uint64_t)round << 32) ^ (uint64_t)page; /* "STRESS" */
}

static int round_now; /* atomic */

static void *toucher_main(void *arg)
{
	struct toucher *t = arg;
	int round = __atomic_load_n(&round_now, __ATOMIC_ACQUIRE);
	unsigned int x = t->seed;

	for (int i = 0; i < NPAGES; i++) {
		int page;

		x = x * 1103515245u + 12345u;
		/* Half the threads walk up, half in a pseudo-random order. */
		page = (t->seed & 1) ? i : (int)((x >> 8) % NPAGES);
		if (*(volatile uint64_t *)(t->mem + page * ps) != page_word(page, round))
			t->bad++;
		if (*(volatile uint64_t *)(t->mem + page * ps + ps - 8) != page_word(page, round))
			t->bad++;
	}
	return NULL;
}

static void one_round(int round, int thp_staging)
{
	const char *how = thp_staging ? "THP staging" : "4 KiB staging";
	int fd = article_uffd(O_CLOEXEC | O_NONBLOCK);
	uint8_t *mem = anon_map(NPAGES * ps), *staging;
	struct toucher t[THREADS];
	int moved[NPAGES] = { 0 }, moves = 0, dups = 0, other = 0, bad = 0, same_frame = 1;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t addrs[16];

	CHECK(fd >= 0, "%s: article userfaultfd", how);
	CHECK(madvise(mem, NPAGES * ps, MADV_USERFAULT) == 0 &&
		  uffd_range(fd, mem, mem + NPAGES * ps, 1) == 16,
	      "%s: claim", how);
	if (thp_staging) {
		staging = anon_map_aligned(HUGE, HUGE);
		madvise(staging, HUGE, MADV_HUGEPAGE);
	} else {
		staging = anon_map(NPAGES * ps);
	}
	for (int p = 0; p < NPAGES; p++) {
		/* Fill the staging pages now: a move only takes them. */
		uint64_t w = page_word(p, round);

		memcpy(staging + p * ps, &w, 8);
		memcpy(staging + p * ps + ps - 8, &w, 8);
	}
	if (thp_staging)
		printf("rap-stress: round %d: staging AnonHugePages %ld kB\n", round,
		       smaps_kb(staging, "AnonHugePages"));
	__atomic_store_n(&round_now, round, __ATOMIC_RELEASE);
	for (int i = 0; i < THREADS; i++) {
		t[i] = (struct toucher){ .mem = mem, .seed = (unsigned int)(i * 7919 + round) };
		if (pthread_create(&t[i].th, NULL, toucher_main, &t[i]))
			kt_fatal("pthread_create");
	}

	/* The handler, until every page is in (or 60 s without a fault). */
	while (moves < NPAGES) {
		ssize_t n;

		if (poll(&pfd, 1, 60000) != 1) {
			CHECK(0, "%s: no fault for 60 s with %d pages moved", how, moves);
			break;
		}
		n = read(fd, addrs, sizeof(addrs));
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0 || n % 8) {
			CHECK(0, "%s: read %zd", how, n);
			break;
		}
		for (int i = 0; i < n / 8; i++) {
			long p = (long)((addrs[i] - (uintptr_t)mem) / ps);
			uint64_t pfn;

			if (addrs[i] < (uintptr_t)mem || p >= NPAGES) {
				other++;
				continue;
			}
			if (moved[p]) {
				/* Another thread's fault on a page in place. */
				dups++;
			} else {
				pfn = pfn_of(staging + p * ps);
				if (rap(mem + p * ps, staging + p * ps, ps, 0) == ps) {
					moved[p]++;
					moves++;
					same_frame &= !pfn || pfn_of(mem + p * ps) == pfn;
				} else {
					other++;
				}
			}
			if (uffd_range(fd, mem + p * ps, mem + (p + 1) * ps, 0) != 16)
				other++;
		}
	}
	if (moves < NPAGES)
		exit(kt_done()); /* touchers may wait for good */
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i].th, NULL);
		bad += t[i].bad;
	}
	for (int p = 0; p < NPAGES; p++)
		CHECK(moved[p] == 1, "%s: page %d moved in %d times", how, p, moved[p]);
	CHECK(bad == 0, "%s: %d reads saw the wrong contents", how, bad);
	CHECK(other == 0, "%s: %d unexpected addresses or errnos", how, other);
	CHECK(same_frame, "%s: each page is the staging page's frame", how);
	printf("rap-stress: round %d, %s: %d moves, %d faults on pages already in place\n", round,
	       how, moves, dups);
	close(fd);
	munmap(mem, NPAGES * ps);
	munmap(staging, thp_staging ? HUGE : (size_t)(NPAGES * ps));
}

int main(void)
{
	kt_name = "rap-stress";
	ps = page_size();
	for (int round = 0; round < ROUNDS; round++)
		one_round(round, round & 1);
	return kt_done();
}
