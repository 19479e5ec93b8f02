// SPDX-License-Identifier: GPL-2.0
/*
 * The lock-rank check of the sanitizer build (lock-rank.h): each thread
 * keeps the ranked locks it holds, and taking one whose rank is not above
 * all of them is a bug in the locking order, reported and aborted on.
 */
#ifdef MIG_LOCK_RANKS
#include <stdio.h>
#include <stdlib.h>

#include "lock-rank.h"

#define MAX_HELD 8

struct held {
	pthread_mutex_t *m;
	enum mig_lock_rank rank;
};

/* This thread's ranked locks, in the order taken. */
static _Thread_local struct held held[MAX_HELD];
static _Thread_local int nr_held;

void mig_lock(pthread_mutex_t *m, enum mig_lock_rank rank)
{
	for (int i = 0; i < nr_held; i++) {
		if (held[i].rank >= rank) {
			fprintf(stderr,
				"migrate: lock order violated: a rank %d lock taken while a rank "
				"%d lock is held (lock-rank.h)\n",
				(int)rank, (int)held[i].rank);
			abort();
		}
	}
	if (nr_held == MAX_HELD) {
		fprintf(stderr, "migrate: more than %d ranked locks held at once\n", MAX_HELD);
		abort();
	}
	pthread_mutex_lock(m);
	held[nr_held++] = (struct held){ m, rank };
}

void mig_unlock(pthread_mutex_t *m)
{
	for (int i = nr_held - 1; i >= 0; i--) {
		if (held[i].m != m)
			continue;
		held[i] = held[--nr_held];
		pthread_mutex_unlock(m);
		return;
	}
	fprintf(stderr, "migrate: unlock of a ranked lock this thread does not hold\n");
	abort();
}
#else
/* ISO C wants something in a translation unit. */
typedef int mig_lock_rank_unused;
#endif
