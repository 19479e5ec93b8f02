// SPDX-License-Identifier: GPL-2.0
/*
 * Checked frames from the source: the bulk channel's on its receiver
 * thread, the urgent channel's on the RAM's fault thread (dest-fault.c),
 * as they come.  Precopy pages are staged; postcopy pages (demand replies
 * and the push) are claimed and gathered into runs of consecutive pages,
 * installed with one call (dest-install.c does the accounting).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dest.h"

int dest_flush_run(struct mig_dest *d, struct run *run)
{
	unsigned n = run->n;
	if (!n)
		return 0;
	run->n = 0;
	return dest_install_run(d, run->first, n, run->zero ? NULL : run->buf,
				run->zero ? NULL : &run->zeros, run->by, run->old);
}

/*
 * Zero pages inside a run of data pages: a stretch of at most
 * ZERO_FOLD_MAX of them is filled with zeros and copied with the run (the
 * record still says zero), so that they do not cut it in three calls into
 * the kernel.  A page of zeros copied costs a page of memory and a copy;
 * each call saved cost more (25k UFFDIO_COPY and UFFDIO_ZEROPAGE calls for
 * 64k pages, a quarter of them zero at random, against 2k: docs/bench.md).
 * Longer stretches stay zero runs, so a guest's untouched memory takes no
 * memory at the destination.
 */
#define ZERO_FOLD_MAX 4

/* Does page i (arrived by) continue the run? */
static int extends(const struct run *run, uint64_t i, enum ram_arrival by)
{
	return i == run->first + run->n && run->n < RUN_MAX && by == run->by;
}

/* A zero run (n <= ZERO_FOLD_MAX) becomes a run of data whose pages are all zero-filled. */
static void zero_run_to_data(struct run *run)
{
	memset(run->buf, 0, (size_t)run->n * PAGE_SIZE);
	run->zero = 0;
	run->zeros = (1ull << run->n) - 1;
}

/* How many zero pages end a run of data (n >= 1): its zeros bits from n - 1 down. */
static unsigned zero_tail(const struct run *run)
{
	uint64_t not_zero = ~run->zeros << (64 - run->n);

	return not_zero ? (unsigned)__builtin_clzll(not_zero) : run->n;
}

/*
 * A data run whose zero tail is at the fold's limit: its data part is
 * installed, its tail becomes a run of zero pages (claims kept).  When the
 * install fails (the migration failed, its claims given back), the tail's
 * claims are given back too.
 */
static int split_zero_tail(struct mig_dest *d, struct run *run)
{
	unsigned tail = zero_tail(run), data = run->n - tail;
	int r =
	    data ? dest_install_run(d, run->first, data, run->buf, &run->zeros, run->by, run->old)
		 : 0;
	if (r) {
		for (unsigned k = data; k < run->n; k++)
			ram_unclaim(d->ram, run->first + k, run->old[k]);
		run->n = 0;
		return r;
	}
	memmove(run->old, run->old + data, tail * sizeof(run->old[0]));
	run->first += data;
	run->n = tail;
	run->zero = 1;
	run->zeros = 0;
	return 0;
}

/* Before page i (zero or not) joins the run: the installs its kind asks for.  0 or -errno. */
static int make_room(struct mig_dest *d, struct run *run, uint64_t i, int zero, enum ram_arrival by)
{
	if (!run->n)
		return 0;
	if (!extends(run, i, by))
		return dest_flush_run(d, run);
	if (run->zero && !zero && run->n > ZERO_FOLD_MAX)
		return dest_flush_run(d, run);
	if (run->zero && !zero)
		zero_run_to_data(run);
	if (!run->zero && zero && zero_tail(run) >= ZERO_FOLD_MAX)
		return split_zero_tail(d, run);
	return 0;
}

/* The claimed page i (zero or not), its payload already in the run's slot, appended. */
static void append(struct run *run, uint64_t i, int zero, enum ram_arrival by, uint64_t old)
{
	if (!run->n) {
		run->first = i;
		run->zero = zero;
		run->zeros = 0;
		run->by = by;
	}
	if (!run->zero && zero)
		run->zeros |= 1ull << run->n;
	run->old[run->n++] = old;
}

/* Add page i (raw, zstd or zero) to the run, installing the run first if i does not extend it. */
static int run_add(struct mig_dest *d, struct run *run, uint64_t i, const struct mig_page *pg,
		   const uint8_t *data, enum ram_arrival by, char *err, size_t errlen)
{
	int zero = pg->encoding == MIG_PAGE_ZERO;
	int r = make_room(d, run, i, zero, by);
	if (r)
		return r;
	uint64_t old;
	if (!dest_claim_page(d, i, by, &old))
		return 0;
	uint8_t *slot = run->buf + (size_t)run->n * PAGE_SIZE;
	if (zero) {
		if (run->n && !run->zero)
			memset(slot, 0, PAGE_SIZE); /* folded into the data run */
	} else if (pg->encoding == MIG_PAGE_ZSTD) {
		r = mig_page_decode(pg, data, slot, err, errlen);
		if (r) {
			ram_unclaim(d->ram, i, old);
			return r;
		}
	} else {
		memcpy(slot, data, PAGE_SIZE);
	}
	append(run, i, zero, by, old);
	return 0;
}

/* A precopy page: staged (not installed) until the switch-over. */
static int stage_page(struct mig_dest *d, uint64_t i, const struct mig_page *pg,
		      const uint8_t *data, char *err, size_t errlen)
{
	unsigned from = RAM_FROM(RAM_PAGE_MISSING) | RAM_FROM(RAM_PAGE_STAGED);
	int zero = pg->encoding == MIG_PAGE_ZERO;
	uint64_t old;
	/*
	 * Decoded first, then the record says STAGED: only this receiver
	 * writes the staging buffer, and before the switch-over nothing else
	 * reads it (no vCPU runs yet).
	 */
	enum ram_page_state st = ram_word_state(ram_page_word(d->ram, i));
	if (st != RAM_PAGE_MISSING && st != RAM_PAGE_STAGED) {
		/* Installed pages stay installed: the record never goes back. */
		snprintf(err, errlen, "precopy PAGE 0x%llx for a page already installed",
			 (unsigned long long)pg->addr);
		return -EPROTO;
	}
	if (!zero) {
		int r = mig_page_decode(pg, data, d->stage + i * PAGE_SIZE, err, errlen);
		if (r)
			return r;
	}
	if (!ram_claim(d->ram, i, from, RAM_PAGE_STAGED, RAM_BY_PRECOPY, zero, &old)) {
		snprintf(err, errlen, "precopy PAGE 0x%llx for a page already installed",
			 (unsigned long long)pg->addr);
		return -EPROTO;
	}
	return 0;
}

static int rx_page(struct mig_dest *d, struct mig_conn *c, struct run *run, const uint8_t *p,
		   char *err, size_t errlen)
{
	struct mig_page pg;
	memcpy(&pg, p, sizeof(pg));
	const uint8_t *data = p + sizeof(pg);
	uint64_t i = pg.addr / PAGE_SIZE;
	int precopy = (pg.flags & MIG_PAGEF_PRECOPY) != 0;
	if (precopy != !dest_done0(d)) {
		snprintf(err, errlen, "%s channel: %s PAGE 0x%llx %s the switch-over", c->name,
			 precopy ? "precopy" : "postcopy", (unsigned long long)pg.addr,
			 precopy ? "after" : "before");
		return -EPROTO;
	}
	if (precopy)
		return stage_page(d, i, &pg, data, err, errlen);
	enum ram_arrival by = (pg.flags & MIG_PAGEF_DEMAND) ? RAM_BY_DEMAND : RAM_BY_PUSH;
	if (by == RAM_BY_DEMAND)
		mig_stamp(d->stamps, i, MIG_STEP_PAGE_RX, now_ns());
	int r = run_add(d, run, i, &pg, data, by, err, errlen);
	/*
	 * The run grows only with a PAGE already here whole: a run never waits
	 * for a receive that may block, nor behind other frames (a flood of
	 * heartbeats once kept a page uninstalled for seconds).
	 */
	if (!r && !mig_conn_next_is(c, MIG_MSG_PAGE))
		r = dest_flush_run(d, run);
	return r;
}

/*
 * A PAGE_RUN (the push, after the switch-over), its pages in run->direct
 * (raw) or none (zero): each page claimed, every stretch of claimed pages
 * installed with one call; a page already here (a demand reply won the
 * race) is skipped.
 */
static int rx_run(struct mig_dest *d, struct mig_conn *c, struct run *run, const uint8_t *p,
		  char *err, size_t errlen)
{
	struct mig_page_run pr;
	memcpy(&pr, p, sizeof(pr));
	if (!dest_done0(d) || !run->direct) {
		snprintf(err, errlen, "%s channel: PAGE_RUN 0x%llx %s", c->name,
			 (unsigned long long)pr.addr,
			 run->direct ? "before the switch-over" : "on the urgent channel");
		return -EPROTO;
	}
	/* mig_conn_recv_pages() received them there. */
	uint8_t *data = pr.encoding == MIG_PAGE_RAW ? run->direct : NULL;
	uint64_t first = pr.addr / PAGE_SIZE;
	int r = dest_flush_run(d, run); /* its old[] is ours next */
	for (unsigned k = 0, a = 0; !r && k <= pr.count; k++) {
		if (k < pr.count && dest_claim_page(d, first + k, RAM_BY_PUSH, &run->old[k - a]))
			continue;
		if (k > a)
			r = dest_install_run(d, first + a, k - a,
					     data ? data + (size_t)a * PAGE_SIZE : NULL, NULL,
					     RAM_BY_PUSH, run->old);
		a = k + 1;
	}
	return r;
}

static void rx_done(struct mig_dest *d, const uint8_t *p)
{
	struct mig_done dn;
	memcpy(&dn, p, sizeof(dn));
	if (dn.phase != 0)
		return; /* DONE(1) is informative: completion is the page record's */
	mig_lock(&d->lock, MIG_RANK_DEST);
	dest_set_done0(d, true);
	mig_unlock(&d->lock);
}

/*
 * PRECOPY_DIRTY: staged copies of pages written since are forgotten.  Only
 * before DONE(0), on bulk channel 0 (the only channel read before it):
 * after the switch-over the source counts the staged pages as delivered and
 * never sends them again, so forgetting them then would lose them.
 */
static int rx_dirty(struct mig_dest *d, struct mig_conn *c, const uint8_t *p, char *err,
		    size_t errlen)
{
	const uint8_t *bm = p + sizeof(struct mig_dirty);
	uint64_t old;
	if (dest_done0(d)) {
		snprintf(err, errlen, "%s channel: PRECOPY_DIRTY after the switch-over", c->name);
		return -EPROTO;
	}
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (wire_bit(bm, i))
			ram_claim(d->ram, i, RAM_FROM(RAM_PAGE_STAGED), RAM_PAGE_MISSING,
				  RAM_BY_NONE, false, &old);
	return 0;
}

/*
 * One checked frame from the source on c: 0 to go on, 1 when the source
 * gave up (ERROR: the migration failed), or a negative errno with err.
 */
int dest_rx_frame(struct mig_dest *d, struct mig_conn *c, struct run *run,
		  const struct mig_frame_hdr *h, const uint8_t *p, char *err, size_t errlen)
{
	switch (h->type) {
	case MIG_MSG_PAGE:
		return rx_page(d, c, run, p, err, errlen);
	case MIG_MSG_PAGE_RUN:
		return rx_run(d, c, run, p, err, errlen);
	case MIG_MSG_DONE:
		rx_done(d, p);
		return 0;
	case MIG_MSG_PRECOPY_DIRTY:
		return rx_dirty(d, c, p, err, errlen);
	case MIG_MSG_ERROR: {
		char why[300];
		mig_peer_error(why, sizeof(why), p, "source reported an error");
		dest_fail(d, "%s", why);
		return 1;
	}
	}
	snprintf(err, errlen, "%s channel: unexpected %s from the source", c->name,
		 mig_msg_name(h->type));
	return -EPROTO;
}

/* A receive error r on c: a broken link (recoverable) or a hostile stream. */
static void rx_failed(struct mig_dest *d, struct mig_conn *c, int r, const char *err)
{
	if (mig_link_error(r)) {
		/* Recoverable: the supervisor (or incoming) takes over. */
		mig_lock(&d->lock, MIG_RANK_DEST);
		dest_phase_break(d, err);
		int before_state = d->phase == DEST_PRECOPY_BROKEN;
		mig_unlock(&d->lock);
		if (before_state)
			dest_kick_links(d); /* incoming waits on the urgent channel */
		return;
	}
	dest_send_error(c, MIG_ERR_PROTOCOL, err);
	dest_fail(d, "%s", err);
}

/*
 * The frames already on c, for the fault thread (which polls c): returns
 * when nothing more is there, 0 to read c again later, 1 when c must not
 * be read again (a break, a failure, the end).  Every run is installed
 * before it returns: the thread may sleep next.
 */
int dest_rx_ready(struct mig_dest *d, struct mig_conn *c, struct run *run)
{
	char err[320];
	for (;;) {
		struct mig_frame_hdr h;
		const uint8_t *p;
		int r = mig_conn_recv_ready(c, &h, &p, err, sizeof(err));
		if (r == -EAGAIN)
			return dest_flush_run(d, run) ? 1 : 0;
		if ((r || h.type != MIG_MSG_PAGE) && dest_phase(d) != DEST_FAILED &&
		    dest_flush_run(d, run))
			return 1;
		if (dest_phase_over(dest_phase(d)) || dest_stopping(d))
			return 1;
		if (!r)
			r = dest_rx_frame(d, c, run, &h, p, err, sizeof(err));
		if (r > 0 || dest_phase(d) == DEST_FAILED)
			return 1;
		if (r) {
			rx_failed(d, c, r, err);
			return 1;
		}
	}
}

/* The bulk channel's receiver thread: frames until the channel ends. */
static void rx_frames(struct mig_dest *d, struct mig_conn *c, struct run *run)
{
	char err[320];
	uint64_t cpu = mig_thread_cpu_ns();
	for (unsigned frames = 1;; frames++) {
		/* bulk_rx_cpu_ms, current when the report is written, summed over receivers */
		if (frames % 64 == 0) {
			uint64_t now = mig_thread_cpu_ns();
			__atomic_fetch_add(&d->counts.bulk_rx_cpu_ns, now - cpu, __ATOMIC_RELAXED);
			cpu = now;
		}
		struct mig_frame_hdr h;
		const uint8_t *p;
		int r = mig_conn_recv_pages(c, &h, &p, run->direct, RUN_MAX * PAGE_SIZE, err,
					    sizeof(err));
		if ((r || h.type != MIG_MSG_PAGE) && dest_phase(d) != DEST_FAILED &&
		    dest_flush_run(d, run))
			return;
		if (dest_phase_over(dest_phase(d)) || dest_stopping(d))
			return;
		if (!r)
			r = dest_rx_frame(d, c, run, &h, p, err, sizeof(err));
		if (r > 0 || dest_phase(d) == DEST_FAILED)
			return;
		if (r) {
			rx_failed(d, c, r, err);
			return;
		}
	}
}

/* A bulk channel's frames into runs of its own, until the channel ends. */
void dest_rx_loop(struct mig_dest *d, struct mig_conn *c)
{
	struct run run = { 0 };
	/* Two buffers: the pages of a run being gathered, a PAGE_RUN's. */
	uint8_t *buf = mmap(NULL, 2 * RUN_MAX * PAGE_SIZE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		dest_fail(d, "%s channel: cannot map a receive buffer: %s", c->name,
			  strerror(errno));
		return;
	}
	run.buf = buf;
	run.direct = buf + RUN_MAX * PAGE_SIZE;
	rx_frames(d, c, &run);
	if (dest_phase(d) != DEST_FAILED)
		dest_flush_run(d, &run);
	munmap(buf, 2 * RUN_MAX * PAGE_SIZE);
}
