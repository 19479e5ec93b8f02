/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The JSON summaries of a migration (docs/migration.md, "Metrics"), built
 * with json-c so that every string is escaped.  The source and destination
 * fill the plain figures below; only metrics.c knows field names and layout,
 * which the benchmark and the tests read.
 *
 * A figure that is NAN is written as null (not measured, e.g. no downtime
 * when the VM never resumed).
 */
#ifndef MIGRATE_METRICS_H
#define MIGRATE_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "migrate/wire.h"

struct mig_stamps;
struct mig_tls_ctx;
struct ram;

/* A named moment of the switch-over (CLOCK_MONOTONIC ns; 0: did not happen). */
struct mig_stamp_event {
	const char *name;
	uint64_t ns;
};

#define MIG_SWITCHOVER_EVENTS 4

/* The step stamps of one side, for the "stamps" member. */
struct mig_stamps_view {
	const struct mig_stamps *stamps; /* NULL: "stamps": null */
	struct mig_stamp_event ev[MIG_SWITCHOVER_EVENTS];
	const struct ram *map; /* the page record the page map is drawn from; NULL: none */
	uint64_t map_base_ns;
};

/* The destination's arrival timeline: pages installed per bucket. */
struct mig_timeline {
	uint64_t bucket_ms;
	unsigned buckets;
	const uint32_t *demand, *pushed; /* buckets counts each */
	uint64_t before_demand, before_pushed, precopy_staged;
};

struct src_prepage;

struct mig_source_metrics {
	uint64_t ram_bytes, pages;
	int precopy_rounds, precopy_rounds_done, compress;
	double downtime_us, downtime_source_clock_us, downtime_dest_clock_us;
	double pause_us, save_state_us, send_state_us;
	double total_ms, postcopy_ms;
	uint64_t bytes_pages, bytes_state, bytes_overhead, bytes_total;
	uint64_t pages_demand, pages_pushed, pages_precopy, pages_precopy_resent;
	uint64_t pages_zero, pages_zstd, requests_in_flight, pages_resent, recoveries;
	const struct mig_complete *dest; /* the destination's COMPLETE */
	double push_MiB_per_s, push_nonzero_MiB_per_s;
	double push_cpu_ms; /* the push thread's CPU time (user + system) */
	unsigned channels;  /* bulk channels (--channels) */
	uint32_t features;  /* MIG_FEAT_* agreed for the push */
	struct mig_stamps_view stamps;
	struct mig_tls_ctx *tls;	   /* NULL: plain TCP, "tls": null */
	const struct src_prepage *prepage; /* the pre-paging policy's counters */
	uint64_t prepage_pages;		   /* pushed from its windows */
};

struct mig_dest_metrics {
	uint64_t ram_bytes, pages;
	double downtime_us, state_to_resume_us;
	double wait_bulk_done_us, load_state_us, start_vcpus_us, postcopy_ms;
	uint64_t bytes_received, pages_demand, pages_pushed, pages_precopy, pages_zero;
	const struct mig_complete *m;	     /* what COMPLETE carries */
	const struct mig_timeline *timeline; /* NULL: "timeline": null */
	struct mig_stamps_view stamps;
	uint64_t recoveries;
	double link_down_ms;
	double bulk_rx_cpu_ms;	    /* the bulk receiver threads' CPU time (user + system) */
	unsigned channels;	    /* bulk channels of the session */
	struct mig_tls_ctx *tls;    /* NULL: plain TCP, "tls": null */
	const char *ram_backend;    /* the RAM's back end; NULL: none (disarmed) */
	uint64_t faults_own_thread; /* faults the faulting thread served (kvm-exit) */
	uint64_t install_calls;	    /* the RAM back end's install calls */
	/*
	 * QEMU's postcopy-blocktime (all vCPUs blocked at once) and
	 * postcopy-vcpu-blocktime, in us, for blocktime_vcpus vCPUs; -1: not
	 * counted ("postcopy_blocktime_ms": null).
	 */
	int blocktime_vcpus;
	uint64_t blocktime_all_us;
	const uint64_t *blocktime_vcpu_us;
};

/* Write one summary as a JSON object and a newline; 0 or -errno. */
int mig_metrics_write_source(const struct mig_source_metrics *m, FILE *f);
int mig_metrics_write_dest(const struct mig_dest_metrics *m, FILE *f);

#endif /* MIGRATE_METRICS_H */
