// SPDX-License-Identifier: GPL-2.0
/*
 * What the destination reports: COMPLETE's counters and latencies, and the
 * JSON metrics (metrics.c) with the arrival timeline.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dest.h"

void dest_fill_complete(struct mig_dest *d, struct mig_complete *m)
{
	memset(m, 0, sizeof(*m));
	m->pages_received = __atomic_load_n(&d->received, __ATOMIC_ACQUIRE);
	m->pages_demand = d->pages_demand;
	m->pages_pushed = d->pages_pushed + d->pages_precopy;
	m->pages_duplicate = d->pages_dup;
	m->faults = d->faults;
	m->requests_sent = d->req_sent;
	m->requests_deduped = d->dedup;
	pthread_mutex_lock(&d->lat_lock);
	m->fault_lat_p50_ns = mig_lat_pct(&d->lat, 50);
	m->fault_lat_p99_ns = mig_lat_pct(&d->lat, 99);
	m->fault_lat_max_ns = mig_lat_max(&d->lat);
	m->blocktime_ns = d->lat.sum;
	memcpy(m->lat_hist, d->lat.hist, sizeof(m->lat_hist));
	pthread_mutex_unlock(&d->lat_lock);
	m->recoveries = d->recoveries;
}

#define TL_BUCKETS 500

/*
 * The arrival timeline: pages installed per bucket of bucket_ms since the
 * destination resumed, demand and pushed apart; pages installed before the
 * resume count in bucket 0 (and in before_resume); pages installed from the
 * precopy stage are only counted.  cnt: 2 * buckets counts, the caller frees
 * it; -1 when there is no timeline (never resumed, out of memory).
 */
static int build_timeline(struct mig_dest *d, struct mig_timeline *tl, uint32_t **cnt_out)
{
	uint64_t t0 = __atomic_load_n(&d->t_tl0, __ATOMIC_RELAXED);
	uint64_t tr = __atomic_load_n(&d->t_resumed, __ATOMIC_ACQUIRE);
	if (!d->t_arr || !t0 || !tr)
		return -1;
	int64_t r0 = (int64_t)(tr - t0) / 1000; /* resume, us since t_tl0 */
	int64_t last = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint32_t v = __atomic_load_n(&d->t_arr[i], __ATOMIC_RELAXED);
		int64_t rel = (int64_t)(v >> 2) - r0;
		if (v && (v & 3) != 3 && rel > last)
			last = rel;
	}
	*tl = (struct mig_timeline){ .bucket_ms = (uint64_t)last / 1000 / TL_BUCKETS + 1 };
	tl->buckets = (unsigned)((uint64_t)last / 1000 / tl->bucket_ms + 1);
	uint32_t *cnt = calloc(2 * (size_t)tl->buckets, sizeof(*cnt));
	if (!cnt)
		return -1;
	uint64_t before[2] = { 0, 0 };
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint32_t v = __atomic_load_n(&d->t_arr[i], __ATOMIC_RELAXED);
		if (!v)
			continue;
		unsigned kind = (v & 3) - 1;
		if (kind == 2) {
			tl->precopy_staged++;
			continue;
		}
		int64_t rel = (int64_t)(v >> 2) - r0;
		if (rel < 0) {
			before[kind]++;
			rel = 0;
		}
		cnt[kind * tl->buckets + (uint64_t)rel / 1000 / tl->bucket_ms]++;
	}
	tl->demand = cnt;
	tl->pushed = cnt + tl->buckets;
	tl->before_demand = before[0];
	tl->before_pushed = before[1];
	*cnt_out = cnt;
	return 0;
}

static double ns_to_us(uint64_t from, uint64_t to)
{
	return (double)(to - from) / 1000.0;
}

void mig_dest_report(struct mig_dest *d, FILE *f)
{
	struct mig_complete c;
	dest_fill_complete(d, &c);
	int64_t down = (int64_t)(d->resume_rt - d->pause_rt);
	struct mig_dest_metrics m = {
		.ram_bytes = d->vm ? d->vm->ram_size : 0,
		.pages = d->nr_pages,
		/* not resumed, or the two clocks disagree (another host): null */
		.downtime_us = d->t_resumed && down >= 0 ? (double)down / 1000.0 : NAN,
		.state_to_resume_us = d->t_resumed ? ns_to_us(d->t_state_rx, d->t_resumed) : -1.0,
		.wait_bulk_done_us = ns_to_us(d->t_state_rx, d->t_phase0),
		.load_state_us = ns_to_us(d->t_phase0, d->t_state),
		.start_vcpus_us = d->t_resumed ? ns_to_us(d->t_state, d->t_resumed) : -1.0,
		.postcopy_ms =
		    d->t_done && d->t_resumed ? (double)(d->t_done - d->t_resumed) / 1e6 : -1.0,
		.bytes_received = d->bytes_rx_prev + (d->urg ? d->urg->rx_bytes : 0) +
				  (d->bulk ? d->bulk->rx_bytes : 0),
		.pages_demand = d->pages_demand,
		.pages_pushed = d->pages_pushed,
		.pages_precopy = d->pages_precopy,
		.pages_zero = d->pages_zero,
		.m = &c,
		.stamps = { .stamps = d->stamps,
			    .ev = { { "state_received", d->t_state_rx },
				    { "bulk_done", d->t_phase0 },
				    { "state_loaded", d->t_state },
				    { "vcpus_resumed", d->t_resumed } },
			    .map_base_ns = d->t_resumed },
		.recoveries = d->recoveries,
		.link_down_ms = (double)d->t_broken_ns / 1e6,
		.tls = d->tls,
	};
	struct mig_timeline tl;
	uint32_t *cnt = NULL;
	if (!build_timeline(d, &tl, &cnt))
		m.timeline = &tl;
	int r = mig_metrics_write_dest(&m, f);
	if (r)
		pr_mig("cannot write the metrics: %s\n", strerror(-r));
	free(cnt);
}
