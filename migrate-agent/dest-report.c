// SPDX-License-Identifier: GPL-2.0
/*
 * What the destination reports: COMPLETE's counters and latencies, and the
 * JSON metrics (metrics.c) with the arrival timeline.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dest.h"

/* What the page record says arrived: PRESENT pages by how they came, and zero pages. */
struct page_counts {
	uint64_t present, zero, by[RAM_BY_KINDS];
};

static void count_pages(struct mig_dest *d, struct page_counts *c)
{
	memset(c, 0, sizeof(*c));
	for (uint64_t i = 0; d->ram && i < d->nr_pages; i++) {
		uint64_t w = ram_page_word(d->ram, i);
		if (ram_word_state(w) != RAM_PAGE_PRESENT)
			continue;
		c->present++;
		c->zero += ram_word_zero(w);
		c->by[ram_word_by(w)]++;
	}
}

/* Faults on pages already requested: the RAM's count, merged into one request each. */
static uint64_t dup_faults(struct mig_dest *d)
{
	struct ram_stats st;
	if (!d->ram)
		return 0;
	ram_get_stats(d->ram, &st);
	return st.dup_faults;
}

static void fill_complete(struct mig_dest *d, const struct page_counts *pc, struct mig_complete *m)
{
	memset(m, 0, sizeof(*m));
	m->pages_received = pc->present;
	m->pages_demand = pc->by[RAM_BY_DEMAND];
	m->pages_pushed = pc->by[RAM_BY_PUSH] + pc->by[RAM_BY_PRECOPY];
	m->pages_duplicate = d->counts.pages_dup;
	m->faults = d->counts.faults;
	m->requests_sent = d->counts.req_sent;
	m->requests_deduped = dup_faults(d);
	mig_lock(&d->lat_lock, MIG_RANK_DEST_LAT);
	m->fault_lat_p50_ns = mig_lat_pct(&d->lat, 50);
	m->fault_lat_p99_ns = mig_lat_pct(&d->lat, 99);
	m->fault_lat_max_ns = mig_lat_max(&d->lat);
	m->blocktime_ns = d->lat.sum;
	memcpy(m->lat_hist, d->lat.hist, sizeof(m->lat_hist));
	mig_unlock(&d->lat_lock);
	m->recoveries = d->counts.recoveries;
}

bool dest_fill_complete(struct mig_dest *d, struct mig_complete *m)
{
	struct page_counts pc;
	count_pages(d, &pc);
	if (pc.present != d->nr_pages)
		return false;
	fill_complete(d, &pc, m);
	return true;
}

#define TL_BUCKETS 500

/* Page i, if PRESENT: its arrival in us since the resume (tr) and how it came. */
static bool arrival(struct mig_dest *d, uint64_t i, uint64_t tr, int64_t *rel, enum ram_arrival *by)
{
	uint64_t w = ram_page_word(d->ram, i);
	if (ram_word_state(w) != RAM_PAGE_PRESENT)
		return false;
	*rel = ((int64_t)ram_word_time_ns(d->ram, w) - (int64_t)tr) / 1000;
	*by = ram_word_by(w);
	return true;
}

/* The kinds the timeline draws over time; the others (precopy) are only counted. */
static bool timed(enum ram_arrival by)
{
	return by == RAM_BY_DEMAND || by == RAM_BY_PUSH;
}

/*
 * The arrival timeline, from the page record: pages installed per bucket
 * of bucket_ms since the destination resumed, demand and pushed apart;
 * pages installed before the resume count in bucket 0 (and in
 * before_resume); pages installed from the precopy stage are only counted.
 * cnt: 2 * buckets counts, the caller frees it; -1 when there is no
 * timeline (never resumed, out of memory).
 */
static int build_timeline(struct mig_dest *d, struct mig_timeline *tl, uint32_t **cnt_out)
{
	uint64_t tr = __atomic_load_n(&d->times.t_resumed, __ATOMIC_ACQUIRE);
	int64_t last = 0, rel;
	enum ram_arrival by;
	if (!d->ram || !tr)
		return -1;
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (arrival(d, i, tr, &rel, &by) && timed(by) && rel > last)
			last = rel;
	*tl = (struct mig_timeline){ .bucket_ms = (uint64_t)last / 1000 / TL_BUCKETS + 1 };
	tl->buckets = (unsigned)((uint64_t)last / 1000 / tl->bucket_ms + 1);
	uint32_t *cnt = calloc(2 * (size_t)tl->buckets, sizeof(*cnt));
	if (!cnt)
		return -1;
	uint32_t *row[RAM_BY_KINDS] = { [RAM_BY_DEMAND] = cnt, [RAM_BY_PUSH] = cnt + tl->buckets };
	uint64_t before[RAM_BY_KINDS] = { 0 };
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		if (!arrival(d, i, tr, &rel, &by))
			continue;
		if (!timed(by)) {
			tl->precopy_staged++;
			continue;
		}
		if (rel < 0) {
			before[by]++;
			rel = 0;
		}
		uint64_t k = (uint64_t)rel / 1000 / tl->bucket_ms;
		if (k >= tl->buckets)
			k = tl->buckets - 1; /* arrived after the scan above */
		row[by][k]++;
	}
	tl->demand = row[RAM_BY_DEMAND];
	tl->pushed = row[RAM_BY_PUSH];
	tl->before_demand = before[RAM_BY_DEMAND];
	tl->before_pushed = before[RAM_BY_PUSH];
	*cnt_out = cnt;
	return 0;
}

/*
 * QEMU's blocked vCPU time, as the RAM counted it (ram_blocktime_start(),
 * by the VMM at the switch-over): m->blocktime_vcpus stays -1 when it was
 * not counted.  *vcpu_us: the caller frees it.
 */
static void blocktime(struct mig_dest *d, struct mig_dest_metrics *m, uint64_t **vcpu_us)
{
	int n = d->ram ? ram_blocktime_get(d->ram, &m->blocktime_all_us, NULL, 0) : -1;

	*vcpu_us = n > 0 ? calloc((size_t)n, sizeof(**vcpu_us)) : NULL;
	if (!*vcpu_us)
		return;
	m->blocktime_vcpus = ram_blocktime_get(d->ram, &m->blocktime_all_us, *vcpu_us, (unsigned)n);
	m->blocktime_vcpu_us = *vcpu_us;
}

/*
 * The RAM's back end, the faults its faulting threads served themselves
 * (kvm-exit), and its install calls.
 */
static void own_thread(struct mig_dest *d, struct mig_dest_metrics *m)
{
	const struct ram_backend_ops *ops = d->ram ? ram_backend(d->ram) : NULL;
	struct ram_stats st;
	if (!d->ram)
		return;
	ram_get_stats(d->ram, &st);
	m->faults_own_thread = st.own_thread;
	m->install_calls = st.install_calls;
	m->ram_backend = ops ? ops->name : NULL;
}

static double ns_to_us(uint64_t from, uint64_t to)
{
	return (double)(to - from) / 1000.0;
}

void mig_dest_report(struct mig_dest *d, FILE *f)
{
	struct page_counts pc;
	struct mig_complete c;
	count_pages(d, &pc);
	fill_complete(d, &pc, &c);
	int64_t down = (int64_t)(d->times.resume_rt - d->times.pause_rt);
	struct mig_dest_metrics m = {
		.ram_bytes = d->ram ? ram_bytes(d->ram) : 0,
		.pages = d->nr_pages,
		/* not resumed, or the two clocks disagree (another host): null */
		.downtime_us = d->times.t_resumed && down >= 0 ? (double)down / 1000.0 : NAN,
		.state_to_resume_us =
		    d->times.t_resumed ? ns_to_us(d->times.t_state_rx, d->times.t_resumed) : -1.0,
		.wait_bulk_done_us = ns_to_us(d->times.t_state_rx, d->times.t_phase0),
		.load_state_us = ns_to_us(d->times.t_phase0, d->times.t_state),
		.start_vcpus_us =
		    d->times.t_resumed ? ns_to_us(d->times.t_state, d->times.t_resumed) : -1.0,
		.postcopy_ms = d->times.t_done && d->times.t_resumed
				   ? (double)(d->times.t_done - d->times.t_resumed) / 1e6
				   : -1.0,
		.bytes_received = d->counts.bytes_rx_prev + mig_links_rx_bytes(&d->links),
		.pages_demand = pc.by[RAM_BY_DEMAND],
		.pages_pushed = pc.by[RAM_BY_PUSH],
		.pages_precopy = pc.by[RAM_BY_PRECOPY],
		.pages_zero = pc.zero,
		.m = &c,
		.stamps = { .stamps = d->stamps,
			    .ev = { { "state_received", d->times.t_state_rx },
				    { "bulk_done", d->times.t_phase0 },
				    { "state_loaded", d->times.t_state },
				    { "vcpus_resumed", d->times.t_resumed } },
			    .map = d->ram,
			    .map_base_ns = d->times.t_resumed },
		.recoveries = d->counts.recoveries,
		.link_down_ms = (double)d->times.t_broken_ns / 1e6,
		.bulk_rx_cpu_ms =
		    (double)__atomic_load_n(&d->counts.bulk_rx_cpu_ns, __ATOMIC_RELAXED) / 1e6,
		.channels = d->links.nr_bulk,
		.tls = d->tls,
		.blocktime_vcpus = -1,
	};
	own_thread(d, &m);
	struct mig_timeline tl;
	uint32_t *cnt = NULL;
	uint64_t *vcpu_us;
	blocktime(d, &m, &vcpu_us);
	if (!build_timeline(d, &tl, &cnt))
		m.timeline = &tl;
	int r = mig_metrics_write_dest(&m, f);
	if (r)
		pr_mig("cannot write the metrics: %s\n", strerror(-r));
	free(cnt);
	free(vcpu_us);
}
