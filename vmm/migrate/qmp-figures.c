// SPDX-License-Identifier: GPL-2.0
/*
 * QEMU's figures at the source: query-migrate's answer (QEMU's
 * MigrationInfo, fill_source_migration_info() in its migration.c, with
 * its units and its rules for which member is present when) and the
 * MIGRATION_PASS event.  The library writes every figure into gl->ctl
 * (struct mig_ctl, migrate/migrate.h); this file only reads them, with
 * atomics, and does QEMU's arithmetic.  docs/migration.md, "QEMU's
 * migration API, and this project's answer", has the table.
 */
#include <pthread.h>

#include "glue.h"
#include "migrate/net.h" /* now_ns() */

static uint64_t ld(const uint64_t *field)
{
	return __atomic_load_n(field, __ATOMIC_RELAXED);
}

static void add_u64(struct json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_uint64(v));
}

/* One query's reading of the figures that several members are made of. */
struct figures {
	int phase;
	uint64_t now, t0, t1, t_setup; /* ns: start, end (0: running), setup's end */
	uint64_t bytes, normal, zero;
};

/* ms from the start to the end of the connections' set-up (QEMU's setup-time). */
static uint64_t setup_ms(const struct figures *f)
{
	return f->t_setup && f->t0 && f->t_setup > f->t0 ? (f->t_setup - f->t0) / 1000000 : 0;
}

/*
 * The throughput (Mbit/s) and pages/s: over the last second while it
 * runs (the library's sample), and once completed the average over the
 * transfer (the whole time less the setup), as QEMU's
 * migration_calculate_complete() leaves them.
 */
static void rates(struct mig_ctl *c, const struct figures *f, double *mbps, uint64_t *pps)
{
	uint64_t all = f->t1 > f->t0 ? f->t1 - f->t0 : 0, setup = setup_ms(f) * 1000000;
	uint64_t ns = all > setup ? all - setup : 0;

	if (f->phase != MIG_PHASE_COMPLETED) {
		*mbps = (double)ld(&c->rate_bytes) * 8.0 / 1e6;
		*pps = ld(&c->rate_pages);
	} else {
		*mbps = ns ? (double)f->bytes * 8.0 * 1e3 / (double)ns : 0;
		*pps = ns ? (uint64_t)((double)(f->normal + f->zero) * 1e9 / (double)ns) : 0;
	}
}

/*
 * transferred split where it was sent, as QEMU's precopy-bytes (the VM
 * ran here), downtime-bytes (paused, postcopy not begun) and
 * postcopy-bytes; every byte on the connections, where QEMU counts its
 * RAM stream's.  0 marks a point not reached (mig_ctl).
 */
static void byte_splits(struct json_object *ram, struct mig_ctl *c, const struct figures *f)
{
	uint64_t pause = ld(&c->bytes_at_pause), post = ld(&c->bytes_at_postcopy);
	uint64_t pre = pause ? pause : f->bytes;
	uint64_t down = !pause ? 0 : (post ? post : f->bytes) - pause;

	add_u64(ram, "precopy-bytes", pre);
	add_u64(ram, "downtime-bytes", down);
	add_u64(ram, "postcopy-bytes", post ? f->bytes - post : 0);
}

/* query-migrate's "ram" member (QEMU's MigrationStats). */
static struct json_object *ram_info(struct mig_ctl *c, const struct figures *f)
{
	struct json_object *ram = json_object_new_object();
	uint64_t total = ld(&c->pages_total), pps;
	double mbps;

	rates(c, f, &mbps, &pps);
	add_u64(ram, "transferred", f->bytes);
	add_u64(ram, "total", total * PAGE_SIZE);
	add_u64(ram, "remaining", ld(&c->pages_remaining) * PAGE_SIZE);
	add_u64(ram, "duplicate", f->zero);
	add_u64(ram, "skipped", 0); /* QEMU's too: a legacy member, always 0 */
	add_u64(ram, "normal", f->normal);
	add_u64(ram, "normal-bytes", f->normal * PAGE_SIZE);
	json_object_object_add(ram, "mbps", json_object_new_double(mbps));
	json_object_object_add(ram, "page-size", json_object_new_int(PAGE_SIZE));
	add_u64(ram, "pages-per-second", pps);
	add_u64(ram, "dirty-pages-rate", ld(&c->dirty_pages_rate));
	add_u64(ram, "dirty-sync-count", ld(&c->precopy_rounds));
	add_u64(ram, "postcopy-requests", ld(&c->pages_demand));
	byte_splits(ram, c, f);
	return ram;
}

/* "cancelling" is the phase and the cancel request together (mig_ctl). */
static const char *status_name(struct mig_ctl *c, int phase)
{
	if (phase < MIG_PHASE_COMPLETED &&
	    __atomic_load_n(&c->cancel, __ATOMIC_ACQUIRE) == MIG_CANCEL_ASKED)
		return "cancelling";
	return mig_phase_name(phase);
}

/*
 * downtime as QEMU's migrate_show_downtime(): once completed, and in
 * postcopy's states (from when the destination said it runs the VM: the
 * downtime ends there).  expected-downtime is left out: QEMU's is
 * precopy's remaining dirty bytes over the bandwidth, the pause of a
 * stop-and-copy, which a postcopy switch-over never waits for.
 */
static void add_times(struct json_object *o, struct mig_ctl *c, const struct figures *f)
{
	uint64_t down_us = ld(&c->downtime_us);

	add_u64(o, "setup-time", setup_ms(f));
	add_u64(o, "total-time", f->t0 ? ((f->t1 ? f->t1 : f->now) - f->t0) / 1000000 : 0);
	if (down_us && (f->phase == MIG_PHASE_COMPLETED ||
			(f->phase >= MIG_PHASE_POSTCOPY && f->phase <= MIG_PHASE_RECOVERING)))
		add_u64(o, "downtime", down_us / 1000);
	add_u64(o, "x-downtime-us", down_us);
}

void glue_qmp_query_migrate(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *o = json_object_new_object();
	struct mig_ctl *c = &gl->ctl;
	struct figures f = { .now = now_ns() };

	(void)args;
	reply->ret = o;
	pthread_mutex_lock(&gl->lock);
	if (!gl->mig_on) {
		glue_incoming_status(gl, o); /* the destination's, if this is one */
		pthread_mutex_unlock(&gl->lock);
		return; /* else {}: no migration yet, as QEMU answers */
	}
	f.phase = __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE);
	f.t0 = ld(&c->t_start_ns);
	f.t1 = ld(&c->t_end_ns);
	f.t_setup = ld(&c->t_setup_ns);
	f.bytes = ld(&c->bytes_sent);
	f.normal = ld(&c->pages_normal);
	f.zero = ld(&c->pages_zero);
	json_object_object_add(o, "status", json_object_new_string(status_name(c, f.phase)));
	add_times(o, c, &f);
	json_object_object_add(o, "ram", ram_info(c, &f));
	add_u64(o, "x-postcopy-faults", ld(&c->faults));
	add_u64(o, "x-postcopy-fault-p50-ns", ld(&c->fault_lat_p50_ns));
	add_u64(o, "x-postcopy-fault-p99-ns", ld(&c->fault_lat_p99_ns));
	if (f.phase == MIG_PHASE_FAILED) /* written before the phase: see struct mig_ctl */
		json_object_object_add(o, "error-desc", json_object_new_string(c->error));
	pthread_mutex_unlock(&gl->lock);
}

/* mig_ctl.pass_started: QEMU's MIGRATION_PASS, with the events capability as QEMU's. */
void glue_pass_started(void *arg, uint64_t pass)
{
	struct migrate_glue *gl = arg;
	struct json_object *data;

	if (!(gl->run_params.caps & GLUE_CAP_BIT(GLUE_CAP_EVENTS)) || !gl->qmp)
		return;
	data = json_object_new_object();
	add_u64(data, "pass", pass);
	qmp_event(gl->qmp, "MIGRATION_PASS", data);
}
