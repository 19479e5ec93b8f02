// SPDX-License-Identifier: GPL-2.0
/*
 * Step stamps of demand faults and the destination's page map (stamps.h).
 * Memory: 4 bytes per guest page for the record index, 9 for the page map,
 * and MIG_STAMPS_MAX records of 56 bytes.
 */
#include <stdlib.h>

#include "stamps.h"

#define MAP_MAX_POINTS 65536

struct mig_stamps {
	uint64_t nr_pages;
	uint32_t *index;		/* per page: record number + 1, 0 = none */
	uint64_t (*rec)[MIG_STEPS + 1]; /* page, then one time per step */
	uint32_t nrec, dropped;
	uint64_t *map_ns;   /* per page: install time, 0 = not installed */
	uint8_t *map_flags; /* kind | zero << 2 */
};

struct mig_stamps *mig_stamps_new(uint64_t nr_pages)
{
	struct mig_stamps *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->nr_pages = nr_pages;
	s->index = calloc(nr_pages, sizeof(*s->index));
	s->rec = calloc(MIG_STAMPS_MAX, sizeof(*s->rec));
	s->map_ns = calloc(nr_pages, sizeof(*s->map_ns));
	s->map_flags = calloc(nr_pages, sizeof(*s->map_flags));
	if (!s->index || !s->rec || !s->map_ns || !s->map_flags) {
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
	free(s->map_ns);
	free(s->map_flags);
	free(s);
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

void mig_stamps_install(struct mig_stamps *s, uint64_t page, int kind, int zero, uint64_t ns)
{
	if (!s || page >= s->nr_pages)
		return;
	s->map_flags[page] = (uint8_t)(kind | (zero ? 4 : 0));
	__atomic_store_n(&s->map_ns[page], ns, __ATOMIC_RELEASE);
}

static void report_records(const struct mig_stamps *s, FILE *f)
{
	uint32_t n = s->nrec < MIG_STAMPS_MAX ? s->nrec : MIG_STAMPS_MAX;
	fprintf(f, "\"records\": [");
	for (uint32_t k = 0; k < n; k++) {
		/* A slot lost to a racing first step holds no times: skip it. */
		if (__atomic_load_n(&s->index[s->rec[k][0]], __ATOMIC_ACQUIRE) != k + 1)
			continue;
		fprintf(f, "%s[%llu", k ? ", " : "", (unsigned long long)s->rec[k][0]);
		for (int j = 1; j <= MIG_STEPS; j++)
			fprintf(f, ",%llu", (unsigned long long)s->rec[k][j]);
		fputc(']', f);
	}
	fprintf(f, "], \"dropped\": %u", s->dropped);
}

static void report_map(const struct mig_stamps *s, FILE *f, uint64_t base)
{
	uint64_t every = s->nr_pages / MAP_MAX_POINTS + 1, n = 0;
	fprintf(f, "\"page_map\": {\"every\": %llu, \"pages\": [", (unsigned long long)every);
	for (uint64_t i = 0; i < s->nr_pages; i += every) {
		uint64_t t = __atomic_load_n(&s->map_ns[i], __ATOMIC_ACQUIRE);
		if (!t)
			continue;
		double us = ((double)t - (double)base) / 1000.0;
		fprintf(f, "%s[%llu,%.1f,%u,%u]", n++ ? "," : "", (unsigned long long)i, us,
			s->map_flags[i] & 3, s->map_flags[i] >> 2);
	}
	fprintf(f, "]}");
}

void mig_stamps_report(const struct mig_stamps *s, FILE *f, const struct mig_stamp_event *ev,
		       unsigned nev, uint64_t map_base_ns)
{
	if (!s) {
		fprintf(f, "  \"stamps\": null,\n");
		return;
	}
	fprintf(f, "  \"stamps\": {\"clock\": \"CLOCK_MONOTONIC ns\", \"steps\": [\"page\", "
		   "\"fault\", \"request_sent\", \"request_received\", \"page_sent\", "
		   "\"page_received\", \"installed\"], \"switchover\": {");
	for (unsigned k = 0; k < nev; k++)
		fprintf(f, "%s\"%s\": %llu", k ? ", " : "", ev[k].name,
			(unsigned long long)ev[k].ns);
	fprintf(f, "}, ");
	report_records(s, f);
	uint64_t any = 0;
	for (uint64_t i = 0; i < s->nr_pages && !any; i++)
		any = s->map_ns[i];
	if (any) {
		fprintf(f, ", \"map_base_ns\": %llu, ", (unsigned long long)map_base_ns);
		report_map(s, f, map_base_ns);
	}
	fprintf(f, "},\n");
}
