// SPDX-License-Identifier: GPL-2.0
/*
 * Step stamps of demand faults (stamps.h).  Memory: 4 bytes per guest
 * page for the record index, and MIG_STAMPS_MAX records of 56 bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "stamps.h"

struct mig_stamps {
	uint64_t nr_pages;
	uint32_t *index;		/* per page: record number + 1, 0 = none */
	uint64_t (*rec)[MIG_STEPS + 1]; /* page, then one time per step */
	uint32_t nrec, dropped;
};

struct mig_stamps *mig_stamps_new(uint64_t nr_pages)
{
	struct mig_stamps *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->nr_pages = nr_pages;
	s->index = calloc(nr_pages, sizeof(*s->index));
	s->rec = calloc(MIG_STAMPS_MAX, sizeof(*s->rec));
	if (!s->index || !s->rec) {
		mig_stamps_free(s);
		return NULL;
	}
	return s;
}

void mig_stamps_free(struct mig_stamps *s)
{
	if (!s)
		return;
	free(s->index);
	free(s->rec);
	free(s);
}

void mig_stamps_reset(struct mig_stamps *s)
{
	if (!s)
		return;
	uint32_t n = mig_stamps_records(s);
	for (uint32_t k = 0; k < n; k++)
		s->index[s->rec[k][0]] = 0; /* a page < nr_pages (mig_stamp()) */
	memset(s->rec, 0, n * sizeof(*s->rec));
	s->nrec = s->dropped = 0;
}

/* The record of page, opened by the first step of a side; -1 if none. */
static int64_t record_of(struct mig_stamps *s, uint64_t page, enum mig_step step)
{
	uint32_t k = __atomic_load_n(&s->index[page], __ATOMIC_ACQUIRE);
	if (k)
		return k - 1;
	if (step != MIG_STEP_FAULT && step != MIG_STEP_REQ_RX)
		return -1;
	uint32_t n = __atomic_fetch_add(&s->nrec, 1, __ATOMIC_RELAXED);
	if (n >= MIG_STAMPS_MAX) {
		__atomic_fetch_add(&s->dropped, 1, __ATOMIC_RELAXED);
		return -1;
	}
	s->rec[n][0] = page;
	uint32_t none = 0;
	/* Two first steps of one page (a repeated request): the first wins. */
	if (!__atomic_compare_exchange_n(&s->index[page], &none, n + 1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return none - 1;
	return n;
}

void mig_stamp(struct mig_stamps *s, uint64_t page, enum mig_step step, uint64_t ns)
{
	if (!s || page >= s->nr_pages)
		return;
	int64_t k = record_of(s, page, step);
	uint64_t zero = 0;
	if (k >= 0)
		__atomic_compare_exchange_n(&s->rec[k][1 + step], &zero, ns, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

uint32_t mig_stamps_records(const struct mig_stamps *s)
{
	return s->nrec < MIG_STAMPS_MAX ? s->nrec : MIG_STAMPS_MAX;
}

uint32_t mig_stamps_dropped(const struct mig_stamps *s)
{
	return s->dropped;
}

int mig_stamps_record(const struct mig_stamps *s, uint32_t k, uint64_t out[MIG_STEPS + 1])
{
	/* A slot lost to a racing first step holds no times. */
	if (__atomic_load_n(&s->index[s->rec[k][0]], __ATOMIC_ACQUIRE) != k + 1)
		return -1;
	for (int j = 0; j <= MIG_STEPS; j++)
		out[j] = s->rec[k][j];
	return 0;
}
