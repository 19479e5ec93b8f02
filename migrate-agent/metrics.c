// SPDX-License-Identifier: GPL-2.0
/*
 * The JSON summaries (metrics.h), with json-c.  Field names and layout are
 * read by bench/run and tests/host/migrate-*.sh: docs/migration.md lists them.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>

#include "metrics.h"
#include "migrate/tls.h"
#include "ram/ram.h"
#include "ram/record.h"
#include "source-prepage.h"
#include "stamps.h"

#define MAP_MAX_POINTS 65536

typedef struct json_object json;

/* A number printed with a fixed number of decimals; NAN is null. */
static json *num(double v, int decimals)
{
	char buf[64];
	if (isnan(v))
		return NULL;
	snprintf(buf, sizeof(buf), "%.*f", decimals, v);
	return json_object_new_double_s(v, buf);
}

static void put_u64(json *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_uint64(v));
}

static void put_num(json *o, const char *key, double v, int decimals)
{
	json_object_object_add(o, key, num(v, decimals));
}

/* The log2 histogram: [{"lt_us": 2, "n": ...}, ...] up to the last non-empty bucket. */
static json *histogram(const uint64_t *hist)
{
	int last = MIG_HIST_BUCKETS - 1;
	while (last > 0 && !hist[last])
		last--;
	json *a = json_object_new_array_ext(last + 1);
	for (int i = 0; a && i <= last; i++) {
		json *b = json_object_new_object();
		put_u64(b, "lt_us", i == MIG_HIST_BUCKETS - 1 ? 0 : 2ull << i);
		put_u64(b, "n", hist[i]);
		json_object_array_add(a, b);
	}
	return a;
}

/*
 * "tls": {"sessions", "ktls_send", "ktls_recv", "fallback"}: whether the
 * kernel sealed (send) and opened (recv) the records of every session,
 * and why not when it did not (a sentence; null when it did both ways).
 */
/* The HELLO features agreed, by name (wire.h MIG_FEAT_*). */
static json *features(uint32_t f)
{
	static const char *const names[] = { "zstd", "runs", "no_payload_crc" };
	json *a = json_object_new_array();
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (f & (1u << i))
			json_object_array_add(a, json_object_new_string(names[i]));
	return a;
}

static json *tls_summary(struct mig_tls_ctx *ctx)
{
	struct mig_tls_ktls k;
	json *o;

	if (!ctx)
		return NULL;
	mig_tls_ctx_get_ktls(ctx, &k);
	o = json_object_new_object();
	put_u64(o, "sessions", k.sessions);
	json_object_object_add(o, "ktls_send",
			       json_object_new_boolean(k.sessions && k.ktls_send == k.sessions));
	json_object_object_add(o, "ktls_recv",
			       json_object_new_boolean(k.sessions && k.ktls_recv == k.sessions));
	json_object_object_add(o, "fallback",
			       k.fallback ? json_object_new_string(k.fallback) : NULL);
	return o;
}

static json *fault_latency(const struct mig_complete *c)
{
	json *o = json_object_new_object();
	put_num(o, "p50", (double)c->fault_lat_p50_ns / 1000.0, 1);
	put_num(o, "p99", (double)c->fault_lat_p99_ns / 1000.0, 1);
	put_num(o, "max", (double)c->fault_lat_max_ns / 1000.0, 1);
	json_object_object_add(o, "histogram", histogram(c->lat_hist));
	return o;
}

static json *u32_array(const uint32_t *v, unsigned n)
{
	json *a = json_object_new_array_ext((int)n);
	for (unsigned k = 0; a && k < n; k++)
		json_object_array_add(a, json_object_new_uint64(v[k]));
	return a;
}

/* ---- Step stamps (stamps.h) ---- */

static const char *const step_names[MIG_STEPS] = {
	[MIG_STEP_FAULT] = "fault",
	[MIG_STEP_REQ_SENT] = "request_sent",
	[MIG_STEP_REQ_RX] = "request_received",
	[MIG_STEP_PAGE_SENT] = "page_sent",
	[MIG_STEP_PAGE_RX] = "page_received",
	[MIG_STEP_INSTALLED] = "installed",
};

static json *stamp_records(const struct mig_stamps *s)
{
	uint32_t n = mig_stamps_records(s);
	json *a = json_object_new_array_ext((int)n);
	for (uint32_t k = 0; a && k < n; k++) {
		uint64_t r[MIG_STEPS + 1];
		if (mig_stamps_record(s, k, r))
			continue;
		json *rec = json_object_new_array_ext(MIG_STEPS + 1);
		for (int j = 0; j <= MIG_STEPS; j++)
			json_object_array_add(rec, json_object_new_uint64(r[j]));
		json_object_array_add(a, rec);
	}
	return a;
}

/* The arrival kinds' names, indexed by the page map's numbers (enum ram_arrival). */
static json *arrival_kinds(void)
{
	json *a = json_object_new_array_ext(RAM_BY_KINDS);
	for (int by = 0; a && by < RAM_BY_KINDS; by++)
		json_object_array_add(a, json_object_new_string(ram_arrival_name(by)));
	return a;
}

/*
 * The page map, from the page record: every installed page (every k-th if
 * there are more than MAP_MAX_POINTS) with its arrival time since base, how
 * it came (enum ram_arrival, named by "kinds") and whether it is a zero page.
 */
static json *page_map(const struct ram *ram, uint64_t base)
{
	uint64_t nr = ram_nr_pages(ram), every = nr / MAP_MAX_POINTS + 1;
	json *o = json_object_new_object(), *a = json_object_new_array();
	put_u64(o, "every", every);
	json_object_object_add(o, "kinds", arrival_kinds());
	for (uint64_t i = 0; a && i < nr; i += every) {
		uint64_t w = ram_page_word(ram, i);
		if (ram_word_state(w) != RAM_PAGE_PRESENT)
			continue;
		double t = (double)ram_word_time_ns(ram, w);
		json *p = json_object_new_array_ext(4);
		json_object_array_add(p, json_object_new_uint64(i));
		json_object_array_add(p, num((t - (double)base) / 1000.0, 1));
		json_object_array_add(p, json_object_new_uint64(ram_word_by(w)));
		json_object_array_add(p, json_object_new_uint64(ram_word_zero(w)));
		json_object_array_add(a, p);
	}
	json_object_object_add(o, "pages", a);
	return o;
}

static int any_installed(const struct ram *ram)
{
	return ram_nr_present((struct ram *)ram) > 0;
}

static json *stamps(const struct mig_stamps_view *v)
{
	if (!v->stamps)
		return NULL;
	json *o = json_object_new_object(), *steps = json_object_new_array_ext(MIG_STEPS + 1);
	json *sw = json_object_new_object();
	json_object_object_add(o, "clock", json_object_new_string("CLOCK_MONOTONIC ns"));
	json_object_array_add(steps, json_object_new_string("page"));
	for (int j = 0; j < MIG_STEPS; j++)
		json_object_array_add(steps, json_object_new_string(step_names[j]));
	json_object_object_add(o, "steps", steps);
	for (unsigned k = 0; k < MIG_SWITCHOVER_EVENTS; k++)
		put_u64(sw, v->ev[k].name, v->ev[k].ns);
	json_object_object_add(o, "switchover", sw);
	json_object_object_add(o, "records", stamp_records(v->stamps));
	put_u64(o, "dropped", mig_stamps_dropped(v->stamps));
	if (v->map && v->map_base_ns && any_installed(v->map)) {
		put_u64(o, "map_base_ns", v->map_base_ns);
		json_object_object_add(o, "page_map", page_map(v->map, v->map_base_ns));
	}
	return o;
}

/* ---- The two summaries ---- */

static int write_json(json *o, FILE *f)
{
	if (!o)
		return -ENOMEM;
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
	int r = 0;

	/*
	 * Flushed here: a full disk (ENOSPC) or a quota shows only when the
	 * buffer is written, and the callers' fclose() result went unchecked.
	 */
	errno = 0;
	if (!text)
		r = -ENOMEM;
	else if (fprintf(f, "%s\n", text) < 0 || fflush(f) == EOF || ferror(f))
		r = errno ? -errno : -EIO;
	json_object_put(o);
	return r;
}

static json *source_bytes(const struct mig_source_metrics *m)
{
	json *o = json_object_new_object();
	put_u64(o, "pages", m->bytes_pages);
	put_u64(o, "state", m->bytes_state);
	put_u64(o, "overhead", m->bytes_overhead);
	put_u64(o, "total", m->bytes_total);
	return o;
}

/*
 * The pre-paging policy's counters: windows given out, pages pushed from
 * them, faults that landed on the last window's path (the accessor went
 * the way it guessed), of those on pages already claimed by the push
 * (late: pre-paged, but no fault saved), the window's pages such a fault
 * lay beyond (passed: read without a fault), stride windows, shrinks.
 */
static json *prepage_summary(const struct mig_source_metrics *m)
{
	const struct src_prepage *p = m->prepage;
	if (!p)
		return NULL;
	json *o = json_object_new_object();
	json_object_object_add(o, "policy",
			       json_object_new_string(p->adaptive ? "adaptive" : "fixed"));
	put_u64(o, "base", p->base);
	put_u64(o, "windows", p->windows);
	put_u64(o, "pages", m->prepage_pages);
	put_u64(o, "followed", p->followed);
	put_u64(o, "late", p->late);
	put_u64(o, "passed", p->passed);
	put_u64(o, "stride_windows", p->strided);
	put_u64(o, "shrinks", p->shrunk);
	put_u64(o, "max_window", p->max_win);
	return o;
}

int mig_metrics_write_source(const struct mig_source_metrics *m, FILE *f)
{
	const struct mig_complete *d = m->dest;
	json *o = json_object_new_object(), *sw = json_object_new_object();
	json_object_object_add(o, "role", json_object_new_string("source"));
	put_u64(o, "ram_bytes", m->ram_bytes);
	put_u64(o, "pages", m->pages);
	put_u64(o, "precopy_rounds", (uint64_t)m->precopy_rounds);
	put_u64(o, "precopy_rounds_done", (uint64_t)m->precopy_rounds_done);
	json_object_object_add(o, "compress", json_object_new_boolean(m->compress));
	put_num(o, "downtime_us", m->downtime_us, 1);
	put_num(o, "downtime_source_clock_us", m->downtime_source_clock_us, 1);
	put_num(sw, "pause", m->pause_us, 1);
	put_num(sw, "save_state", m->save_state_us, 1);
	put_num(sw, "send_state", m->send_state_us, 1);
	json_object_object_add(o, "switchover_us", sw);
	put_num(o, "downtime_dest_clock_us", m->downtime_dest_clock_us, 1);
	put_num(o, "total_ms", m->total_ms, 3);
	put_num(o, "postcopy_ms", m->postcopy_ms, 3);
	json_object_object_add(o, "bytes_sent", source_bytes(m));
	put_u64(o, "pages_requested", d->requests_sent);
	put_u64(o, "pages_demand", m->pages_demand);
	put_u64(o, "pages_pushed", m->pages_pushed);
	put_u64(o, "pages_precopy", m->pages_precopy);
	put_u64(o, "pages_precopy_resent", m->pages_precopy_resent);
	put_u64(o, "pages_zero", m->pages_zero);
	put_u64(o, "pages_zstd", m->pages_zstd);
	put_u64(o, "requests_for_pages_in_flight", m->requests_in_flight);
	put_u64(o, "duplicate_pages", d->pages_duplicate);
	put_u64(o, "pages_resent_after_recovery", m->pages_resent);
	put_u64(o, "recoveries", m->recoveries);
	put_u64(o, "dest_pages_received", d->pages_received);
	put_u64(o, "dest_pages_demand", d->pages_demand);
	put_u64(o, "dest_pages_pushed", d->pages_pushed);
	put_u64(o, "faults", d->faults);
	put_u64(o, "faults_deduped", d->requests_deduped);
	json_object_object_add(o, "fault_latency_us", fault_latency(d));
	put_num(o, "blocktime_ms", (double)d->blocktime_ns / 1e6, 3);
	json_object_object_add(o, "stamps", stamps(&m->stamps));
	put_num(o, "push_MiB_per_s", m->push_MiB_per_s, 1);
	put_num(o, "push_nonzero_MiB_per_s", m->push_nonzero_MiB_per_s, 1);
	put_num(o, "push_cpu_ms", m->push_cpu_ms, 1);
	put_u64(o, "channels", m->channels);
	json_object_object_add(o, "features", features(m->features));
	json_object_object_add(o, "tls", tls_summary(m->tls));
	json_object_object_add(o, "prepage", prepage_summary(m));
	return write_json(o, f);
}

static json *timeline(const struct mig_timeline *t)
{
	if (!t)
		return NULL;
	json *o = json_object_new_object(), *before = json_object_new_object();
	put_u64(o, "bucket_ms", t->bucket_ms);
	put_u64(o, "buckets", t->buckets);
	/* Keyed by the kinds' names (the page map's "kinds"): "demand", "pushed". */
	const char *dem = ram_arrival_name(RAM_BY_DEMAND), *push = ram_arrival_name(RAM_BY_PUSH);
	json_object_object_add(o, dem, u32_array(t->demand, t->buckets));
	json_object_object_add(o, push, u32_array(t->pushed, t->buckets));
	put_u64(before, dem, t->before_demand);
	put_u64(before, push, t->before_pushed);
	json_object_object_add(o, "before_resume", before);
	put_u64(o, "precopy_staged", t->precopy_staged);
	return o;
}

/* QEMU's blocktime figures, in ms; null when not counted. */
static void put_blocktime(json *o, const struct mig_dest_metrics *m)
{
	json *v = m->blocktime_vcpus >= 0 ? json_object_new_array() : NULL;

	for (int i = 0; v && i < m->blocktime_vcpus; i++)
		json_object_array_add(v, num((double)m->blocktime_vcpu_us[i] / 1e3, 3));
	put_num(o, "postcopy_blocktime_ms", v ? (double)m->blocktime_all_us / 1e3 : NAN, 3);
	json_object_object_add(o, "vcpu_blocktime_ms", v);
}

int mig_metrics_write_dest(const struct mig_dest_metrics *m, FILE *f)
{
	const struct mig_complete *c = m->m;
	json *o = json_object_new_object(), *sw = json_object_new_object();
	json_object_object_add(o, "role", json_object_new_string("destination"));
	put_u64(o, "ram_bytes", m->ram_bytes);
	put_u64(o, "pages", m->pages);
	put_num(o, "downtime_us", m->downtime_us, 1);
	put_num(o, "state_to_resume_us", m->state_to_resume_us, 1);
	put_num(sw, "wait_bulk_done", m->wait_bulk_done_us, 1);
	put_num(sw, "load_state", m->load_state_us, 1);
	put_num(sw, "start_vcpus", m->start_vcpus_us, 1);
	json_object_object_add(o, "switchover_us", sw);
	put_num(o, "postcopy_ms", m->postcopy_ms, 3);
	put_u64(o, "bytes_received", m->bytes_received);
	put_u64(o, "pages_received", c->pages_received);
	put_u64(o, "pages_demand", m->pages_demand);
	put_u64(o, "pages_pushed", m->pages_pushed);
	put_u64(o, "pages_precopy", m->pages_precopy);
	put_u64(o, "pages_zero", m->pages_zero);
	put_u64(o, "duplicate_pages", c->pages_duplicate);
	put_u64(o, "pages_requested", c->requests_sent);
	put_u64(o, "faults", c->faults);
	put_u64(o, "faults_deduped", c->requests_deduped);
	put_u64(o, "faults_own_thread", m->faults_own_thread);
	put_u64(o, "install_calls", m->install_calls);
	json_object_object_add(o, "ram_backend",
			       m->ram_backend ? json_object_new_string(m->ram_backend) : NULL);
	json_object_object_add(o, "fault_latency_us", fault_latency(c));
	put_num(o, "blocktime_ms", (double)c->blocktime_ns / 1e6, 3);
	put_blocktime(o, m);
	json_object_object_add(o, "timeline", timeline(m->timeline));
	json_object_object_add(o, "stamps", stamps(&m->stamps));
	put_u64(o, "recoveries", m->recoveries);
	put_num(o, "link_down_ms", m->link_down_ms, 3);
	put_num(o, "bulk_rx_cpu_ms", m->bulk_rx_cpu_ms, 1);
	put_u64(o, "channels", m->channels);
	json_object_object_add(o, "tls", tls_summary(m->tls));
	return write_json(o, f);
}
