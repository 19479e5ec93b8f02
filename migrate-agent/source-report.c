// SPDX-License-Identifier: GPL-2.0
/*
 * Progress out at the source: the figures and the phase in the caller's
 * struct mig_ctl (query-migrate, the MIGRATION events), the progress line
 * on stderr, the downtime on both clocks and the JSON metrics.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "source.h"

static double per_s(uint64_t pages, double secs)
{
	return secs > 0 ? (double)(pages * PAGE_SIZE) / secs / 1048576.0 : 0.0;
}

/*
 * The downtime in ns once the destination runs the VM, else -1: the shorter
 * of the two clocks' readings, the destination's alone when a recovery
 * came first (the source's clock then includes the outage).
 */
static double downtime_ns(struct src *s)
{
	int64_t down_src = (int64_t)(s->times.t_running - s->times.t_pause);
	int64_t down_dst = s->heard.running.dest_downtime_ns;
	if (!s->heard.running_seen)
		return -1;
	if (s->counts.recoveries_before_running)
		return (double)down_dst;
	return (double)(down_dst >= 0 && down_dst < down_src ? down_dst : down_src);
}

static uint64_t downtime_us(struct src *s)
{
	double ns = downtime_ns(s);
	return ns < 0 ? 0 : (uint64_t)(ns / 1000.0);
}

/* Every byte sent so far, on every connection and over recoveries. */
uint64_t src_tx_bytes(struct src *s)
{
	return s->counts.bytes_total_prev +
	       __atomic_load_n(&s->links.urg->tx_bytes, __ATOMIC_RELAXED) +
	       mig_links_bulk_tx(&s->links, 0);
}

/* QEMU's remaining, in pages: see mig_ctl.pages_remaining. */
static uint64_t src_pages_remaining(struct src *s)
{
	uint64_t sent = __atomic_load_n(&s->counts.sent_count, __ATOMIC_RELAXED);

	if (__atomic_load_n(&s->o->ctl->phase, __ATOMIC_ACQUIRE) == MIG_PHASE_PRECOPY)
		return __atomic_load_n(&s->precopy.precopy_left, __ATOMIC_RELAXED);
	return sent < s->nr_pages ? s->nr_pages - sent : 0;
}

/* The counters query-migrate shows; cheap, called as the migration goes. */
void src_publish(struct src *s)
{
	struct mig_ctl *c = s->o->ctl;
	if (!c)
		return;
	src_ctl_put(&c->pages_remaining, src_pages_remaining(s));
	src_ctl_put(&c->pages_demand, __atomic_load_n(&s->counts.pages_demand, __ATOMIC_RELAXED));
	src_ctl_put(&c->bytes_sent, src_tx_bytes(s));
	src_ctl_put(&c->pages_normal, __atomic_load_n(&s->counts.pages_normal, __ATOMIC_RELAXED));
	src_ctl_put(&c->pages_zero, __atomic_load_n(&s->counts.pages_zero, __ATOMIC_RELAXED));
	src_ctl_put(&c->precopy_rounds, (uint64_t)s->precopy.precopy_rounds_done);
	if (__atomic_load_n(&s->heard.running_seen, __ATOMIC_ACQUIRE))
		src_ctl_put(&c->downtime_us, downtime_us(s));
}

/*
 * What a phase change marks for QEMU's figures: the end of the setup (the
 * connections are up: precopy or the switch-over begins), and the bytes
 * sent until the pause and until postcopy began (precopy-bytes,
 * downtime-bytes, postcopy-bytes split transferred there).  The first
 * time only: a recovery enters POSTCOPY again.
 */
static void note_phase_figures(struct mig_ctl *c, enum mig_phase phase)
{
	uint64_t bytes = __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED);

	if ((phase == MIG_PHASE_PRECOPY || phase == MIG_PHASE_SWITCHOVER) &&
	    !__atomic_load_n(&c->t_setup_ns, __ATOMIC_RELAXED))
		src_ctl_put(&c->t_setup_ns, now_ns());
	if (phase == MIG_PHASE_SWITCHOVER)
		src_ctl_put(&c->bytes_at_pause, bytes);
	if (phase == MIG_PHASE_POSTCOPY &&
	    !__atomic_load_n(&c->bytes_at_postcopy, __ATOMIC_RELAXED))
		src_ctl_put(&c->bytes_at_postcopy, bytes);
}

/*
 * The phase, o->ctl->phase (written nowhere else after the start): the
 * figures first, so that whoever the change wakes reads them fresh.
 */
void src_set_phase(struct src *s, enum mig_phase phase)
{
	struct mig_ctl *c = s->o->ctl;
	if (!c)
		return;
	src_publish(s);
	note_phase_figures(c, phase);
	if (phase >= MIG_PHASE_COMPLETED)
		src_ctl_put(&c->t_end_ns, now_ns());
	__atomic_store_n(&c->phase, (int)phase, __ATOMIC_RELEASE);
	if (c->phase_changed)
		c->phase_changed(c->arg, phase);
}

/* query-migrate's figures, and (o->progress) a progress line at most every 200 ms. */
void src_progress(struct src *s, const char *phase)
{
	uint64_t now = now_ns();
	src_publish(s);
	if (!s->o->progress || now - s->times.t_progress < 200000000ull)
		return;
	s->times.t_progress = now;
	uint64_t n = __atomic_load_n(&s->counts.sent_count, __ATOMIC_RELAXED);
	double secs = (double)(now - s->times.t_start) / 1e9;
	mig_progress("migrate: %s %3.0f%%  %llu/%llu pages  %llu demand  %.0f MiB/s", phase,
		     100.0 * (double)n / (double)s->nr_pages, (unsigned long long)n,
		     (unsigned long long)s->nr_pages, (unsigned long long)s->counts.pages_demand,
		     (double)(s->links.urg->tx_bytes + mig_links_bulk_tx(&s->links, 0)) / secs /
			 1048576.0);
}

static void report(struct src *s, FILE *f, const char *path)
{
	uint64_t tx =
	    s->counts.bytes_total_prev + s->links.urg->tx_bytes + mig_links_bulk_tx(&s->links, 0);
	int64_t down_src =
	    s->heard.running_seen ? (int64_t)(s->times.t_running - s->times.t_pause) : -1;
	int64_t down_dst = s->heard.running_seen ? s->heard.running.dest_downtime_ns : -1;
	double push_s = s->times.t_push_end > s->times.t_push_start
			    ? (double)(s->times.t_push_end - s->times.t_push_start) / 1e9
			    : 0;
	double down = s->heard.running_seen ? downtime_ns(s) / 1000.0 : NAN;
	struct mig_source_metrics m = {
		.ram_bytes = s->vm->ram_size,
		.pages = s->nr_pages,
		.precopy_rounds = s->o->precopy_rounds,
		.precopy_rounds_done = s->precopy.precopy_rounds_done,
		.compress = !!(s->features & MIG_FEAT_ZSTD),
		.downtime_us = down,
		.downtime_source_clock_us = (double)down_src / 1000.0,
		.downtime_dest_clock_us = (double)down_dst / 1000.0,
		.pause_us = (double)(s->times.t_paused - s->times.t_pause) / 1000.0,
		.save_state_us = (double)(s->times.t_saved - s->times.t_paused) / 1000.0,
		.send_state_us = (double)(s->times.t_state_sent - s->times.t_saved) / 1000.0,
		.total_ms = (double)(s->times.t_complete - s->times.t_start) / 1e6,
		.postcopy_ms = (double)(s->times.t_complete - s->times.t_pause) / 1e6,
		.bytes_pages = s->counts.bytes_pages,
		.bytes_state = s->counts.bytes_state,
		.bytes_overhead = tx - s->counts.bytes_pages - s->counts.bytes_state,
		.bytes_total = tx,
		.pages_demand = s->counts.pages_demand,
		.pages_pushed = s->counts.pages_pushed,
		.pages_precopy = s->counts.pages_precopy,
		.pages_precopy_resent = s->counts.pages_precopy_resent,
		.pages_zero = s->counts.pages_zero,
		.pages_zstd = s->counts.pages_zstd,
		.requests_in_flight = s->counts.req_in_flight,
		.pages_resent = s->counts.pages_resent,
		.recoveries = s->counts.recoveries,
		.dest = &s->heard.complete,
		.push_MiB_per_s = per_s(s->counts.pages_pushed, push_s),
		.push_nonzero_MiB_per_s =
		    per_s(s->counts.pages_pushed - s->counts.pages_pushed_zero, push_s),
		.push_cpu_ms = (double)s->counts.push_cpu_ns / 1e6,
		.channels = s->links.nr_bulk,
		.features = s->push_features,
		.stamps = { .stamps = s->stamps,
			    .ev = { { "pause", s->times.t_pause },
				    { "paused", s->times.t_paused },
				    { "state_saved", s->times.t_saved },
				    { "state_sent", s->times.t_state_sent } } },
		.tls = s->tls,
		.prepage = &s->hint.pp,
		.prepage_pages = s->counts.prepage_pages,
	};
	int r = mig_metrics_write_source(&m, f);
	if (r)
		pr_mig("cannot write metrics to %s: %s\n", path, strerror(-r));
}

/* The JSON metrics into o->metrics ("-": stdout); a failure is only logged. */
void src_write_report(struct src *s)
{
	const char *path = s->o->metrics;
	if (!path)
		return;
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
	if (!f) {
		pr_mig("cannot write metrics to %s: %s\n", path, strerror(errno));
		return;
	}
	report(s, f, path);
	if (f != stdout)
		fclose(f);
	else
		fflush(f);
}
