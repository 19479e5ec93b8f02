// SPDX-License-Identifier: GPL-2.0
/*
 * The destination side of postcopy.  mig_dest_incoming() accepts the two
 * channels, stages precopy pages, loads the STATE; the VMM then starts the
 * vCPUs with every other page missing and reports each fault through
 * mig_dest_fault().  Threads:
 *   rx-urgent   demand replies (PAGE with MIG_PAGEF_DEMAND) -> install;
 *   rx-bulk     pushed pages -> install;
 *   stager      installs the pages precopy left in the staging buffer;
 *   supervisor  watches the link: on a break it waits (up to recover_ms)
 *               for the source to reconnect, sends RESUME with the bitmap of
 *               pages received and repeats outstanding requests.
 *
 * Each page has one state byte, changed only by compare-and-swap:
 *   MISSING -> REQUESTED (fault) -> INSTALLING -> PRESENT
 *   MISSING/STAGED -------------------> INSTALLING -> PRESENT
 * The INSTALLING claim makes "install" happen once per page whatever the
 * channel; a second arrival is a duplicate and is counted, never written.
 * Ordering hazard handled: a fault read from the kernel after its page was
 * installed (the install already woke the vCPU) finds PRESENT and returns 1.
 * Deliberately ignored: a REQUESTED page whose request was lost with a
 * broken link stays REQUESTED; the supervisor re-sends every REQUESTED page
 * after RESUME, so it cannot be forgotten.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dest.h"

void dest_kick_links(struct mig_dest *d)
{
	pthread_mutex_lock(&d->req_lock);
	if (d->urg)
		mig_conn_kick(d->urg);
	if (d->bulk)
		mig_conn_kick(d->bulk);
	pthread_mutex_unlock(&d->req_lock);
}

void dest_fail(struct mig_dest *d, const char *fmt, ...)
{
	pthread_mutex_lock(&d->lock);
	if (!d->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->why, sizeof(d->why), fmt, ap);
		va_end(ap);
		d->failed = 1;
	}
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	dest_kick_links(d);
}

void dest_send_error(struct mig_conn *c, uint32_t code, const char *msg)
{
	struct mig_error e = { .code = code, .msg_len = (uint32_t)strlen(msg) };
	if (e.msg_len > MIG_MAX_ERROR_MSG)
		e.msg_len = MIG_MAX_ERROR_MSG;
	mig_conn_send(c, MIG_MSG_ERROR, &e, sizeof(e), msg, e.msg_len);
}

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

/*
 * Every page present by the one record of presence, d->pst?  The counter
 * d->received only says when to look: completion is never derived from a
 * count (a count can be wrong; the record cannot be both PRESENT and not).
 */
static int all_pages_present(struct mig_dest *d)
{
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) != PG_PRESENT)
			return 0;
	return 1;
}

/* Send COMPLETE if every page is here and it was not sent yet. */
void dest_try_complete(struct mig_dest *d)
{
	/* Not before RUNNING: the source measures the downtime with it. */
	if (!__atomic_load_n(&d->all_present, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&d->t_resumed, __ATOMIC_ACQUIRE) || !all_pages_present(d))
		return;
	struct mig_complete m;
	dest_fill_complete(d, &m);
	pthread_mutex_lock(&d->req_lock);
	int sent = 0;
	if (d->link_ok && !d->complete_sent) {
		/* Set first: the source may close the link as soon as it has it. */
		__atomic_store_n(&d->complete_sent, 1, __ATOMIC_RELEASE);
		sent = mig_conn_send(d->urg, MIG_MSG_COMPLETE, &m, sizeof(m), NULL, 0) == 0;
		if (!sent)
			__atomic_store_n(&d->complete_sent, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->req_lock);
	if (sent) {
		pthread_mutex_lock(&d->lock);
		d->t_done = mig_now_ns();
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
	}
}

/*
 * Claim page i for installing (-> PG_INSTALLING): its previous state, or -1
 * when it must not be installed (already present or being installed: a
 * duplicate; for the stager, no longer staged).
 */
int dest_claim(struct mig_dest *d, uint64_t i, int kind)
{
	uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
	for (;;) {
		if (kind == 2 && st != PG_STAGED)
			return -1; /* the stager and a fault raced: one installs */
		if (st == PG_PRESENT || st == PG_INSTALLING) {
			__atomic_fetch_add(&d->pages_dup, 1, __ATOMIC_RELAXED);
			return -1;
		}
		if (__atomic_compare_exchange_n(&d->pst[i], &st, PG_INSTALLING, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return st;
	}
}

#define TL_MAX_US ((1u << 30) - 1)

/* Record page i's arrival (now: mig_now_ns()) for the timeline. */
static void stamp_arrival(struct mig_dest *d, uint64_t i, int kind, uint64_t now)
{
	uint64_t t0 = __atomic_load_n(&d->t_tl0, __ATOMIC_RELAXED);
	uint64_t us = now > t0 ? (now - t0) / 1000 : 0;
	if (us > TL_MAX_US)
		us = TL_MAX_US;
	__atomic_store_n(&d->t_arr[i], (uint32_t)(us << 2) | (uint32_t)(kind + 1),
			 __ATOMIC_RELAXED);
}

/* Page i, claimed in state st, is in place at now: account for it. */
void dest_installed(struct mig_dest *d, uint64_t i, uint8_t st, int zero, int kind, uint64_t now)
{
	stamp_arrival(d, i, kind, now);
	mig_stamps_install(d->stamps, i, kind, zero, now);
	if (st == PG_REQUESTED) {
		__atomic_fetch_sub(&d->outstanding, 1, __ATOMIC_ACQ_REL);
		mig_spin_answered(&d->spin);
		mig_stamp(d->stamps, i, MIG_STEP_INSTALLED, now);
		uint64_t lat = mig_now_ns() - d->t_fault[i];
		pthread_mutex_lock(&d->lat_lock);
		mig_lat_add(&d->lat, lat);
		pthread_mutex_unlock(&d->lat_lock);
	}
	if (zero)
		__atomic_fetch_add(&d->pages_zero, 1, __ATOMIC_RELAXED);
	uint64_t *ctr = kind == 0   ? &d->pages_demand
			: kind == 1 ? &d->pages_pushed
				    : &d->pages_precopy;
	__atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&d->pst[i], PG_PRESENT, __ATOMIC_RELEASE);
	if (__atomic_add_fetch(&d->received, 1, __ATOMIC_ACQ_REL) == d->nr_pages) {
		__atomic_store_n(&d->all_present, 1, __ATOMIC_RELEASE);
		dest_try_complete(d);
	}
}

/* Install page i from data (NULL: zero).  0, or -errno (fatal, already reported). */
static int install(struct mig_dest *d, uint64_t i, const void *data, int kind)
{
	int st = dest_claim(d, i, kind);
	if (st < 0)
		return 0;
	int r = d->vm->install(d->vm->ctx, i * MIG_PAGE_SIZE, data);
	if (r == -EEXIST) {
		__atomic_fetch_add(&d->pages_dup, 1, __ATOMIC_RELAXED);
		r = 0;
	}
	if (r) {
		__atomic_store_n(&d->pst[i], (uint8_t)st, __ATOMIC_RELEASE);
		dest_fail(d, "cannot install page 0x%llx: %s",
			  (unsigned long long)(i * MIG_PAGE_SIZE), strerror(-r));
		return r;
	}
	dest_installed(d, i, (uint8_t)st, !data, kind, mig_now_ns());
	return 0;
}

int dest_flush_run(struct mig_dest *d, struct run *run)
{
	unsigned n = run->n;
	if (!n)
		return 0;
	run->n = 0;
	int r = 0;
	uint64_t dups = 0;
	if (d->vm->install_run) {
		r = d->vm->install_run(d->vm->ctx, run->first * MIG_PAGE_SIZE,
				       run->zero ? NULL : run->buf, n);
		if (r >= 0) {
			dups = (uint64_t)r;
			r = 0;
		}
	} else {
		for (unsigned k = 0; k < n && !r; k++) {
			r = d->vm->install(d->vm->ctx, (run->first + k) * MIG_PAGE_SIZE,
					   run->zero ? NULL : run->buf + (size_t)k * MIG_PAGE_SIZE);
			if (r == -EEXIST) {
				dups++;
				r = 0;
			}
		}
	}
	if (r) {
		for (unsigned k = 0; k < n; k++)
			__atomic_store_n(&d->pst[run->first + k], run->st[k], __ATOMIC_RELEASE);
		dest_fail(d, "cannot install pages 0x%llx-0x%llx: %s",
			  (unsigned long long)(run->first * MIG_PAGE_SIZE),
			  (unsigned long long)((run->first + n) * MIG_PAGE_SIZE - 1), strerror(-r));
		return r;
	}
	if (dups)
		__atomic_fetch_add(&d->pages_dup, dups, __ATOMIC_RELAXED);
	uint64_t now = mig_now_ns();
	for (unsigned k = 0; k < n; k++)
		dest_installed(d, run->first + k, run->st[k], run->zero, run->kind[k], now);
	return 0;
}

/* Add page i (raw, zstd or zero) to the run, installing the run first if i does not extend it. */
static int run_add(struct mig_dest *d, struct run *run, uint64_t i, const struct mig_page *pg,
		   const uint8_t *data, int kind, char *err, size_t errlen)
{
	int zero = pg->encoding == MIG_PAGE_ZERO;
	if (run->n && (i != run->first + run->n || run->n == RUN_MAX || zero != run->zero)) {
		int r = dest_flush_run(d, run);
		if (r)
			return r;
	}
	int st = dest_claim(d, i, kind);
	if (st < 0)
		return 0;
	uint8_t *slot = run->buf + (size_t)run->n * MIG_PAGE_SIZE;
	if (zero) {
		/* nothing to copy */
	} else if (pg->encoding == MIG_PAGE_ZSTD) {
		int r = mig_page_decode(pg, data, slot, err, errlen);
		if (r) {
			__atomic_store_n(&d->pst[i], (uint8_t)st, __ATOMIC_RELEASE);
			return r;
		}
	} else {
		memcpy(slot, data, MIG_PAGE_SIZE);
	}
	if (!run->n) {
		run->first = i;
		run->zero = zero;
	}
	run->st[run->n] = (uint8_t)st;
	run->kind[run->n] = (uint8_t)kind;
	run->n++;
	return 0;
}

/*
 * Give a chunk of the staging buffer back to the kernel once none of its
 * pages can be read from it any more: every staged page was claimed (by the
 * stager or a fault), and a page still INSTALLING may be being copied from
 * it right now, so wait for those (an install takes microseconds).
 */
#define STAGE_CHUNK 512 /* pages: 2 MiB */

static void release_stage(struct mig_dest *d, uint64_t first, uint64_t n)
{
	for (uint64_t i = first; i < first + n; i++)
		while (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_INSTALLING &&
		       !d->failed && !d->stop)
			sched_yield();
	madvise(d->stage + first * MIG_PAGE_SIZE, n * MIG_PAGE_SIZE, MADV_DONTNEED);
}

/* Page i's staged copy, for install(): NULL for a zero page. */
static const void *staged_copy(const struct mig_dest *d, uint64_t i)
{
	return d->stage_zero[i] ? NULL : d->stage + i * MIG_PAGE_SIZE;
}

/* Installs what precopy staged, freeing the staging buffer as it goes (RSS ~ RAM). */
void *dest_stager_thread(void *arg)
{
	struct mig_dest *d = arg;
	for (uint64_t c = 0; c < d->nr_pages && !d->failed && !d->stop; c += STAGE_CHUNK) {
		uint64_t n = d->nr_pages - c < STAGE_CHUNK ? d->nr_pages - c : STAGE_CHUNK;
		for (uint64_t i = c; i < c + n; i++)
			if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_STAGED)
				install(d, i, staged_copy(d, i), 2);
		release_stage(d, c, n);
	}
	return NULL;
}

struct rx_arg {
	struct mig_dest *d;
	struct mig_conn *c;
};

/* A precopy page: staged (not installed) until the switch-over. */
static int stage_page(struct mig_dest *d, uint64_t i, const struct mig_page *pg,
		      const uint8_t *data, char *err, size_t errlen)
{
	uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
	if (st != PG_MISSING && st != PG_STAGED) {
		/* Installed pages stay installed: the record never goes back. */
		snprintf(err, errlen, "precopy PAGE 0x%llx for a page already installed",
			 (unsigned long long)pg->addr);
		return -EPROTO;
	}
	int r = 0;
	d->stage_zero[i] = pg->encoding == MIG_PAGE_ZERO;
	if (!d->stage_zero[i])
		r = mig_page_decode(pg, data, d->stage + i * MIG_PAGE_SIZE, err, errlen);
	if (!r)
		__atomic_store_n(&d->pst[i], PG_STAGED, __ATOMIC_RELEASE);
	return r;
}

static int rx_page(struct mig_dest *d, struct mig_conn *c, struct run *run, const uint8_t *p,
		   char *err, size_t errlen)
{
	struct mig_page pg;
	memcpy(&pg, p, sizeof(pg));
	const uint8_t *data = p + sizeof(pg);
	uint64_t i = pg.addr / MIG_PAGE_SIZE;
	int precopy = (pg.flags & MIG_PAGEF_PRECOPY) != 0;
	if (precopy != !d->phase0_done) {
		snprintf(err, errlen, "%s channel: %s PAGE 0x%llx %s the switch-over", c->name,
			 precopy ? "precopy" : "postcopy", (unsigned long long)pg.addr,
			 precopy ? "after" : "before");
		return -EPROTO;
	}
	if (precopy)
		return stage_page(d, i, &pg, data, err, errlen);
	int kind = (pg.flags & MIG_PAGEF_DEMAND) ? 0 : 1;
	if (!kind)
		mig_stamp(d->stamps, i, MIG_STEP_PAGE_RX, mig_now_ns());
	int r = run_add(d, run, i, &pg, data, kind, err, errlen);
	/*
	 * The run grows only with a PAGE already here whole: a run never waits
	 * for a receive that may block, nor behind other frames (a flood of
	 * heartbeats once kept a page uninstalled for seconds).
	 */
	if (!r && !mig_conn_next_is(c, MIG_MSG_PAGE))
		r = dest_flush_run(d, run);
	return r;
}

static void rx_done(struct mig_dest *d, const uint8_t *p)
{
	struct mig_done dn;
	memcpy(&dn, p, sizeof(dn));
	if (dn.phase != 0)
		return; /* DONE(1) is informative: completion is the page record's */
	pthread_mutex_lock(&d->lock);
	__atomic_store_n(&d->t_tl0, mig_now_ns(), __ATOMIC_RELAXED);
	d->phase0_done = 1;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

/* PRECOPY_DIRTY: staged copies of pages written since are forgotten. */
static void rx_dirty(struct mig_dest *d, const uint8_t *p)
{
	const uint8_t *bm = p + sizeof(struct mig_dirty);
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint8_t st = PG_STAGED;
		if (wire_bit(bm, i))
			__atomic_compare_exchange_n(&d->pst[i], &st, PG_MISSING, 0,
						    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
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
	case MIG_MSG_DONE:
		rx_done(d, p);
		return 0;
	case MIG_MSG_PRECOPY_DIRTY:
		rx_dirty(d, p);
		return 0;
	case MIG_MSG_ERROR: {
		char text[200]; /* escaped, possibly cut short */
		mig_error_text(p, text, sizeof(text));
		dest_fail(d, "source reported an error: %s", text);
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
		pthread_mutex_lock(&d->lock);
		if (!d->broken)
			snprintf(d->why, sizeof(d->why), "%s", err);
		d->broken = 1;
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
		if (!d->state_rx)
			dest_kick_links(d); /* incoming waits on the urgent channel */
		return;
	}
	dest_send_error(c, MIG_ERR_PROTOCOL, err);
	dest_fail(d, "%s", err);
}

static void rx_frames(struct mig_dest *d, struct mig_conn *c, struct run *run)
{
	char err[320];
	for (;;) {
		struct mig_frame_hdr h;
		const uint8_t *p;
		int r = mig_conn_recv(c, &h, &p, err, sizeof(err));
		if ((r || h.type != MIG_MSG_PAGE) && !d->failed && dest_flush_run(d, run))
			return;
		if (d->failed || d->stop || d->complete_sent)
			return;
		if (!r)
			r = dest_rx_frame(d, c, run, &h, p, err, sizeof(err));
		if (r > 0 || d->failed)
			return;
		if (r) {
			rx_failed(d, c, r, err);
			return;
		}
	}
}

static void rx_loop(struct mig_dest *d, struct mig_conn *c)
{
	struct run run = { 0 };
	void *buf = mmap(NULL, RUN_MAX * MIG_PAGE_SIZE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		dest_fail(d, "%s channel: cannot map a receive buffer: %s", c->name,
			  strerror(errno));
		return;
	}
	run.buf = buf;
	rx_frames(d, c, &run);
	if (!d->failed)
		dest_flush_run(d, &run);
	munmap(buf, RUN_MAX * MIG_PAGE_SIZE);
}

static void *rx_thread(void *arg)
{
	struct rx_arg *a = arg;
	if (a->c == a->d->urg)
		mig_thread_urgent();
	rx_loop(a->d, a->c);
	mig_wire_thread_cleanup();
	free(a);
	return NULL;
}

void dest_start_rx(struct mig_dest *d, struct mig_conn *c, pthread_t *t, int *on)
{
	struct rx_arg *a = malloc(sizeof(*a));
	*on = 0;
	if (a) {
		a->d = d;
		a->c = c;
		*on = pthread_create(t, NULL, rx_thread, a) == 0;
	}
	if (!*on) {
		free(a);
		dest_fail(d, "%s channel: cannot start its receiver thread", c->name);
	}
}

/*
 * Every accepted connection gets its own short-lived handshake thread: TLS
 * (when asked for), then HELLO, then AUTH, all within one total deadline
 * of HANDSHAKE_MS from the accept, however the bytes trickle in; nothing
 * but HELLO, AUTH and ERROR is accepted before AUTH completed, each frame
 * at most MIG_HANDSHAKE_FRAME_LIMIT bytes.  At most MAX_HANDSHAKES run at
 * once; when all are taken, a new connection evicts the oldest (a real
 * peer finishes its handshake in milliseconds, so the oldest is the one
 * least likely to be one): strangers who trickle bytes or churn
 * connections cannot keep the source, or its recovery, out.  A connection
 * that fails is refused and closed; it never fails the incoming migration,
 * whoever it came from (the destination keeps listening until stopped).
 * An authenticated connection leaves its slot: it is offered as the
 * pending urgent or bulk channel (a newer one replaces an older one), and
 * dest_accept_pair() takes a complete pair.
 */
#define MAX_HANDSHAKES MAX_HANDSHAKES_

#define HANDSHAKE_MS 3000

/*
 * The first REFUSE_LOG_BURST refusals are logged, then at most one a
 * second with a count: a flood must not flood the log.
 */
#define REFUSE_LOG_BURST 8

#define REFUSE_LOG_NS 1000000000ull

static struct mig_conn *new_conn(struct mig_dest *d, int fd, const char *name)
{
	struct mig_conn *c = malloc(sizeof(*c));
	if (!c || mig_conn_init(c, fd, name, MIG_ROLE_SOURCE, d->features)) {
		free(c);
		close(fd);
		return NULL;
	}
	c->wire.ram_size = d->vm->ram_size;
	c->wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	return c;
}

void dest_free_conn(struct mig_conn *c)
{
	if (!c)
		return;
	mig_conn_close(c);
	free(c);
}

/*
 * A new session for an urgent HELLO without RECOVER (under d->lock): its
 * own secret; the channels pending for an earlier claim are dropped.
 */
static int claim_session(struct mig_dest *d, const struct mig_hello *m, struct mig_conn **drop,
			 char *why, size_t len)
{
	int r = mig_random_bytes(d->secret, sizeof(d->secret), why, len);
	if (r)
		return r;
	d->session_set = 1;
	d->session = m->session_id;
	d->session_claimed_ns = mig_now_ns();
	d->features = MIG_FEAT_KNOWN & m->features;
	drop[0] = d->pend_urg;
	drop[1] = d->pend_bulk;
	d->pend_urg = d->pend_bulk = NULL;
	return 1;
}

/*
 * Which session a HELLO belongs to (under d->lock): 1 when it makes the
 * session (an urgent HELLO without RECOVER: it learns the secret), 0 when
 * it must prove the secret, -EPROTO when it cannot belong.  Until a pair
 * of channels was taken the session is only claimed: a claim that made no
 * pair within HANDSHAKE_MS gives way to the next source, so a first comer
 * that stalls cannot hold the destination.  The refusals name no session:
 * they go to strangers.
 */
static int classify_hello(struct mig_dest *d, const struct mig_hello *m, struct mig_conn **drop,
			  char *why, size_t len)
{
	int fresh = !(m->flags & MIG_HELLO_RECOVER) && m->channel == MIG_CHAN_URGENT;
	int stale = d->session_set && !d->session_fixed &&
		    mig_now_ns() - d->session_claimed_ns > HANDSHAKE_MS * 1000000ull;

	if (d->session_set && m->session_id == d->session)
		return 0;
	if (fresh && (!d->session_set || stale))
		return claim_session(d, m, drop, why, len);
	if (!d->session_set && (m->flags & MIG_HELLO_RECOVER))
		snprintf(why, len, "recovery HELLO, but no session was started here");
	else if (!d->session_set)
		snprintf(why, len, "a session starts with its urgent channel");
	else {
		snprintf(why, len, "busy: another source's session holds this destination");
		return -EBUSY; /* a source that is told so tries again until its deadline */
	}
	return -EPROTO;
}

/* The next frame on c, which must be AUTH of this kind, into a. */
static int recv_auth(struct mig_conn *c, uint32_t kind, struct mig_auth *a, char *why, size_t len)
{
	struct mig_frame_hdr h;
	const uint8_t *p;
	int r = mig_conn_recv(c, &h, &p, why, len);
	if (r)
		return r;
	if (h.type == MIG_MSG_AUTH)
		memcpy(a, p, sizeof(*a));
	if (h.type != MIG_MSG_AUTH || a->kind != kind) {
		snprintf(why, len, "expected AUTH %s, got %s",
			 kind == MIG_AUTH_PROOF ? "PROOF" : "CHALLENGE", mig_msg_name(h.type));
		return -EPROTO;
	}
	return 0;
}

/*
 * Both ways (wire.h, AUTH): c proves it holds the session's secret for our
 * nonce, then we prove it for the peer's.  0 when both proofs were made.
 */
static int challenge(struct mig_conn *c, const uint8_t *secret, uint64_t session, uint16_t channel,
		     char *why, size_t len)
{
	struct mig_auth out = { .kind = MIG_AUTH_CHALLENGE }, in;
	uint8_t bind[MIG_SECRET_LEN], nonce[MIG_SECRET_LEN];
	int r = mig_conn_binding(c, bind);
	if (r)
		snprintf(why, len, "cannot read the TLS session's exporter value");
	if (!r)
		r = mig_random_bytes(nonce, sizeof(nonce), why, len);
	memcpy(out.data, nonce, sizeof(nonce));
	if (!r)
		r = mig_conn_send(c, MIG_MSG_AUTH, &out, sizeof(out), NULL, 0);
	if (!r)
		r = recv_auth(c, MIG_AUTH_PROOF, &in, why, len);
	if (!r &&
	    !mig_auth_check(secret, MIG_ROLE_SOURCE, nonce, session, channel, bind, in.data)) {
		snprintf(why, len, "wrong proof of the session secret");
		r = -EACCES;
	}
	if (!r)
		r = recv_auth(c, MIG_AUTH_CHALLENGE, &in, why, len);
	out.kind = MIG_AUTH_PROOF;
	if (!r &&
	    mig_auth_proof(secret, MIG_ROLE_DEST, in.data, session, channel, bind, out.data)) {
		snprintf(why, len, "cannot compute the proof of the session secret (HMAC failed)");
		r = -EIO;
	}
	if (!r)
		r = mig_conn_send(c, MIG_MSG_AUTH, &out, sizeof(out), NULL, 0);
	return r;
}

/* What a connection's HELLO made it: its session and connection attempt. */
struct hs_result {
	uint64_t session;
	uint32_t attempt;
};

/* HELLO back, then the secret (a new session) or the challenge. */
static int answer_hello(struct mig_dest *d, struct mig_conn *c, const struct mig_hello *m,
			int owner, const uint8_t *secret, uint32_t features, char *why, size_t len)
{
	struct mig_hello back = {
		.version = MIG_VERSION,
		.role = MIG_ROLE_DEST,
		.channel = m->channel,
		.page_size = MIG_PAGE_SIZE,
		.flags = m->flags & MIG_HELLO_RECOVER,
		.session_id = m->session_id,
		.ram_size = d->vm->ram_size,
		.features = features,
		.attempt = m->attempt,
	};
	int r = mig_conn_send(c, MIG_MSG_HELLO, &back, sizeof(back), NULL, 0);
	if (!r && owner) {
		struct mig_auth a = { .kind = MIG_AUTH_SECRET };
		memcpy(a.data, secret, sizeof(a.data));
		r = mig_conn_send(c, MIG_MSG_AUTH, &a, sizeof(a), NULL, 0);
		mig_auth_wipe(&a, sizeof(a));
	} else if (!r) {
		r = challenge(c, secret, m->session_id, m->channel, why, len);
	}
	return r;
}

/* HELLO and AUTH on a new connection; 0 when it is an authenticated channel. */
static int handshake(struct mig_dest *d, struct mig_conn *c, struct hs_result *res, char *why,
		     size_t len)
{
	struct mig_conn *drop[2] = { NULL, NULL };
	uint8_t secret[MIG_SECRET_LEN];
	struct mig_frame_hdr h;
	const uint8_t *p;
	struct mig_hello m;
	int r = mig_conn_recv(c, &h, &p, why, len);
	if (r)
		return r;
	if (h.type != MIG_MSG_HELLO) {
		snprintf(why, len, "expected HELLO first, got %s", mig_msg_name(h.type));
		return -EPROTO;
	}
	memcpy(&m, p, sizeof(m));
	pthread_mutex_lock(&d->lock);
	int owner = classify_hello(d, &m, drop, why, len);
	uint32_t features = d->features;
	memcpy(secret, d->secret, sizeof(secret));
	pthread_mutex_unlock(&d->lock);
	dest_free_conn(drop[0]);
	dest_free_conn(drop[1]);
	if (owner >= 0) {
		c->wire.features = features;
		r = answer_hello(d, c, &m, owner, secret, features, why, len);
	}
	mig_auth_wipe(secret, sizeof(secret));
	if (owner < 0 || r)
		return owner < 0 ? owner : r;
	*res = (struct hs_result){ .session = m.session_id, .attempt = m.attempt };
	c->wire.frame_limit = 0;
	c->name = m.channel == MIG_CHAN_URGENT ? "urgent" : "bulk";
	if (m.channel == MIG_CHAN_URGENT && mig_spin_enabled(&d->spin))
		c->spin = &d->spin;
	mig_conn_set_liveness(c, d->o.idle_ms);
	mig_conn_set_deadline(c, 0);
	mig_conn_set_rcvtimeo(c, 0);
	return 0;
}

/*
 * An authenticated channel of the source's connection attempt: pending
 * until its partner of the same attempt arrives.  A later attempt replaces
 * whatever an earlier one left; a channel of an earlier attempt, or of a
 * session claim that gave way, is dropped.
 */
static void offer(struct mig_dest *d, struct mig_conn *c, const struct hs_result *res)
{
	struct mig_conn *drop[3] = { NULL, NULL, NULL };
	uint32_t attempt = res->attempt;
	pthread_mutex_lock(&d->lock);
	if (res->session != d->session) {
		drop[2] = c;
	} else {
		if (attempt > d->pend_attempt || (!d->pend_urg && !d->pend_bulk)) {
			drop[0] = d->pend_urg;
			drop[1] = d->pend_bulk;
			d->pend_urg = d->pend_bulk = NULL;
			d->pend_attempt = attempt;
		}
		if (attempt == d->pend_attempt) {
			struct mig_conn **slot =
			    !strcmp(c->name, "urgent") ? &d->pend_urg : &d->pend_bulk;
			drop[2] = *slot;
			*slot = c;
			pthread_cond_broadcast(&d->cond);
		} else {
			drop[2] = c; /* left over from an earlier attempt */
		}
	}
	pthread_mutex_unlock(&d->lock);
	for (int k = 0; k < 3; k++)
		dest_free_conn(drop[k]);
}

struct hs_arg {
	struct mig_dest *d;
	int fd, slot;
	uint64_t gen, t0;
};

/*
 * TLS (when asked for), then HELLO and AUTH, all by t0 + HANDSHAKE_MS.  A
 * connection that fails TLS proved nothing: it gets no frame.
 */
static int handshake_all(struct mig_dest *d, struct mig_conn *c, uint64_t t0, struct hs_result *res,
			 int *tls_failed, char *why, size_t len)
{
	uint64_t deadline = t0 + HANDSHAKE_MS * 1000000ull, now = mig_now_ns();
	int left_ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
	int r = mig_tls_secure(d->tls, c, left_ms, why, len);
	*tls_failed = r != 0;
	if (r)
		return r;
	mig_conn_set_deadline(c, deadline);
	return handshake(d, c, res, why, len);
}

/*
 * Tell a refused connection why (a peer that failed TLS gets no frame,
 * except a plain one: it sent a HELLO in clear) and close it; log it
 * (rate-limited past a burst).
 */
static void refuse(struct mig_dest *d, struct mig_conn *c, int r, int tls_failed, const char *why)
{
	if (!tls_failed)
		dest_send_error(c,
				r == -EPROTONOSUPPORT ? MIG_ERR_VERSION
				: r == -EBUSY	      ? MIG_ERR_BUSY
						      : MIG_ERR_PROTOCOL,
				why);
	else if (r == -EPROTO)
		dest_send_error(c, MIG_ERR_PROTOCOL,
				"this destination speaks TLS only (give both ends --tls-creds or "
				"--tls-psk)");
	dest_free_conn(c);
	pthread_mutex_lock(&d->lock);
	uint64_t now = mig_now_ns(), n = ++d->refused;
	int log = n <= REFUSE_LOG_BURST || now - d->refused_logged_ns >= REFUSE_LOG_NS;
	uint64_t more = n - d->refused_at_log - 1;
	if (log) {
		d->refused_logged_ns = now;
		d->refused_at_log = n;
	}
	pthread_mutex_unlock(&d->lock);
	if (log && more)
		pr_mig("refused a connection: %s (and %llu more since the last message)\n", why,
		       (unsigned long long)more);
	else if (log)
		pr_mig("refused a connection: %s\n", why);
}

static void *handshake_thread(void *arg)
{
	struct hs_arg *a = arg;
	struct mig_dest *d = a->d;
	char why[300];
	struct hs_result res = { 0 };
	int tls_failed = 0;
	struct mig_conn *c = new_conn(d, a->fd, "incoming");
	int r = c ? handshake_all(d, c, a->t0, &res, &tls_failed, why, sizeof(why)) : -ENOMEM;
	mig_auth_thread_cleanup(); /* before this thread counts as gone */
	pthread_mutex_lock(&d->lock);
	if (d->hs[a->slot].gen == a->gen)
		d->hs[a->slot].fd = -1; /* else it was evicted and given to another */
	pthread_mutex_unlock(&d->lock);
	if (r && c)
		refuse(d, c, r, tls_failed, why);
	else if (c)
		offer(d, c, &res);
	mig_auth_thread_cleanup(); /* again: closing a TLS session used OpenSSL */
	mig_wire_thread_cleanup();
	pthread_mutex_lock(&d->lock);
	d->handshakes--;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	free(a);
	return NULL;
}

/* A free handshake slot, or the oldest one's, its handshake ended (under d->lock). */
static int take_slot(struct mig_dest *d)
{
	int oldest = 0;
	for (int k = 0; k < MAX_HANDSHAKES; k++) {
		if (d->hs[k].fd < 0)
			return k;
		if (d->hs[k].t0 < d->hs[oldest].t0)
			oldest = k;
	}
	shutdown(d->hs[oldest].fd, SHUT_RDWR); /* its thread sees the end, and refuses */
	d->evicted++;
	return oldest;
}

/* Start a handshake thread for fd. */
static void start_handshake(struct mig_dest *d, int fd)
{
	struct hs_arg *a = malloc(sizeof(*a));
	pthread_t t;
	if (!a) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&d->lock);
	int slot = take_slot(d);
	*a = (struct hs_arg){
		.d = d, .fd = fd, .slot = slot, .gen = ++d->hs_gen, .t0 = mig_now_ns()
	};
	d->hs[slot] = (struct hs_slot){ .fd = fd, .gen = a->gen, .t0 = a->t0 };
	d->handshakes++;
	pthread_mutex_unlock(&d->lock);
	if (pthread_create(&t, NULL, handshake_thread, a) == 0) {
		pthread_detach(t);
		return;
	}
	pthread_mutex_lock(&d->lock);
	if (d->hs[slot].gen == a->gen)
		d->hs[slot].fd = -1;
	d->handshakes--;
	pthread_mutex_unlock(&d->lock);
	free(a);
	close(fd);
}

void *dest_acceptor_thread(void *arg)
{
	struct mig_dest *d = arg;
	while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd = { .fd = d->lfd, .events = POLLIN };
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			start_handshake(d, fd);
	}
	return NULL;
}

/* Stop accepting; end the handshakes in progress and wait for them. */
void dest_stop_accepting(struct mig_dest *d)
{
	if (d->acceptor_on)
		pthread_join(d->acceptor, NULL);
	d->acceptor_on = 0;
	pthread_mutex_lock(&d->lock);
	for (int k = 0; k < MAX_HANDSHAKES; k++)
		if (d->hs[k].fd >= 0)
			shutdown(d->hs[k].fd, SHUT_RDWR);
	while (d->handshakes)
		pthread_cond_wait(&d->cond, &d->lock);
	dest_free_conn(d->pend_urg);
	dest_free_conn(d->pend_bulk);
	d->pend_urg = d->pend_bulk = NULL;
	pthread_mutex_unlock(&d->lock);
}

/*
 * Take an authenticated pair of channels, waiting until deadline (0:
 * forever, until stopped).  0 with *urg and *bulk, or a negative errno
 * with a message.  The first pair fixes the session.
 */
int dest_accept_pair(struct mig_dest *d, uint64_t deadline, struct mig_conn **urg,
		     struct mig_conn **bulk, char *err, size_t errlen)
{
	int r = 0;
	pthread_mutex_lock(&d->lock);
	while (!(d->pend_urg && d->pend_bulk) && !d->stop && !d->failed) {
		if (!deadline) {
			pthread_cond_wait(&d->cond, &d->lock);
			continue;
		}
		struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000ull),
				       .tv_nsec = (long)(deadline % 1000000000ull) };
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) == ETIMEDOUT)
			break;
	}
	if (d->pend_urg && d->pend_bulk) {
		*urg = d->pend_urg;
		*bulk = d->pend_bulk;
		d->pend_urg = d->pend_bulk = NULL;
		d->session_fixed = 1;
	} else if (d->failed) {
		snprintf(err, errlen, "%s", d->why);
		r = -ECANCELED;
	} else {
		snprintf(err, errlen,
			 d->stop ? "stopped" : "no source connected within the deadline");
		r = d->stop ? -ECANCELED : -ETIMEDOUT;
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

/*
 * RESUME on a recovered urgent channel: the bitmap of pages this side has,
 * read from the page record (present, being installed, or staged and still
 * valid).  flags: MIG_RESUME_NEED_STATE when the state never arrived.
 */
static int send_resume(struct mig_dest *d, struct mig_conn *urg, uint32_t flags)
{
	size_t bytes = (d->nr_pages + 7) / 8;
	uint8_t *bm = calloc(1, bytes);
	if (!bm)
		return -ENOMEM;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
		if (st == PG_PRESENT || st == PG_STAGED || st == PG_INSTALLING)
			wire_bit_set(bm, i);
	}
	struct mig_resume rs = { .nr_pages = d->nr_pages, .flags = flags };
	int r = mig_conn_send(urg, MIG_MSG_RESUME, &rs, sizeof(rs), bm, bytes);
	free(bm);
	return r;
}

/* Stop the receivers and retire the broken connections. */
static void retire_links(struct mig_dest *d)
{
	pthread_mutex_lock(&d->req_lock);
	d->link_ok = 0;
	pthread_mutex_unlock(&d->req_lock);
	dest_kick_links(d);
	if (d->rx_urg_on)
		pthread_join(d->rx_urg, NULL);
	if (d->rx_bulk_on)
		pthread_join(d->rx_bulk, NULL);
	d->rx_urg_on = d->rx_bulk_on = 0;
	pthread_mutex_lock(&d->req_lock);
	d->bytes_rx_prev += (d->urg ? d->urg->rx_bytes : 0) + (d->bulk ? d->bulk->rx_bytes : 0);
	dest_free_conn(d->urg);
	dest_free_conn(d->bulk);
	d->urg = d->bulk = NULL;
	pthread_mutex_unlock(&d->req_lock);
}

/*
 * Wait until deadline for a reconnection that takes RESUME (flags as for
 * send_resume()); a reconnection that fails before RESUME went out is
 * dropped and the wait goes on.  0 with the pair in urg and bulk, or
 * -ETIMEDOUT.
 */
static int reconnect(struct mig_dest *d, uint64_t deadline, uint32_t flags, struct mig_conn **urg,
		     struct mig_conn **bulk)
{
	char err[320];
	for (;;) {
		if (dest_accept_pair(d, deadline, urg, bulk, err, sizeof(err)))
			return -ETIMEDOUT;
		int r = send_resume(d, *urg, flags);
		if (!r)
			return 0;
		pr_mig("the reconnected source went away before RESUME (%s); waiting on\n",
		       strerror(-r));
		dest_free_conn(*urg);
		dest_free_conn(*bulk);
	}
}

/* RUNNING: the vCPUs run here since resume_rt. */
void dest_send_running(struct mig_dest *d, struct mig_conn *urg)
{
	struct mig_running m = {
		.resume_realtime_ns = d->resume_rt,
		.dest_downtime_ns = (int64_t)(d->resume_rt - d->pause_rt),
	};
	mig_conn_send(urg, MIG_MSG_RUNNING, &m, sizeof(m), NULL, 0);
}

/* On a recovered link: repeat every outstanding request, and RUNNING.  Under req_lock. */
static uint64_t repeat_requests(struct mig_dest *d, struct mig_conn *urg)
{
	uint64_t again = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) != PG_REQUESTED)
			continue;
		struct mig_page_request q = { .count = 1 };
		uint64_t addr = i * MIG_PAGE_SIZE;
		mig_conn_send(urg, MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8);
		again++;
	}
	if (d->t_resumed)
		dest_send_running(d, urg); /* it may have been lost with the old link */
	return again;
}

static int recover_postcopy(struct mig_dest *d)
{
	uint64_t t0 = mig_now_ns();
	uint64_t missing = d->nr_pages - __atomic_load_n(&d->received, __ATOMIC_ACQUIRE);
	pr_mig("link to the source broken during postcopy (%s); %llu pages missing, faulting "
	       "vCPUs wait; waiting up to %d ms for the source to reconnect to %s\n",
	       d->why, (unsigned long long)missing, d->o.recover_ms, d->o.addr);
	retire_links(d);
	struct mig_conn *urg, *bulk;
	uint64_t deadline = t0 + (uint64_t)d->o.recover_ms * 1000000ull;
	if (reconnect(d, deadline, 0, &urg, &bulk)) {
		char cause[sizeof(d->why)];
		pthread_mutex_lock(&d->lock);
		snprintf(cause, sizeof(cause), "%s", d->why);
		pthread_mutex_unlock(&d->lock);
		dest_fail(d,
			  "source did not reconnect within %d ms after the link broke (%s); "
			  "stopping: %llu pages never arrived, the VM must not run on",
			  d->o.recover_ms, cause,
			  (unsigned long long)(d->nr_pages -
					       __atomic_load_n(&d->received, __ATOMIC_ACQUIRE)));
		return -ETIMEDOUT;
	}
	pthread_mutex_lock(&d->req_lock);
	d->urg = urg;
	d->bulk = bulk;
	d->link_ok = 1;
	d->t_link_ns = mig_now_ns();
	uint64_t again = repeat_requests(d, urg);
	pthread_mutex_unlock(&d->req_lock);
	pthread_mutex_lock(&d->lock);
	d->broken = 0;
	d->recoveries++;
	d->t_broken_ns += mig_now_ns() - t0;
	pthread_mutex_unlock(&d->lock);
	dest_start_rx(d, urg, &d->rx_urg, &d->rx_urg_on);
	dest_start_rx(d, bulk, &d->rx_bulk, &d->rx_bulk_on);
	pr_mig("link recovered after %.1f ms; %llu outstanding requests repeated\n",
	       (double)(mig_now_ns() - t0) / 1e6, (unsigned long long)again);
	dest_try_complete(d);
	return 0;
}

void *dest_supervisor_thread(void *arg)
{
	struct mig_dest *d = arg;
	for (;;) {
		pthread_mutex_lock(&d->lock);
		int failed = d->failed, done = d->complete_sent, broken = d->broken, stop = d->stop;
		pthread_mutex_unlock(&d->lock);
		if (failed || done || stop)
			return NULL;
		if (broken) {
			if (recover_postcopy(d))
				return NULL;
			continue;
		}
		/*
		 * The source reconnected (authenticated) before this side noticed
		 * the break: it knows the old link is dead.
		 */
		pthread_mutex_lock(&d->lock);
		if (d->pend_urg && d->pend_bulk && !d->broken && !d->failed && !d->complete_sent) {
			snprintf(d->why, sizeof(d->why), "the source reconnected");
			d->broken = 1;
		} else {
			struct timespec ts = dest_mono_in_ms(100);
			pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		}
		pthread_mutex_unlock(&d->lock);
	}
}

/*
 * The watchdog: every heartbeat interval (idle_ms / 4, at most 1 s) it
 * sends PING on the urgent channel if nothing else went out meanwhile, and
 * it declares the link broken when nothing at all came from the source for
 * idle_ms: a stalled source (SIGSTOP, a hung host) or a half-open link,
 * which TCP alone would not notice for minutes.  The break then takes the
 * usual way: recovery, within recover_ms, or a clear failure.
 */
static uint64_t heartbeat_ns(const struct mig_opts *o)
{
	uint64_t ms = (uint64_t)o->idle_ms / 4;
	return (ms < 10 ? 10 : ms > 1000 ? 1000 : ms) * 1000000ull;
}

/* The oldest fault still waiting for its page (mig_now_ns()), 0 when none waits. */
static uint64_t oldest_request(struct mig_dest *d)
{
	uint64_t oldest = 0;
	if (!__atomic_load_n(&d->outstanding, __ATOMIC_ACQUIRE))
		return 0;
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (__atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_REQUESTED &&
		    (!oldest || d->t_fault[i] < oldest))
			oldest = d->t_fault[i];
	return oldest;
}

/*
 * One look at the link (under req_lock): 1, with why, when the source has
 * gone silent or makes no progress.  Heartbeats keep a link from being
 * silent; only frames with work in them are progress: while pages are
 * missing, or the state has not come, the source must keep sending them,
 * and it must answer every page request, each within idle_ms.
 */
static int watch_link(struct mig_dest *d, uint64_t now, uint64_t hb, char *why, size_t len)
{
	uint64_t idle = (uint64_t)d->o.idle_ms * 1000000ull, heard, work, req;
	if (!d->link_ok || !d->urg || !d->bulk)
		return 0;
	mig_conn_ping_if_quiet(d->urg, now, hb);
	heard = mig_conn_heard(d->urg);
	if (mig_conn_heard(d->bulk) > heard)
		heard = mig_conn_heard(d->bulk);
	work = mig_conn_progress(d->urg);
	if (mig_conn_progress(d->bulk) > work)
		work = mig_conn_progress(d->bulk);
	req = oldest_request(d);
	if (req && req < d->t_link_ns)
		req = d->t_link_ns; /* requests repeated on a new link start anew */
	if (now > heard && now - heard > idle)
		snprintf(why, len, "source silent for %d ms: stalled, or the link is down",
			 d->o.idle_ms);
	else if (req && now > req && now - req > idle)
		snprintf(why, len, "source left a page request unanswered for %d ms", d->o.idle_ms);
	else if (!__atomic_load_n(&d->all_present, __ATOMIC_ACQUIRE) && now > work &&
		 now - work > idle)
		snprintf(why, len, "source sent nothing but heartbeats for %d ms", d->o.idle_ms);
	else
		return 0;
	return 1;
}

void *dest_watch_thread(void *arg)
{
	struct mig_dest *d = arg;
	uint64_t hb = heartbeat_ns(&d->o);
	pthread_mutex_lock(&d->lock);
	while (!d->stop && !d->failed && !d->complete_sent) {
		struct timespec ts = dest_mono_in_ms((unsigned)(hb / 1000000));
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		if (d->broken || d->stop)
			continue;
		pthread_mutex_unlock(&d->lock);
		char why[160];
		pthread_mutex_lock(&d->req_lock);
		int silent = watch_link(d, mig_now_ns(), hb, why, sizeof(why));
		pthread_mutex_unlock(&d->req_lock);
		pthread_mutex_lock(&d->lock);
		if (silent && !d->broken && !d->failed) {
			snprintf(d->why, sizeof(d->why), "%s", why);
			d->broken = 1;
			pthread_cond_broadcast(&d->cond);
			pthread_mutex_unlock(&d->lock);
			dest_kick_links(d);
			pthread_mutex_lock(&d->lock);
		}
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

struct mig_dest *mig_dest_listen(const struct mig_opts *o, char *err, size_t errlen)
{
	struct mig_dest *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->o = *o;
	mig_opts_defaults(&d->o);
	d->t_start = mig_now_ns();
	d->features = MIG_FEAT_KNOWN;
	pthread_mutex_init(&d->req_lock, NULL);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->lat_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are mig_now_ns() */
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (mig_random_bytes(d->secret, sizeof(d->secret), err, errlen)) {
		free(d);
		return NULL;
	}
	if (mig_addr_parse(o->addr, &d->sa, err, errlen) < 0) {
		free(d);
		return NULL;
	}
	/* Credentials are checked before anything listens. */
	if (mig_opts_tls(o) && mig_tls_ctx_new(&o->tls, true, &d->tls, err, errlen)) {
		free(d);
		return NULL;
	}
	int r = mig_spin_init(&d->spin, d->o.spin_us, true);
	if (r) {
		snprintf(err, errlen, "eventfd: %s", strerror(-r));
		mig_tls_ctx_free(d->tls);
		free(d);
		return NULL;
	}
	d->lfd = mig_listen(&d->sa, err, errlen);
	if (d->lfd < 0) {
		mig_spin_destroy(&d->spin);
		mig_tls_ctx_free(d->tls);
		free(d);
		return NULL;
	}
	/* Accepted sockets inherit it: keeps the bulk queue (and its delay) short. */
	int rb = 256 << 10;
	setsockopt(d->lfd, SOL_SOCKET, SO_RCVBUF, &rb, sizeof(rb));
	return d;
}

static int layout_matches_vm(struct mig_dest *d, const struct mig_layout *l, char *err,
			     size_t errlen)
{
	struct mig_dest_vm *vm = d->vm;
	if (!vm->nr_regions)
		return 0;
	if (l->nr_regions != vm->nr_regions)
		goto bad;
	for (unsigned i = 0; i < l->nr_regions; i++)
		if (l->regions[i].gpa != vm->regions[i].gpa ||
		    l->regions[i].size != vm->regions[i].size)
			goto bad;
	return 0;
bad:
	snprintf(err, errlen,
		 "the source's RAM layout (%u regions, first at 0x%llx size 0x%llx) differs "
		 "from this VM's (%u regions, first at 0x%llx size 0x%llx)",
		 l->nr_regions, (unsigned long long)l->regions[0].gpa,
		 (unsigned long long)l->regions[0].size, vm->nr_regions,
		 (unsigned long long)vm->regions[0].gpa, (unsigned long long)vm->regions[0].size);
	return -EINVAL;
}

/*
 * The page record after a break before STATE: staged pages may have been
 * dirtied since (their PRECOPY_DIRTY may be lost), so they are forgotten;
 * installed pages stay installed (RESUME lists them); the source starts
 * the switch-over again (DONE(0)).
 */
void dest_reset_before_state(struct mig_dest *d)
{
	for (uint64_t i = 0; i < d->nr_pages; i++)
		if (d->pst[i] == PG_STAGED)
			d->pst[i] = PG_MISSING;
	d->phase0_done = 0;
	d->broken = 0;
}

/*
 * A break before STATE: drop what precopy staged (its dirty bitmap may be
 * lost), wait for the source's RECOVER connection and send RESUME with
 * MIG_RESUME_NEED_STATE.  0 with new d->urg/d->bulk, or -errno with err.
 */
int dest_incoming_reconnect(struct mig_dest *d, char *err, size_t errlen)
{
	char cause[sizeof(d->why)];
	dest_kick_links(d);
	if (d->rx_bulk_on)
		pthread_join(d->rx_bulk, NULL);
	d->rx_bulk_on = 0;
	pthread_mutex_lock(&d->lock);
	snprintf(cause, sizeof(cause), "%s", d->broken ? d->why : err);
	pthread_mutex_unlock(&d->lock);
	pr_mig("link to the source broken before the VM state arrived (%s); waiting up to %d ms "
	       "for the source to reconnect to %s\n",
	       cause, d->o.recover_ms, d->o.addr);
	pthread_mutex_lock(&d->req_lock);
	d->link_ok = 0;
	dest_free_conn(d->urg);
	dest_free_conn(d->bulk);
	d->urg = d->bulk = NULL;
	pthread_mutex_unlock(&d->req_lock);
	dest_reset_before_state(d);
	struct mig_conn *urg, *bulk;
	uint64_t deadline = mig_now_ns() + (uint64_t)d->o.recover_ms * 1000000ull;
	if (reconnect(d, deadline, MIG_RESUME_NEED_STATE, &urg, &bulk)) {
		snprintf(err, errlen,
			 "source did not reconnect within %d ms after the link broke (%s)",
			 d->o.recover_ms, cause);
		return -ETIMEDOUT;
	}
	pthread_mutex_lock(&d->req_lock);
	d->urg = urg;
	d->bulk = bulk;
	d->link_ok = 1;
	d->t_link_ns = mig_now_ns();
	pthread_mutex_unlock(&d->req_lock);
	d->recoveries++;
	pr_mig("source reconnected; asked for the VM state again\n");
	return 0;
}

/* The next frame on c, which must be a want; the source's ERROR is reported as such. */
static int expect_frame(struct mig_conn *c, uint16_t want, struct mig_frame_hdr *h,
			const uint8_t **p, char *err, size_t errlen)
{
	int r = mig_conn_recv(c, h, p, err, errlen);
	if (r)
		return r;
	if (h->type == MIG_MSG_ERROR) {
		char text[200]; /* escaped, possibly cut short */
		mig_error_text(*p, text, sizeof(text));
		snprintf(err, errlen, "source reported an error: %s", text);
		return -ECANCELED;
	}
	if (h->type != want) {
		snprintf(err, errlen, "%s channel: expected %s, got %s", c->name,
			 mig_msg_name(want), mig_msg_name(h->type));
		return -EPROTO;
	}
	return 0;
}

/* The page record and its companions for vm's RAM. */
int dest_incoming_alloc(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen)
{
	d->vm = vm;
	d->nr_pages = vm->ram_size / MIG_PAGE_SIZE;
	d->pst = calloc(d->nr_pages, 1);
	d->t_fault = calloc(d->nr_pages, 8);
	d->t_arr = calloc(d->nr_pages, sizeof(*d->t_arr));
	d->stage_zero = calloc(d->nr_pages, 1);
	d->stamps = mig_stamps_new(d->nr_pages);
	d->stage = mmap(NULL, vm->ram_size, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->stage == MAP_FAILED)
		d->stage = NULL; /* what dest_incoming_free() unmaps */
	if (!d->pst || !d->t_fault || !d->t_arr || !d->stage_zero || !d->stage) {
		snprintf(err, errlen, "out of memory for %llu pages",
			 (unsigned long long)d->nr_pages);
		return -ENOMEM;
	}
	return 0;
}

/* What dest_incoming_alloc() allocated. */
void dest_incoming_free(struct mig_dest *d)
{
	if (d->stage)
		munmap(d->stage, d->vm->ram_size);
	free(d->pst);
	free(d->t_fault);
	free(d->t_arr);
	free(d->stage_zero);
	mig_stamps_free(d->stamps);
}

/* Accept connections; wait (until stopped) for the source's first pair. */
static int incoming_first_pair(struct mig_dest *d, char *err, size_t errlen)
{
	struct mig_conn *urg, *bulk;
	for (int k = 0; k < MAX_HANDSHAKES; k++)
		d->hs[k].fd = -1;
	if (pthread_create(&d->acceptor, NULL, dest_acceptor_thread, d)) {
		snprintf(err, errlen, "cannot start the acceptor thread");
		return -EAGAIN;
	}
	d->acceptor_on = 1;
	int r = dest_accept_pair(d, 0, &urg, &bulk, err, errlen);
	if (r)
		return r;
	d->urg = urg;
	d->bulk = bulk;
	d->link_ok = 1;
	d->t_link_ns = mig_now_ns();
	if (pthread_create(&d->watch, NULL, dest_watch_thread, d) == 0)
		d->watch_on = 1;
	return 0;
}

/*
 * LAYOUT (after any precopy), acknowledged by echoing it, then STATE right
 * after the source paused: 0 with *p at STATE's payload (valid until the
 * next receive on urg).  *code: the ERROR code for a refusal.  (Busy-
 * polling for STATE was tried: on two shared cores it steals the CPU the
 * source needs to pause, and the downtime grew fivefold.)  A stalled source
 * is caught by the watchdog (idle_ms), which breaks the link.
 */
static int receive_switch_over(struct mig_dest *d, const uint8_t **p, uint32_t *code, char *err,
			       size_t errlen)
{
	struct mig_frame_hdr h;
	int r = expect_frame(d->urg, MIG_MSG_LAYOUT, &h, p, err, errlen);
	*code = MIG_ERR_PROTOCOL;
	if (!r) {
		struct mig_layout l;
		memcpy(&l, *p, sizeof(l));
		r = layout_matches_vm(d, &l, err, errlen);
		if (r)
			*code = MIG_ERR_LAYOUT;
		else
			r = mig_conn_send(d->urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	}
	if (!r)
		r = expect_frame(d->urg, MIG_MSG_STATE, &h, p, err, errlen);
	return r;
}

/*
 * The source has switched over: from here a broken link is recovered, not
 * fatal.  Precopy pages are usable once the bulk channel delivered DONE(0)
 * (after PRECOPY_DIRTY); if the link broke before that, none of the staged
 * pages can be trusted: drop them, RESUME will ask for them again.
 */
static int wait_bulk_done(struct mig_dest *d, char *err, size_t errlen)
{
	pthread_mutex_lock(&d->lock);
	d->state_rx = 1;
	while (!d->phase0_done && !d->failed && !d->broken)
		pthread_cond_wait(&d->cond, &d->lock);
	if (!d->phase0_done && d->broken) {
		for (uint64_t i = 0; i < d->nr_pages; i++)
			if (d->pst[i] == PG_STAGED)
				d->pst[i] = PG_MISSING;
		__atomic_store_n(&d->t_tl0, mig_now_ns(), __ATOMIC_RELAXED);
		d->phase0_done = 1;
	}
	int failed = d->failed;
	if (failed)
		snprintf(err, errlen, "%s", d->why);
	pthread_mutex_unlock(&d->lock);
	d->t_phase0 = mig_now_ns();
	return failed ? -EPROTO : 0;
}

/*
 * Load the state (STATE's payload p): the last step before the vCPUs may
 * run.  Everything else postcopy needs is started after they run
 * (start_postcopy_threads()), off the downtime.
 */
static int load_state(struct mig_dest *d, const uint8_t *p, char *err, size_t errlen)
{
	struct mig_state_hdr sh;
	memcpy(&sh, p, sizeof(sh));
	int r = d->vm->load_state(d->vm->ctx, p + sizeof(sh), sh.blob_len);
	if (r) {
		snprintf(err, errlen, "cannot load the VM state sent by the source: %s",
			 strerror(-r));
		dest_send_error(d->urg, MIG_ERR_STATE, err);
		return r;
	}
	d->t_state = mig_now_ns();
	return 0;
}

/*
 * The postcopy threads, once the vCPUs run: a reply or a break that comes
 * first waits in the socket or in d->broken for a few microseconds.
 */
static void start_postcopy_threads(struct mig_dest *d)
{
	dest_start_rx(d, d->urg, &d->rx_urg, &d->rx_urg_on);
	uint64_t staged = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++)
		staged += __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE) == PG_STAGED;
	if (staged) {
		pthread_create(&d->stager, NULL, dest_stager_thread, d);
		d->stager_on = 1;
	} else {
		/* Nothing staged is valid (or there was no precopy): all of it goes. */
		madvise(d->stage, d->vm->ram_size, MADV_DONTNEED);
	}
	pthread_create(&d->sup, NULL, dest_supervisor_thread, d);
	d->sup_on = 1;
}

int mig_dest_incoming(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen)
{
	int r = dest_incoming_alloc(d, vm, err, errlen);
	if (!r)
		r = incoming_first_pair(d, err, errlen);
	if (r)
		return r;
	const uint8_t *p;
	for (;;) {
		uint32_t code;
		dest_start_rx(d, d->bulk, &d->rx_bulk, &d->rx_bulk_on);
		r = receive_switch_over(d, &p, &code, err, errlen);
		if (!r)
			break;
		if ((mig_link_error(r) || d->broken) && !d->failed) {
			/*
			 * The link broke before STATE arrived; the source may
			 * already have paused its VM and sent it.  Wait for it to
			 * reconnect and ask for the state again.
			 */
			r = dest_incoming_reconnect(d, err, errlen);
			if (r)
				goto fail;
			continue;
		}
		/* The bulk channel may have failed first: report the cause. */
		pthread_mutex_lock(&d->lock);
		if (d->failed)
			snprintf(err, errlen, "%s", d->why);
		pthread_mutex_unlock(&d->lock);
		dest_send_error(d->urg, code, err);
		goto fail;
	}
	struct mig_state_hdr sh;
	memcpy(&sh, p, sizeof(sh));
	d->pause_rt = sh.pause_realtime_ns;
	d->t_state_rx = mig_now_ns();
	r = wait_bulk_done(d, err, errlen);
	if (!r)
		r = load_state(d, p, err, errlen);
	if (!r)
		return 0;
fail:
	d->stop = 1;
	dest_kick_links(d);
	if (d->rx_bulk_on)
		pthread_join(d->rx_bulk, NULL);
	d->rx_bulk_on = 0;
	return r;
}

void mig_dest_resumed(struct mig_dest *d)
{
	d->resume_rt = mig_realtime_ns();
	__atomic_store_n(&d->t_resumed, mig_now_ns(), __ATOMIC_RELEASE);
	pthread_mutex_lock(&d->req_lock);
	if (d->link_ok)
		dest_send_running(d, d->urg);
	pthread_mutex_unlock(&d->req_lock);
	start_postcopy_threads(d);
	/* Every page may have arrived already (a small or idle guest). */
	dest_try_complete(d);
}

int mig_dest_fault(struct mig_dest *d, uint64_t off)
{
	if (off >= d->vm->ram_size)
		return -ERANGE;
	uint64_t i = off / MIG_PAGE_SIZE;
	uint8_t st = __atomic_load_n(&d->pst[i], __ATOMIC_ACQUIRE);
	for (;;) {
		if (st == PG_PRESENT)
			return 1;
		if (st == PG_STAGED) {
			install(d, i, staged_copy(d, i), 2);
			return 1;
		}
		if (st != PG_MISSING) {
			__atomic_fetch_add(&d->dedup, 1, __ATOMIC_RELAXED);
			return 0;
		}
		d->t_fault[i] = mig_now_ns();
		if (__atomic_compare_exchange_n(&d->pst[i], &st, PG_REQUESTED, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			break;
	}
	__atomic_fetch_add(&d->faults, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&d->outstanding, 1, __ATOMIC_ACQ_REL);
	mig_stamp(d->stamps, i, MIG_STEP_FAULT, d->t_fault[i]);
	struct mig_page_request q = { .count = 1 };
	uint64_t addr = i * MIG_PAGE_SIZE;
	pthread_mutex_lock(&d->req_lock);
	mig_stamp(d->stamps, i, MIG_STEP_REQ_SENT, mig_now_ns());
	if (d->link_ok && mig_conn_send(d->urg, MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8) == 0)
		d->req_sent++;
	pthread_mutex_unlock(&d->req_lock);
	/* After the send: the request goes first, the receiver's wake-up overlaps it. */
	mig_spin_request(&d->spin);
	return 0;
}

void mig_dest_abort(struct mig_dest *d, const char *why)
{
	pthread_mutex_lock(&d->lock);
	int done = d->complete_sent || d->failed;
	pthread_mutex_unlock(&d->lock);
	if (done)
		return;
	pthread_mutex_lock(&d->req_lock);
	if (d->link_ok && d->urg)
		dest_send_error(d->urg, MIG_ERR_INTERNAL, why);
	pthread_mutex_unlock(&d->req_lock);
	pthread_mutex_lock(&d->lock);
	d->stop = 1;
	pthread_mutex_unlock(&d->lock);
	dest_fail(d, "%s", why);
}

int mig_dest_status(struct mig_dest *d)
{
	pthread_mutex_lock(&d->lock);
	int s = d->failed ? -1 : d->complete_sent ? 1 : 0;
	pthread_mutex_unlock(&d->lock);
	return s;
}

int mig_dest_wait(struct mig_dest *d, char *err, size_t errlen)
{
	pthread_mutex_lock(&d->lock);
	while (!d->failed && !d->complete_sent)
		pthread_cond_wait(&d->cond, &d->lock);
	int failed = d->failed;
	if (failed)
		snprintf(err, errlen, "%s", d->why);
	pthread_mutex_unlock(&d->lock);
	return failed ? -EIO : 0;
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

void mig_dest_free(struct mig_dest *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = 1;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	dest_kick_links(d);
	dest_stop_accepting(d);
	if (d->watch_on)
		pthread_join(d->watch, NULL);
	if (d->sup_on)
		pthread_join(d->sup, NULL);
	if (d->rx_urg_on)
		pthread_join(d->rx_urg, NULL);
	if (d->rx_bulk_on)
		pthread_join(d->rx_bulk, NULL);
	if (d->stager_on)
		pthread_join(d->stager, NULL);
	dest_free_conn(d->urg);
	dest_free_conn(d->bulk);
	if (d->lfd >= 0)
		close(d->lfd);
	mig_tls_ctx_free(d->tls);
	dest_incoming_free(d);
	mig_spin_destroy(&d->spin);
	free(d->lat.ns);
	mig_auth_wipe(d->secret, sizeof(d->secret));
	free(d);
}
