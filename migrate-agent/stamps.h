/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Step stamps: where each microsecond of a demand fault goes, and the
 * destination's page map, for the benchmark (docs/bench.md).
 *
 * Each side records, per requested page, the CLOCK_MONOTONIC time
 * (mig_now_ns()) of the steps it sees; nothing goes on the wire.  On one
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
#include <stdio.h>

#define MIG_STAMPS_MAX 32768

enum mig_step {
	MIG_STEP_FAULT,	    /* dest: the fault reached the agent (mig_dest_fault) */
	MIG_STEP_REQ_SENT,  /* dest: its PAGE_REQUEST is being written (before send) */
	MIG_STEP_REQ_RX,    /* source: the PAGE_REQUEST was read */
	MIG_STEP_PAGE_SENT, /* source: the demand PAGE is being written (before send) */
	MIG_STEP_PAGE_RX,   /* dest: the demand PAGE was read */
	MIG_STEP_INSTALLED, /* dest: the install returned (the vCPU is woken) */
	MIG_STEPS
};

/* A named moment of the switch-over, for mig_stamps_report(). */
struct mig_stamp_event {
	const char *name;
	uint64_t ns; /* CLOCK_MONOTONIC; 0: did not happen */
};

struct mig_stamps;

/* NULL when out of memory: every call below accepts NULL and does nothing. */
struct mig_stamps *mig_stamps_new(uint64_t nr_pages);
void mig_stamps_free(struct mig_stamps *s);

void mig_stamp(struct mig_stamps *s, uint64_t page, enum mig_step step, uint64_t ns);
/* Destination: page installed at ns; kind 0 demand, 1 pushed, 2 precopy. */
void mig_stamps_install(struct mig_stamps *s, uint64_t page, int kind, int zero, uint64_t ns);

/*
 * Write the "stamps" member (and a comma) into a JSON object being printed
 * on f: the switch-over events, every record (page, then one time per step,
 * 0 when not seen) and, if any page was installed, the page map relative to
 * map_base_ns (at most 65536 pages, every k-th page when there are more).
 */
void mig_stamps_report(const struct mig_stamps *s, FILE *f, const struct mig_stamp_event *ev,
		       unsigned nev, uint64_t map_base_ns);

#endif /* MIGRATE_STAMPS_H */
