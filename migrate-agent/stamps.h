/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Step stamps: where each microsecond of a demand fault goes, for the
 * benchmark (docs/bench.md).  The destination's page map is drawn from the
 * page record (ram/record.h), not from here.
 *
 * Each side records, per requested page, the CLOCK_MONOTONIC time
 * (now_ns()) of the steps it sees; nothing goes on the wire.  On one
 * host both sides share that clock, so bench/run joins the destination's
 * and the source's records by page offline.  A record is opened by the
 * first step of its side (FAULT at the destination, REQ_RX at the source);
 * later steps of a page without a record are ignored.  At most
 * MIG_STAMPS_MAX records per side (a run has a few thousand demand faults);
 * the rest are counted as dropped.
 *
 * The two "written" steps are stamped just before the send() call: after
 * it, the sender may be preempted while the peer already reads the frame.
 * So each interval between consecutive steps is one side's work, or one
 * send() + loopback + the peer thread's wake-up.
 *
 * Threads: any thread may stamp; a step is written once (the first stamp
 * wins), so no lock is needed.  Reports are written after the migration.
 */
#ifndef MIGRATE_STAMPS_H
#define MIGRATE_STAMPS_H

#include <stdint.h>

#define MIG_STAMPS_MAX 32768

enum mig_step {
	MIG_STEP_FAULT,	    /* dest: the fault moved the page to REQUESTED (its record's time) */
	MIG_STEP_REQ_SENT,  /* dest: its PAGE_REQUEST is being written (before send) */
	MIG_STEP_REQ_RX,    /* source: the PAGE_REQUEST was read */
	MIG_STEP_PAGE_SENT, /* source: the demand PAGE is being written (before send) */
	MIG_STEP_PAGE_RX,   /* dest: the demand PAGE was read */
	MIG_STEP_INSTALLED, /* dest: the install returned (the vCPU is woken) */
	MIG_STEPS
};

struct mig_stamps;

/* NULL when out of memory: every call below accepts NULL and does nothing. */
struct mig_stamps *mig_stamps_new(uint64_t nr_pages);
void mig_stamps_free(struct mig_stamps *s);
/*
 * Back to what mig_stamps_new() made (no records, none dropped), at the
 * cost of the records used: for the fuzzers, whose sources and
 * destinations live for one input each but keep their stamps (allocating
 * them was most of a run under ASan).  Not while any thread stamps.
 */
void mig_stamps_reset(struct mig_stamps *s);

void mig_stamp(struct mig_stamps *s, uint64_t page, enum mig_step step, uint64_t ns);

/* Reading them back, for the summary (metrics.c), after the migration. */
uint32_t mig_stamps_records(const struct mig_stamps *s); /* slots used, live or not */
uint32_t mig_stamps_dropped(const struct mig_stamps *s);
/* Record k into out (page, then one time per step); 0, or -1 for a slot lost to a race. */
int mig_stamps_record(const struct mig_stamps *s, uint32_t k, uint64_t out[MIG_STEPS + 1]);

#endif /* MIGRATE_STAMPS_H */
