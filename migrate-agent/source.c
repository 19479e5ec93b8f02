// SPDX-License-Identifier: GPL-2.0
/*
 * The source side of postcopy: connect two channels, optionally run precopy
 * rounds, pause the VM, send LAYOUT and STATE, then serve page requests on
 * the urgent channel while the bulk channel pushes every other page, until
 * the destination says COMPLETE.  A broken link after the switch-over is
 * retried until the recovery deadline (the destination keeps listening).
 *
 * Threads after the switch-over:
 *   urgent  reads PAGE_REQUEST, answers each page not sent yet on the same
 *           channel, leaves a hint for the pusher (adaptive pre-paging);
 *   push    walks the pages (hints first: the k pages after each recent
 *           fault, then in order) and streams them on the bulk channel,
 *           batched, through io_uring when the kernel has it.
 * The only arbiter of "sent" is the atomic test-and-set on s->sent: a page
 * goes out once, on whichever channel claims it first.  A request for a
 * page that the pusher already claimed is not answered: the page is on its
 * way on the bulk channel, and answering would send it twice.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "internal.h"
#include "metrics.h"
#include "migrate/auth.h"
#include "spin.h"
#include "stamps.h"

#define NHINTS		  16
#define PUSH_BUF	  (256u << 10)
#define PUSH_NBUF	  2
#define PUSH_BATCH_FRAMES 64
#define BULK_SNDBUF	  (256 << 10)

struct src {
	struct mig_source_vm *vm;
	const struct mig_opts *o;
	struct sockaddr_in sa;
	uint64_t session, nr_pages;
	uint32_t features;
	/* Learnt on the session's first urgent connection; proves every later one. */
	uint8_t secret[MIG_SECRET_LEN];
	int have_secret;
	uint32_t attempt; /* connection attempts so far (HELLO.attempt) */
	uint64_t *sent;
	struct mig_conn urg, bulk;
	struct mig_tls_ctx *tls; /* NULL: plain TCP */

	pthread_mutex_t lock;
	int broken;   /* link lost: recoverable after the switch-over */
	int fatal;    /* protocol error or peer ERROR: not recoverable */
	int complete; /* COMPLETE received */
	char why[320];

	pthread_mutex_t hint_lock;
	uint64_t hints[NHINTS];
	unsigned nhints;

	struct mig_complete dest;
	struct mig_running running;
	int running_seen;

	uint64_t t_start, t_pause, t_running, t_complete, t_push_start, t_push_end;
	uint64_t pause_rt;
	uint64_t pages_demand, pages_pushed, pages_zero, pages_zstd, pages_precopy,
	    pages_precopy_resent, pages_resent;
	uint64_t pages_pushed_zero; /* of pages_pushed (the push's non-zero rate) */
	int precopy_rounds_done;
	uint64_t precopy_upto;	 /* round 1 sent pages below this (all, unless cut short) */
	uint64_t *precopy_carry; /* dirty pages of the round precopy did not send */
	uint64_t bytes_pages, bytes_state, bytes_total_prev, hdr_total_prev;
	uint64_t req_addrs, req_in_flight, recoveries;
	uint64_t sent_count; /* atomic */
	uint64_t t_paused, t_saved, t_state_sent;
	struct mig_stamps *stamps; /* per-request steps (bench) */
	struct mig_spin spin;	   /* the urgent thread's (spin.h): after each reply */
	void *blob;		   /* the state, kept in case the link breaks before it arrived */
	size_t blob_len;
	int flush_now; /* a request hit a page waiting in the push buffer */
	int recoveries_before_running;

	/*
	 * The watchdog (see watch_thread()).  link_lock guards link_up and the
	 * connections' set-up: the watchdog touches urg/bulk only while up.
	 */
	pthread_mutex_t link_lock;
	pthread_cond_t watch_cond;
	int link_up, watch_stop, watch_on;
	int dirty_on; /* dirty logging is on (precopy) */
	pthread_t watch;
};

static void set_break(struct src *s, int fatal, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (!s->broken && !s->fatal)
		snprintf(s->why, sizeof(s->why), "%s", why);
	if (fatal)
		s->fatal = 1;
	else
		s->broken = 1;
	pthread_mutex_unlock(&s->lock);
	mig_conn_kick(&s->urg);
	mig_conn_kick(&s->bulk);
}

static int stopped(struct src *s)
{
	return __atomic_load_n(&s->broken, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->fatal, __ATOMIC_ACQUIRE);
}

/* ---- Live control: requests in, progress out (struct mig_ctl) ---- */

/* Whether the caller asked for field (start_postcopy, manual_postcopy). */
#define ASKED(s, field) ((s)->o->ctl && __atomic_load_n(&(s)->o->ctl->field, __ATOMIC_ACQUIRE))

static int cancel_asked(struct src *s)
{
	return s->o->ctl &&
	       __atomic_load_n(&s->o->ctl->cancel, __ATOMIC_ACQUIRE) == MIG_CANCEL_ASKED;
}

int mig_ctl_cancel(struct mig_ctl *c)
{
	int none = MIG_CANCEL_NONE;

	if (__atomic_compare_exchange_n(&c->cancel, &none, MIG_CANCEL_ASKED, false,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return 0;
	return none == MIG_CANCEL_ASKED ? 0 : -EBUSY;
}

/*
 * The switch-over's point of no return: from here a cancel is refused.
 * 0, or -ECANCELED when a cancel came first.
 */
static int no_more_cancel(struct src *s)
{
	int none = MIG_CANCEL_NONE;

	if (!s->o->ctl)
		return 0;
	if (__atomic_compare_exchange_n(&s->o->ctl->cancel, &none, MIG_CANCEL_TOO_LATE, false,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return 0;
	return -ECANCELED;
}

static void ctl_put(uint64_t *field, uint64_t v)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
}

static uint64_t downtime_us(struct src *s);

/* The counters query-migrate shows; cheap, called as the migration goes. */
static void publish(struct src *s)
{
	struct mig_ctl *c = s->o->ctl;
	if (!c)
		return;
	ctl_put(&c->pages_sent, __atomic_load_n(&s->sent_count, __ATOMIC_RELAXED));
	ctl_put(&c->pages_demand, __atomic_load_n(&s->pages_demand, __ATOMIC_RELAXED));
	ctl_put(&c->bytes_sent, s->bytes_total_prev +
				    __atomic_load_n(&s->urg.tx_bytes, __ATOMIC_RELAXED) +
				    __atomic_load_n(&s->bulk.tx_bytes, __ATOMIC_RELAXED));
	ctl_put(&c->precopy_rounds, (uint64_t)s->precopy_rounds_done);
	if (__atomic_load_n(&s->running_seen, __ATOMIC_ACQUIRE))
		ctl_put(&c->downtime_us, downtime_us(s));
}

static void set_phase(struct src *s, enum mig_phase phase)
{
	struct mig_ctl *c = s->o->ctl;
	if (!c)
		return;
	publish(s);
	if (phase >= MIG_PHASE_COMPLETED)
		ctl_put(&c->t_end_ns, mig_now_ns());
	__atomic_store_n(&c->phase, (int)phase, __ATOMIC_RELEASE);
	if (c->phase_changed)
		c->phase_changed(c->arg, phase);
}

/*
 * Giving up before the switch-over, asked to or because the VM ended: the
 * destination hears why and gives up at once rather than waiting out its
 * recovery deadline.  -ECANCELED with why in err.
 */
static int give_up(struct src *s, const char *why, char *err, size_t errlen)
{
	struct mig_error e = { .code = MIG_ERR_CANCELLED, .msg_len = (uint32_t)strlen(why) };

	if (s->urg.fd >= 0)
		mig_conn_send(&s->urg, MIG_MSG_ERROR, &e, sizeof(e), why, e.msg_len);
	snprintf(err, errlen, "%s", why);
	return -ECANCELED;
}

static int cancelled(struct src *s, char *err, size_t errlen)
{
	return give_up(s, "the migration was cancelled at the source", err, errlen);
}

/* ---- Liveness: heartbeats out, silence in ---- */

static void set_link_up(struct src *s, int up)
{
	pthread_mutex_lock(&s->link_lock);
	s->link_up = up;
	pthread_mutex_unlock(&s->link_lock);
}

/*
 * Is the link stalled at now (under link_lock, link up)?  Nothing came from
 * the destination and nothing could be sent to it for idle_ms.  (The wait
 * for COMPLETE after the last page has no progress deadline of its own:
 * the source cannot tell a slow link, whose pages are still on their way,
 * from a destination that withholds COMPLETE; by then the VM runs there,
 * and the source only holds memory.  docs/security.md.)
 */
static int link_stalled(struct src *s, uint64_t now, char *why, size_t len)
{
	uint64_t idle = (uint64_t)s->o->idle_ms * 1000000ull;
	uint64_t heard = mig_conn_heard(&s->urg);
	uint64_t sent = __atomic_load_n(&s->bulk.last_tx_ns, __ATOMIC_RELAXED);

	if (sent > heard)
		heard = sent;
	if (now > heard && now - heard > idle) {
		snprintf(why, len, "destination silent for %d ms: stalled, or the link is down",
			 s->o->idle_ms);
		return 1;
	}
	return 0;
}

/*
 * The watchdog, for the whole migration: every heartbeat interval
 * (idle_ms / 4, at most 1 s) a PING on the urgent channel if nothing else
 * went out; and when nothing came from the destination and nothing could be
 * sent to it for idle_ms, the link is broken: a stalled destination (its
 * kernel still acknowledges, so TCP waits for ever) or a half-open link.
 * Before the switch-over that fails the migration (the VM goes on here);
 * after it, the usual recovery runs within recover_ms.
 */
static void *watch_thread(void *arg)
{
	struct src *s = arg;
	uint64_t ms = (uint64_t)s->o->idle_ms / 4;
	uint64_t hb = (ms < 10 ? 10 : ms > 1000 ? 1000 : ms) * 1000000ull;
	pthread_mutex_lock(&s->link_lock);
	while (!s->watch_stop) {
		uint64_t t = mig_now_ns() + hb;
		struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull),
				       .tv_nsec = (long)(t % 1000000000ull) };
		pthread_cond_timedwait(&s->watch_cond, &s->link_lock, &ts);
		if (s->watch_stop || !s->link_up)
			continue;
		uint64_t now = mig_now_ns();
		mig_conn_ping_if_quiet(&s->urg, now, hb);
		char why[160];
		if (link_stalled(s, now, why, sizeof(why))) {
			s->link_up = 0;
			set_break(s, 0, why);
		}
	}
	pthread_mutex_unlock(&s->link_lock);
	return NULL;
}

static void start_watch(struct src *s)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->watch_cond, &ca);
	pthread_condattr_destroy(&ca);
	set_link_up(s, 1);
	s->watch_on = pthread_create(&s->watch, NULL, watch_thread, s) == 0;
}

static void stop_watch(struct src *s)
{
	if (!s->watch_on)
		return;
	pthread_mutex_lock(&s->link_lock);
	s->watch_stop = 1;
	pthread_cond_signal(&s->watch_cond);
	pthread_mutex_unlock(&s->link_lock);
	pthread_join(s->watch, NULL);
	pthread_cond_destroy(&s->watch_cond);
	s->watch_on = 0;
}

/* A failure on a link the watchdog (or a thread) broke: report that cause. */
static void link_cause(struct src *s, char *err, size_t errlen)
{
	pthread_mutex_lock(&s->lock);
	if (s->broken || s->fatal)
		snprintf(err, errlen, "%s", s->why);
	pthread_mutex_unlock(&s->lock);
}

/* ---- Connection set-up ---- */

/* The next frame on c, which must be AUTH; the destination's ERROR is a refusal. */
static int recv_auth(struct mig_conn *c, struct mig_auth *a, char *err, size_t errlen)
{
	struct mig_frame_hdr fh;
	const uint8_t *p;
	int r = mig_conn_recv(c, &fh, &p, err, errlen);
	if (r)
		return r;
	if (fh.type == MIG_MSG_ERROR) {
		char text[200]; /* escaped, possibly cut short */
		mig_error_text(p, text, sizeof(text));
		snprintf(err, errlen, "destination refused the %s channel: %s", c->name, text);
		return -ECONNREFUSED;
	}
	if (fh.type != MIG_MSG_AUTH) {
		snprintf(err, errlen, "%s channel: expected AUTH, got %s", c->name,
			 mig_msg_name(fh.type));
		return -EPROTO;
	}
	memcpy(a, p, sizeof(*a));
	return 0;
}

/*
 * Both ways (wire.h, AUTH): our proof for the destination's nonce, then
 * the destination's for ours.  A destination that cannot prove the secret
 * is an impostor (-EACCES).
 */
static int prove_both_ways(struct src *s, struct mig_conn *c, int channel,
			   const struct mig_auth *challenge, char *err, size_t errlen)
{
	struct mig_auth proof = { .kind = MIG_AUTH_PROOF }, ours = { .kind = MIG_AUTH_CHALLENGE };
	struct mig_auth back;
	uint8_t bind[MIG_SECRET_LEN];
	int r = mig_conn_binding(c, bind);
	if (!r)
		r = mig_auth_proof(s->secret, MIG_ROLE_SOURCE, challenge->data, s->session,
				   (uint16_t)channel, bind, proof.data);
	if (!r)
		r = mig_random_bytes(ours.data, sizeof(ours.data), err, errlen);
	else
		snprintf(err, errlen, "%s channel: cannot compute the proof of the session secret",
			 c->name);
	if (!r)
		r = mig_conn_send(c, MIG_MSG_AUTH, &proof, sizeof(proof), NULL, 0);
	if (!r)
		r = mig_conn_send(c, MIG_MSG_AUTH, &ours, sizeof(ours), NULL, 0);
	if (!r)
		r = recv_auth(c, &back, err, errlen);
	if (r)
		return r;
	if (back.kind != MIG_AUTH_PROOF ||
	    !mig_auth_check(s->secret, MIG_ROLE_DEST, ours.data, s->session, (uint16_t)channel,
			    bind, back.data)) {
		snprintf(err, errlen,
			 "%s channel: the peer did not prove the session secret: not our "
			 "destination",
			 c->name);
		return -EACCES;
	}
	return 0;
}

/*
 * AUTH after HELLO (wire.h): the session's first urgent connection learns
 * the secret; every other connection proves it, and has the destination
 * prove it.
 */
static int authenticate(struct src *s, struct mig_conn *c, int channel, char *err, size_t errlen)
{
	struct mig_auth a;
	int r = recv_auth(c, &a, err, errlen);
	if (r)
		return r;
	if (!s->have_secret && channel == MIG_CHAN_URGENT && a.kind == MIG_AUTH_SECRET) {
		memcpy(s->secret, a.data, sizeof(s->secret));
		mig_auth_wipe(&a, sizeof(a));
		s->have_secret = 1;
		return 0;
	}
	if (!s->have_secret || a.kind != MIG_AUTH_CHALLENGE) {
		snprintf(err, errlen, "%s channel: unexpected AUTH kind %u", c->name, a.kind);
		return -EPROTO;
	}
	return prove_both_ways(s, c, channel, &a, err, errlen);
}

static int hello(struct src *s, struct mig_conn *c, int channel, int recover, char *err,
		 size_t errlen)
{
	struct mig_hello h = {
		.version = MIG_VERSION,
		.role = MIG_ROLE_SOURCE,
		.channel = channel,
		.page_size = MIG_PAGE_SIZE,
		.flags = recover ? MIG_HELLO_RECOVER : 0,
		.session_id = s->session,
		.ram_size = s->vm->ram_size,
		.features = s->features,
		.attempt = s->attempt,
	};
	int r = mig_conn_send(c, MIG_MSG_HELLO, &h, sizeof(h), NULL, 0);
	if (r) {
		snprintf(err, errlen, "%s channel: cannot send HELLO: %s", c->name, strerror(-r));
		return r;
	}
	struct mig_frame_hdr fh;
	const uint8_t *p;
	r = mig_conn_recv(c, &fh, &p, err, errlen);
	if (r)
		return r;
	if (fh.type == MIG_MSG_ERROR) {
		char text[200]; /* escaped, possibly cut short */
		struct mig_error e;
		memcpy(&e, p, sizeof(e));
		mig_error_text(p, text, sizeof(text));
		snprintf(err, errlen, "destination refused the %s channel: %s", c->name, text);
		return e.code == MIG_ERR_BUSY ? -EBUSY : -ECONNREFUSED;
	}
	if (fh.type != MIG_MSG_HELLO) {
		snprintf(err, errlen, "%s channel: expected HELLO, got %s", c->name,
			 mig_msg_name(fh.type));
		return -EPROTO;
	}
	struct mig_hello back;
	memcpy(&back, p, sizeof(back));
	if (back.session_id != s->session || back.channel != channel) {
		snprintf(err, errlen, "%s channel: destination answered for another session",
			 c->name);
		return -EPROTO;
	}
	return authenticate(s, c, channel, err, errlen);
}

/*
 * Whether a failed connection attempt is worth repeating: a destination
 * that refused us (its ERROR, our credentials, another protocol or TLS
 * setting) will refuse the next attempt too.  One that is busy with
 * another source's session (-EBUSY) may not be: a stranger's claim that
 * makes no pair gives way after a few seconds.
 */
static int permanent_refusal(int r)
{
	return r == -ECONNREFUSED || r == -EPROTO || r == -EPROTONOSUPPORT || r == -EACCES;
}

/* One channel: TLS first when asked for, then HELLO and AUTH. */
static int open_channel(struct src *s, struct mig_conn *c, int channel, int recover, char *err,
			size_t errlen)
{
	char why[200];
	int r = mig_tls_secure(s->tls, c, s->o->idle_ms, why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "%s channel: %s", c->name, why);
		return r;
	}
	/*
	 * A destination that accepts but never answers is silent, not slow:
	 * one deadline for HELLO and AUTH, however the bytes trickle in, and
	 * frames no longer than a handshake's until AUTH completed.
	 */
	c->wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	mig_conn_set_deadline(c, mig_now_ns() + (uint64_t)s->o->idle_ms * 1000000ull);
	r = hello(s, c, channel, recover, err, errlen);
	mig_conn_set_deadline(c, 0);
	c->wire.frame_limit = 0;
	return r;
}

/* Connect both channels, retrying until deadline (monotonic ns). */
static int connect_pair(struct src *s, int recover, uint64_t deadline, char *err, size_t errlen)
{
	for (;;) {
		s->attempt++; /* both channels of this attempt carry it */
		int ufd = mig_connect(&s->sa, 1000, err, errlen);
		int bfd = ufd >= 0 ? mig_connect(&s->sa, 1000, err, errlen) : -1;
		if (ufd >= 0 && bfd >= 0) {
			mig_conn_init(&s->urg, ufd, "urgent", MIG_ROLE_DEST, s->features);
			mig_conn_init(&s->bulk, bfd, "bulk", MIG_ROLE_DEST, s->features);
			/*
			 * A short bulk queue: a demand fault on a page already pushed
			 * waits for whatever is queued before it (1 MiB ~ 1 ms here).
			 */
			int sb = BULK_SNDBUF;
			setsockopt(bfd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
			s->urg.wire.ram_size = s->bulk.wire.ram_size = s->vm->ram_size;
			int r = open_channel(s, &s->urg, MIG_CHAN_URGENT, recover, err, errlen);
			if (!r)
				r = open_channel(s, &s->bulk, MIG_CHAN_BULK, recover, err, errlen);
			if (!r) {
				if (mig_spin_enabled(&s->spin)) /* no receive timeout from here */
					s->urg.spin = &s->spin;
				mig_conn_set_liveness(&s->urg, s->o->idle_ms);
				mig_conn_set_liveness(&s->bulk, s->o->idle_ms);
				return 0;
			}
			mig_conn_close(&s->urg);
			mig_conn_close(&s->bulk);
			/*
			 * While recovering, whoever answers at the address may be an
			 * impostor, or a stranger's connection may have taken the
			 * slot: only the deadline ends the tries.
			 */
			if (!recover && permanent_refusal(r))
				return r;
			if (recover)
				pr_mig("reconnection refused (%s); trying again\n", err);
		} else {
			if (ufd >= 0)
				close(ufd);
		}
		if (mig_now_ns() > deadline)
			return -ETIMEDOUT;
		if (!recover && s->vm->stopped && s->vm->stopped(s->vm->ctx)) {
			snprintf(err, errlen, "the VM stopped before a destination answered");
			return -ECANCELED;
		}
		nanosleep(&(struct timespec){ 0, 100 * 1000000 }, NULL);
	}
}

/* ---- Page encoding ---- */

static _Thread_local ZSTD_CCtx *cctx;

static void cctx_free(void)
{
	ZSTD_freeCCtx(cctx);
	cctx = NULL;
}

/* Append page i as a PAGE frame to buf; returns bytes written. */
static size_t put_page(struct src *s, struct mig_conn *c, uint8_t *buf, uint64_t i, uint16_t flags,
		       int compress)
{
	const uint8_t *data = s->vm->ram + i * MIG_PAGE_SIZE;
	struct mig_page p = { .addr = i * MIG_PAGE_SIZE, .flags = flags };
	uint8_t zbuf[MIG_PAGE_SIZE];
	const void *payload = data;
	if (page_is_zero(data)) {
		p.encoding = MIG_PAGE_ZERO;
		payload = NULL;
		__atomic_fetch_add(&s->pages_zero, 1, __ATOMIC_RELAXED);
		if (!(flags & (MIG_PAGEF_DEMAND | MIG_PAGEF_PRECOPY)))
			__atomic_fetch_add(&s->pages_pushed_zero, 1, __ATOMIC_RELAXED);
	} else if (compress) {
		if (!cctx)
			cctx = ZSTD_createCCtx();
		size_t n =
		    cctx ? ZSTD_compressCCtx(cctx, zbuf, sizeof(zbuf), data, MIG_PAGE_SIZE, 1) : 0;
		if (cctx && !ZSTD_isError(n) && n < MIG_ZSTD_MAX_LEN - 64) {
			p.encoding = MIG_PAGE_ZSTD;
			p.data_len = (uint32_t)n;
			payload = zbuf;
			__atomic_fetch_add(&s->pages_zstd, 1, __ATOMIC_RELAXED);
		}
	}
	if (p.encoding == MIG_PAGE_RAW)
		p.data_len = MIG_PAGE_SIZE;
	__atomic_fetch_add(&s->bytes_pages, sizeof(p) + p.data_len, __ATOMIC_RELAXED);
	return mig_conn_put(c, buf, MIG_MSG_PAGE, &p, sizeof(p), payload, p.data_len);
}

/* ---- The urgent channel ---- */

static void add_hint(struct src *s, uint64_t page)
{
	pthread_mutex_lock(&s->hint_lock);
	if (s->nhints == NHINTS) {
		memmove(s->hints, s->hints + 1, (NHINTS - 1) * sizeof(s->hints[0]));
		s->nhints--;
	}
	s->hints[s->nhints++] = page;
	pthread_mutex_unlock(&s->hint_lock);
}

/*
 * Pages claimed as sent, by the source's one record of it (s->sent).  A
 * COMPLETE is believed only when this is every page: a destination cannot
 * have what was never sent.
 */
static uint64_t count_sent(struct src *s)
{
	uint64_t n = 0;
	for (uint64_t w = 0; w < (s->nr_pages + 63) / 64; w++)
		n += (uint64_t)__builtin_popcountll(__atomic_load_n(&s->sent[w], __ATOMIC_ACQUIRE));
	return n;
}

/*
 * Answer a PAGE_REQUEST: each page not sent yet goes out now on the urgent
 * channel (buf: room for one frame); one already claimed by the push is on
 * its way, so the push is told to flush instead.  0, or -1 when the link
 * broke (the page is lost in flight: RESUME will tell).
 */
static int serve_request(struct src *s, const uint8_t *p, uint8_t *buf)
{
	uint64_t t_rx = mig_now_ns();
	struct mig_page_request q;
	memcpy(&q, p, sizeof(q));
	for (uint32_t k = 0; k < q.count; k++) {
		uint64_t addr;
		memcpy(&addr, p + sizeof(q) + 8 * k, 8);
		uint64_t i = addr / MIG_PAGE_SIZE;
		mig_stamp(s->stamps, i, MIG_STEP_REQ_RX, t_rx);
		s->req_addrs++;
		if (bit_test_and_set(s->sent, i)) {
			s->req_in_flight++;
			__atomic_store_n(&s->flush_now, 1, __ATOMIC_RELEASE);
			continue;
		}
		__atomic_fetch_add(&s->sent_count, 1, __ATOMIC_RELAXED);
		size_t n = put_page(s, &s->urg, buf, i, MIG_PAGEF_DEMAND, 0);
		pthread_mutex_lock(&s->urg.tx_lock);
		mig_stamp(s->stamps, i, MIG_STEP_PAGE_SENT, mig_now_ns());
		int r = mig_conn_write(&s->urg, buf, n);
		pthread_mutex_unlock(&s->urg.tx_lock);
		if (r) {
			set_break(s, 0, "urgent channel: send failed");
			return -1;
		}
		mig_spin_answered(&s->spin);
		s->pages_demand++;
		add_hint(s, i);
	}
	return 0;
}

/*
 * COMPLETE: believed only when the source's own record says every page was
 * sent.  1 (done) or -1 (a broken or lying destination: fatal).
 */
static int take_complete(struct src *s, const uint8_t *p)
{
	uint64_t unsent = s->nr_pages - count_sent(s);
	if (unsent) {
		char err[200];
		snprintf(err, sizeof(err),
			 "destination claimed COMPLETE although %llu of %llu pages were never "
			 "sent: a broken or lying destination",
			 (unsigned long long)unsent, (unsigned long long)s->nr_pages);
		set_break(s, 1, err);
		return -1;
	}
	memcpy(&s->dest, p, sizeof(s->dest));
	s->t_complete = mig_now_ns();
	if (s->o->ctl) {
		ctl_put(&s->o->ctl->faults, s->dest.faults);
		ctl_put(&s->o->ctl->fault_lat_p50_ns, s->dest.fault_lat_p50_ns);
		ctl_put(&s->o->ctl->fault_lat_p99_ns, s->dest.fault_lat_p99_ns);
	}
	pthread_mutex_lock(&s->lock);
	s->complete = 1;
	pthread_mutex_unlock(&s->lock);
	mig_conn_kick(&s->bulk);
	return 1;
}

/* One checked frame from the destination: 0 to go on, 1 when the urgent thread is done. */
static int urgent_frame(struct src *s, const struct mig_frame_hdr *h, const uint8_t *p,
			uint8_t *buf)
{
	char err[300];
	switch (h->type) {
	case MIG_MSG_PAGE_REQUEST:
		return serve_request(s, p, buf) ? 1 : 0;
	case MIG_MSG_RUNNING:
		/* Repeated after a recovery: the first one counts. */
		if (!s->running_seen) {
			memcpy(&s->running, p, sizeof(s->running));
			s->t_running = mig_now_ns();
			__atomic_store_n(&s->running_seen, 1, __ATOMIC_RELEASE);
			publish(s);
		}
		return 0;
	case MIG_MSG_LAYOUT:
		return 0; /* the acknowledgement of a LAYOUT sent again by recover_link() */
	case MIG_MSG_COMPLETE:
		take_complete(s, p);
		return 1;
	case MIG_MSG_ERROR: {
		char text[200]; /* escaped, possibly cut short */
		mig_error_text(p, text, sizeof(text));
		snprintf(err, sizeof(err), "destination reported an error: %s", text);
		set_break(s, 1, err);
		return 1;
	}
	}
	snprintf(err, sizeof(err), "urgent channel: unexpected %s from destination",
		 mig_msg_name(h->type));
	set_break(s, 1, err);
	return 1;
}

static void *urgent_thread(void *arg)
{
	struct src *s = arg;
	uint8_t *buf = malloc(MIG_PAGE_FRAME_MAX);
	char err[300];
	mig_thread_urgent();
	while (buf && !stopped(s)) {
		struct mig_frame_hdr h;
		const uint8_t *p;
		int r = mig_conn_recv(&s->urg, &h, &p, err, sizeof(err));
		if (r) {
			set_break(s, !mig_link_error(r), err);
			break;
		}
		if (urgent_frame(s, &h, p, buf))
			break;
	}
	if (!buf)
		set_break(s, 1, "urgent channel: out of memory");
	free(buf);
	return NULL;
}

/* ---- The bulk channel ---- */

struct pusher {
	struct src *s;
	struct io_uring ring;
	int uring;
	uint8_t *buf[PUSH_NBUF];
	size_t used[PUSH_NBUF];
	int inflight[PUSH_NBUF];
	unsigned cur;
	/* pre-paging window */
	uint64_t pre_next;
	unsigned pre_left;
	uint64_t cursor;
	unsigned frames;  /* in the current buffer */
	uint64_t pace_ns; /* max_bandwidth: when what was pushed may have gone */
};

static int pusher_init(struct pusher *ps, struct src *s)
{
	memset(ps, 0, sizeof(*ps));
	ps->s = s;
	for (int i = 0; i < PUSH_NBUF; i++) {
		ps->buf[i] = malloc(PUSH_BUF);
		if (!ps->buf[i])
			return -ENOMEM;
	}
	/*
	 * The ring writes the socket itself: only for plain TCP (a TLS session
	 * encrypts in user space first).  Kernels without io_uring (or with it
	 * disabled): the connection's own send then.
	 */
	ps->uring = !s->tls && !getenv("MIG_NO_URING") &&
		    io_uring_queue_init(2 * PUSH_NBUF, &ps->ring, 0) == 0;
	return 0;
}

static int wait_idle(struct pusher *ps);

static void pusher_free(struct pusher *ps)
{
	cctx_free();
	if (ps->uring) {
		/* The kernel must be done with the buffers before they go. */
		while (wait_idle(ps))
			;
		io_uring_queue_exit(&ps->ring);
	}
	for (int i = 0; i < PUSH_NBUF; i++)
		free(ps->buf[i]);
}

/*
 * Reap the one send in flight; a short send is resubmitted for the rest
 * before anything else goes out.  Only one send is ever in flight on the
 * socket: two concurrent io_uring sends on one stream may be reordered
 * (one retried asynchronously after EAGAIN while the next goes inline),
 * which would interleave frames.  Two buffers still overlap encoding with
 * sending.
 */
static int reap(struct pusher *ps)
{
	struct io_uring_cqe *cqe;
	int r = io_uring_wait_cqe(&ps->ring, &cqe);
	if (r < 0)
		return r;
	unsigned b = (unsigned)(uintptr_t)io_uring_cqe_get_data(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&ps->ring, cqe);
	if (res <= 0) {
		ps->inflight[b] = 0;
		ps->used[b] = 0;
		return res < 0 ? res : -EPIPE;
	}
	mig_conn_sent(&ps->s->bulk, mig_now_ns());
	if ((size_t)res < ps->used[b]) {
		memmove(ps->buf[b], ps->buf[b] + res, ps->used[b] - res);
		ps->used[b] -= res;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ps->ring);
		io_uring_prep_send(sqe, mig_conn_raw_fd(&ps->s->bulk), ps->buf[b], ps->used[b],
				   MSG_NOSIGNAL);
		io_uring_sqe_set_data(sqe, (void *)(uintptr_t)b);
		io_uring_submit(&ps->ring);
		return 0;
	}
	ps->used[b] = 0;
	ps->inflight[b] = 0;
	return 0;
}

static int wait_idle(struct pusher *ps)
{
	for (int i = 0; ps->uring && i < PUSH_NBUF; i++)
		while (ps->inflight[i]) {
			int r = reap(ps);
			if (r)
				return r;
		}
	return 0;
}

/* Send the current buffer and move to the other one. */
static int flush(struct pusher *ps)
{
	unsigned b = ps->cur;
	if (!ps->used[b])
		return 0;
	if (!ps->uring) {
		int r = mig_conn_write(&ps->s->bulk, ps->buf[b], ps->used[b]);
		if (r)
			return r;
		mig_conn_sent(&ps->s->bulk, mig_now_ns());
		ps->used[b] = 0;
		return 0;
	}
	int r = wait_idle(ps);
	if (r)
		return r;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ps->ring);
	io_uring_prep_send(sqe, mig_conn_raw_fd(&ps->s->bulk), ps->buf[b], ps->used[b],
			   MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, (void *)(uintptr_t)b);
	io_uring_submit(&ps->ring);
	ps->inflight[b] = 1;
	ps->cur = (b + 1) % PUSH_NBUF;
	return 0;
}

static int drain(struct pusher *ps)
{
	int r = flush(ps);
	if (!r)
		r = wait_idle(ps);
	return r;
}

/* Append a frame to the batch, flushing first when it may not fit. */
static int push_frame(struct pusher *ps, uint16_t type, const void *p1, size_t l1, const void *p2,
		      size_t l2)
{
	size_t need = sizeof(struct mig_frame_hdr) + l1 + l2;
	if (need > PUSH_BUF) {
		int r = drain(ps);
		if (r)
			return r;
		return mig_conn_send(&ps->s->bulk, type, p1, l1, p2, l2);
	}
	if (PUSH_BUF - ps->used[ps->cur] < need) {
		int r = flush(ps);
		if (r)
			return r;
	}
	ps->used[ps->cur] +=
	    mig_conn_put(&ps->s->bulk, ps->buf[ps->cur] + ps->used[ps->cur], type, p1, l1, p2, l2);
	return 0;
}

/*
 * max_bandwidth: each pushed frame books its bytes at the cap's rate on a
 * virtual clock, and the pusher sleeps while that clock is ahead of real
 * time.  Idle time buys at most PACE_BURST_NS of credit.  What is batched
 * goes out before a sleep (a fault may wait on it); demand replies travel
 * on the urgent channel and are never held back.
 */
#define PACE_BURST_NS 20000000ull
#define PACE_SLEEP_NS 100000000ull

static int pace(struct pusher *ps, size_t bytes)
{
	struct mig_ctl *c = ps->s->o->ctl;
	uint64_t cap = c ? __atomic_load_n(&c->max_bandwidth, __ATOMIC_RELAXED) : 0;
	uint64_t now, ahead;
	int r;

	if (!cap)
		return 0;
	now = mig_now_ns();
	if (ps->pace_ns + PACE_BURST_NS < now)
		ps->pace_ns = now - PACE_BURST_NS;
	ps->pace_ns += (uint64_t)((double)bytes * 1e9 / (double)cap);
	if (ps->pace_ns <= now)
		return 0;
	r = flush(ps);
	if (r)
		return r;
	ahead = ps->pace_ns - now;
	if (ahead > PACE_SLEEP_NS) /* a lowered cap or a cancel is seen soon */
		ahead = PACE_SLEEP_NS;
	nanosleep(&(struct timespec){ .tv_nsec = (long)ahead }, NULL);
	return 0;
}

static int push_page(struct pusher *ps, uint64_t i, uint16_t flags)
{
	size_t n;

	if (PUSH_BUF - ps->used[ps->cur] < MIG_PAGE_FRAME_MAX) {
		int r = flush(ps);
		if (r)
			return r;
	}
	n = put_page(ps->s, &ps->s->bulk, ps->buf[ps->cur] + ps->used[ps->cur], i, flags,
		     ps->s->o->compress);
	ps->used[ps->cur] += n;
	return pace(ps, n);
}

/* The next page to push, claimed; -1 when every page is sent. */
static int64_t next_page(struct pusher *ps)
{
	struct src *s = ps->s;
	for (;;) {
		while (ps->pre_left) {
			uint64_t i = ps->pre_next++;
			ps->pre_left--;
			if (i >= s->nr_pages) {
				ps->pre_left = 0;
				break;
			}
			if (!bit_test_and_set(s->sent, i))
				return (int64_t)i;
		}
		pthread_mutex_lock(&s->hint_lock);
		if (s->nhints) {
			uint64_t h = s->hints[--s->nhints];
			pthread_mutex_unlock(&s->hint_lock);
			ps->pre_next = h + 1;
			ps->pre_left = s->o->prepage;
			continue;
		}
		pthread_mutex_unlock(&s->hint_lock);
		while (ps->cursor < s->nr_pages) {
			uint64_t w = ~__atomic_load_n(&s->sent[ps->cursor / 64], __ATOMIC_ACQUIRE);
			w &= ~0ull << (ps->cursor % 64);
			if (!w) {
				ps->cursor = (ps->cursor / 64 + 1) * 64;
				continue;
			}
			uint64_t i = (ps->cursor / 64) * 64 + (uint64_t)__builtin_ctzll(w);
			if (i >= s->nr_pages) {
				ps->cursor = s->nr_pages;
				break;
			}
			ps->cursor = i + 1;
			if (!bit_test_and_set(s->sent, i))
				return (int64_t)i;
		}
		return -1;
	}
}

static void progress(struct src *s, const char *phase)
{
	static uint64_t last;
	uint64_t now = mig_now_ns();
	publish(s);
	if (!s->o->progress || now - last < 200000000ull)
		return;
	last = now;
	uint64_t n = __atomic_load_n(&s->sent_count, __ATOMIC_RELAXED);
	double secs = (double)(now - s->t_start) / 1e9;
	mig_progress("migrate: %s %3.0f%%  %llu/%llu pages  %llu demand  %.0f MiB/s", phase,
		     100.0 * (double)n / (double)s->nr_pages, (unsigned long long)n,
		     (unsigned long long)s->nr_pages, (unsigned long long)s->pages_demand,
		     (double)(s->urg.tx_bytes + s->bulk.tx_bytes) / secs / 1048576.0);
}

static void *push_thread(void *arg)
{
	struct src *s = arg;
	struct pusher ps;
	if (pusher_init(&ps, s)) {
		set_break(s, 1, "push: out of memory");
		return NULL;
	}
	int r = 0;
	for (;;) {
		if (stopped(s) || __atomic_load_n(&s->complete, __ATOMIC_ACQUIRE))
			break;
		int64_t i = next_page(&ps);
		if (i < 0)
			break;
		r = push_page(&ps, (uint64_t)i, 0);
		/*
		 * Small batches while faults wait: a page claimed by the push may
		 * be the one a vCPU is blocked on.
		 */
		if (!r && (__atomic_exchange_n(&s->flush_now, 0, __ATOMIC_ACQ_REL) ||
			   ++ps.frames >= PUSH_BATCH_FRAMES)) {
			r = flush(&ps);
			ps.frames = 0;
		}
		if (r)
			break;
		__atomic_fetch_add(&s->sent_count, 1, __ATOMIC_RELAXED);
		s->pages_pushed++;
		if ((i & 63) == 0) /* query-migrate's figures, fresh within 256 KiB */
			publish(s);
		if ((i & 1023) == 0)
			progress(s, "postcopy");
	}
	if (!r && !stopped(s) && !__atomic_load_n(&s->complete, __ATOMIC_ACQUIRE)) {
		struct mig_done d = { .phase = 1, .pages = s->nr_pages };
		r = push_frame(&ps, MIG_MSG_DONE, &d, sizeof(d), NULL, 0);
		if (!r)
			r = drain(&ps);
		s->t_push_end = mig_now_ns();
	}
	if (r && !stopped(s) && !__atomic_load_n(&s->complete, __ATOMIC_ACQUIRE))
		set_break(s, 0, "bulk channel: send failed (connection lost)");
	pusher_free(&ps);
	return NULL;
}

/* ---- Precopy ---- */

/*
 * Precopy stops when it stops converging.  Round 1 sends every page; each
 * later round resends what the guest dirtied meanwhile, but only while
 * that pays: a round goes out only if its dirty set is at most
 * PRECOPY_CONVERGE_PCT percent of what the round before sent (a guest that
 * dirties as fast as we send, like the random workload, would have every
 * round resend nearly everything: 3x the bytes for no fewer faults), and
 * more than PRECOPY_DONE_PAGES pages (fewer are cheaper as demand or pushed
 * pages than as one more round).  --precopy-rounds is the most rounds.
 * The dirty pages of the round not sent are carried into the switch-over's
 * PRECOPY_DIRTY (the dirty log forgets what it reported), so that the
 * destination drops their stale staged copies.
 */
#define PRECOPY_CONVERGE_PCT 50
#define PRECOPY_DONE_PAGES   64

static uint64_t count_bits(const uint64_t *map, size_t words)
{
	uint64_t n = 0;
	for (size_t w = 0; w < words; w++)
		n += (uint64_t)__builtin_popcountll(map[w]);
	return n;
}

/* Whether precopy must end now: a cancel, or the operator's start of postcopy. */
static int precopy_cut(struct src *s)
{
	return cancel_asked(s) || ASKED(s, start_postcopy);
}

/*
 * Send a round's pages (every page in round 0, else those in dirty); their
 * count.  A round cut short (precopy_cut()) leaves *upto at the first page
 * it did not consider; otherwise *upto is nr_pages.
 */
static uint64_t precopy_round(struct pusher *ps, int round, const uint64_t *dirty, int *r,
			      uint64_t *upto)
{
	struct src *s = ps->s;
	uint64_t n = 0, i;
	for (i = 0; i < s->nr_pages && !*r; i++) {
		if ((i & 63) == 0)
			publish(s);
		if ((i & 1023) == 0) {
			if (precopy_cut(s))
				break;
			progress(s, "precopy");
		}
		if (round > 0 && !bit_test(dirty, i))
			continue;
		*r = push_page(ps, i, MIG_PAGEF_PRECOPY);
		n++;
	}
	*upto = i;
	return n;
}

/*
 * Whether round (> 0), with d pages dirty after the previous round sent
 * sent_before, goes out: see PRECOPY_CONVERGE_PCT.  Under manual_postcopy
 * every round goes out (pausing briefly when little is dirty), until the
 * operator starts postcopy.
 */
static int round_pays(struct src *s, uint64_t d, uint64_t sent_before)
{
	if (ASKED(s, manual_postcopy)) {
		if (d <= PRECOPY_DONE_PAGES)
			nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
		return 1;
	}
	return d > PRECOPY_DONE_PAGES && d * 100 <= sent_before * PRECOPY_CONVERGE_PCT;
}

/* The dirty log since the last round into dirty; 0 or -errno with err. */
static int fetch_dirty(struct src *s, uint64_t *dirty, size_t words, uint64_t *t_prev, char *err,
		       size_t errlen)
{
	uint64_t now, d;
	int r;

	memset(dirty, 0, words * 8);
	r = s->vm->dirty_fetch(s->vm->ctx, dirty);
	if (r) {
		snprintf(err, errlen, "precopy: dirty log: %s", strerror(-r));
		return r;
	}
	now = mig_now_ns();
	d = count_bits(dirty, words);
	if (s->o->ctl && now > *t_prev)
		ctl_put(&s->o->ctl->dirty_pages_rate,
			(uint64_t)((double)d * 1e9 / (double)(now - *t_prev)));
	*t_prev = now;
	return 0;
}

/* Keep the dirty pages of a round not sent (from page upto on) for PRECOPY_DIRTY. */
static void carry_dirty(struct src *s, uint64_t *dirty, uint64_t upto)
{
	for (uint64_t i = 0; i < upto && i < s->nr_pages; i++)
		bit_clear(dirty, i);
	s->precopy_carry = dirty;
}

static int precopy(struct src *s, char *err, size_t errlen)
{
	size_t words = (s->nr_pages + 63) / 64;
	uint64_t *dirty = calloc(words, 8);
	uint64_t sent = 0, upto, t_round = mig_now_ns();
	struct pusher ps;
	int r = pusher_init(&ps, s);
	if (!dirty || r) {
		free(dirty);
		snprintf(err, errlen, "precopy: out of memory");
		return -ENOMEM;
	}
	r = s->vm->dirty_start(s->vm->ctx);
	if (r) {
		snprintf(err, errlen, "precopy: cannot start dirty logging: %s", strerror(-r));
		goto out;
	}
	s->precopy_upto = 0;
	for (int round = 0; (round < s->o->precopy_rounds || ASKED(s, manual_postcopy)) && !r;
	     round++) {
		if (precopy_cut(s))
			break;
		if (round > 0) {
			r = fetch_dirty(s, dirty, words, &t_round, err, errlen);
			if (r)
				break;
			if (!round_pays(s, count_bits(dirty, words), sent)) {
				carry_dirty(s, dirty, 0);
				dirty = NULL;
				break;
			}
		}
		sent = precopy_round(&ps, round, dirty, &r, &upto);
		s->precopy_rounds_done = round + 1;
		if (round == 0) {
			s->pages_precopy += sent;
			s->precopy_upto = upto;
		} else {
			s->pages_precopy_resent += sent;
			if (upto < s->nr_pages) { /* cut short: the rest stays dirty */
				carry_dirty(s, dirty, upto);
				dirty = NULL;
			}
		}
		if (s->o->progress)
			mig_progress("migrate: precopy round %d: %llu pages", round + 1,
				     (unsigned long long)sent);
		if (r)
			snprintf(err, errlen, "precopy: bulk channel send failed");
		if (!dirty)
			break;
	}
	if (!r)
		r = drain(&ps);
	if (r && !err[0])
		snprintf(err, errlen, "precopy: bulk channel send failed");
out:
	pusher_free(&ps);
	free(dirty);
	return r;
}

/* After the pause: which precopied pages were written since last sent. */
static int precopy_finish(struct src *s, char *err, size_t errlen)
{
	size_t words = (s->nr_pages + 63) / 64;
	size_t bytes = (s->nr_pages + 7) / 8;
	uint64_t *dirty = calloc(words, 8);
	if (!dirty)
		return -ENOMEM;
	if (s->precopy_carry) /* dirtied in a round that was not sent */
		memcpy(dirty, s->precopy_carry, words * 8);
	int r = s->vm->dirty_fetch(s->vm->ctx, dirty);
	if (r) {
		snprintf(err, errlen, "precopy: final dirty log: %s", strerror(-r));
		free(dirty);
		return r;
	}
	/* Pages round 1 never reached (cut short) count as dirty: not staged there. */
	for (uint64_t i = 0; i < s->nr_pages; i++) {
		if (i >= s->precopy_upto)
			bit_test_and_set(dirty, i);
		else if (!bit_test(dirty, i)) {
			bit_test_and_set(s->sent, i);
			s->sent_count++;
		}
	}
	struct mig_dirty d = { .nr_pages = s->nr_pages };
	r = mig_conn_send(&s->bulk, MIG_MSG_PRECOPY_DIRTY, &d, sizeof(d), dirty, bytes);
	free(dirty);
	if (r)
		snprintf(err, errlen, "bulk channel: cannot send PRECOPY_DIRTY: %s", strerror(-r));
	return r;
}

/* ---- Recovery ---- */

/*
 * Wait for RESUME on a reconnected pair, within idle_ms (heartbeats do not
 * extend it): 0 with *h and *p, -ETIMEDOUT or another -errno with err.
 */
static int await_resume(struct src *s, struct mig_frame_hdr *h, const uint8_t **p, char *err,
			size_t errlen)
{
	mig_conn_set_deadline(&s->urg, mig_now_ns() + (uint64_t)s->o->idle_ms * 1000000ull);
	int r = mig_conn_recv(&s->urg, h, p, err, errlen);
	mig_conn_set_deadline(&s->urg, 0);
	if (r == -ETIMEDOUT)
		snprintf(err, errlen, "destination sent no RESUME within %d ms of the reconnection",
			 s->o->idle_ms);
	if (!r && h->type != MIG_MSG_RESUME) {
		snprintf(err, errlen, "recovery: expected RESUME, got %s", mig_msg_name(h->type));
		r = -EPROTO;
	}
	return r;
}

/*
 * Reconnect and take RESUME before deadline.  A reconnection whose RESUME
 * does not come within idle_ms is dropped and tried again: a destination
 * that only sends heartbeats cannot hold the source past the deadline.
 */
static int reconnect_for_resume(struct src *s, uint64_t deadline, struct mig_frame_hdr *h,
				const uint8_t **p, char *err, size_t errlen)
{
	for (;;) {
		int r = connect_pair(s, 1, deadline, err, errlen);
		if (r)
			return r;
		set_link_up(s, 1);
		r = await_resume(s, h, p, err, errlen);
		if (!r)
			return 0;
		set_link_up(s, 0);
		mig_conn_close(&s->urg);
		mig_conn_close(&s->bulk);
		if (mig_now_ns() > deadline)
			return r;
		pr_mig("reconnected, but no RESUME (%s); trying again\n", err);
	}
}

static int recover_link(struct src *s, char *err, size_t errlen)
{
	uint64_t deadline = mig_now_ns() + (uint64_t)s->o->recover_ms * 1000000ull;
	pr_mig("link to destination broken during postcopy (%s); reconnecting to %s for up to "
	       "%d ms\n",
	       s->why, s->o->addr, s->o->recover_ms);
	set_phase(s, MIG_PHASE_RECOVER);
	set_link_up(s, 0);
	s->bytes_total_prev += s->urg.tx_bytes + s->bulk.tx_bytes;
	s->hdr_total_prev += s->urg.tx_hdr + s->bulk.tx_hdr;
	mig_conn_close(&s->urg);
	mig_conn_close(&s->bulk);
	struct mig_frame_hdr h;
	const uint8_t *p;
	int r = reconnect_for_resume(s, deadline, &h, &p, err, errlen);
	if (r) {
		char e2[300];
		snprintf(e2, sizeof(e2), "%s", err);
		snprintf(err, errlen,
			 "destination unreachable for %d ms after the link broke (%s); giving up",
			 s->o->recover_ms, e2);
		return r;
	}
	/* The destination's bitmap is the truth: resend everything it lacks. */
	struct mig_resume rs;
	memcpy(&rs, p, sizeof(rs));
	const uint8_t *bm = p + sizeof(struct mig_resume);
	uint64_t have = 0;
	for (uint64_t i = 0; i < s->nr_pages; i++) {
		int got = wire_bit(bm, i);
		if (got) {
			have++;
		} else if (bit_test(s->sent, i)) {
			bit_clear(s->sent, i);
			s->pages_resent++;
		}
	}
	s->sent_count = have;
	s->nhints = 0;
	if (rs.flags & MIG_RESUME_NEED_STATE) {
		/* The state never arrived: the switch-over again, same pause. */
		struct mig_layout l = {
			.ram_size = s->vm->ram_size,
			.page_size = MIG_PAGE_SIZE,
			.nr_regions = s->vm->nr_regions,
		};
		memcpy(l.regions, s->vm->regions, sizeof(l.regions));
		struct mig_done done0 = { .phase = 0 };
		struct mig_state_hdr sh = { .pause_realtime_ns = s->pause_rt,
					    .blob_len = s->blob_len };
		r = mig_conn_send(&s->urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
		if (!r)
			r = mig_conn_send(&s->bulk, MIG_MSG_DONE, &done0, sizeof(done0), NULL, 0);
		if (!r)
			r = mig_conn_send(&s->urg, MIG_MSG_STATE, &sh, sizeof(sh), s->blob,
					  s->blob_len);
		if (r) {
			snprintf(err, errlen, "recovery: cannot send the state again: %s",
				 strerror(-r));
			return r;
		}
		pr_mig("destination lost the VM state with the link: sent it again\n");
	}
	if (!s->running_seen)
		s->recoveries_before_running = 1;
	s->broken = 0;
	s->recoveries++;
	set_phase(s, MIG_PHASE_POSTCOPY);
	pr_mig("link recovered: destination has %llu of %llu pages, %llu lost in flight will be "
	       "sent again\n",
	       (unsigned long long)have, (unsigned long long)s->nr_pages,
	       (unsigned long long)(s->nr_pages - have));
	return 0;
}

/* ---- Metrics ---- */

static double per_s(uint64_t pages, double secs)
{
	return secs > 0 ? (double)(pages * MIG_PAGE_SIZE) / secs / 1048576.0 : 0.0;
}

/*
 * The downtime in ns once the destination runs the VM, else -1: the shorter
 * of the two clocks' readings, the destination's alone when a recovery
 * came first (the source's clock then includes the outage).
 */
static double downtime_ns(struct src *s)
{
	int64_t down_src = (int64_t)(s->t_running - s->t_pause);
	int64_t down_dst = s->running.dest_downtime_ns;
	if (!s->running_seen)
		return -1;
	if (s->recoveries_before_running)
		return (double)down_dst;
	return (double)(down_dst >= 0 && down_dst < down_src ? down_dst : down_src);
}

static uint64_t downtime_us(struct src *s)
{
	double ns = downtime_ns(s);
	return ns < 0 ? 0 : (uint64_t)(ns / 1000.0);
}

static void report(struct src *s, FILE *f)
{
	uint64_t tx = s->bytes_total_prev + s->urg.tx_bytes + s->bulk.tx_bytes;
	int64_t down_src = s->running_seen ? (int64_t)(s->t_running - s->t_pause) : -1;
	int64_t down_dst = s->running_seen ? s->running.dest_downtime_ns : -1;
	double push_s =
	    s->t_push_end > s->t_push_start ? (double)(s->t_push_end - s->t_push_start) / 1e9 : 0;
	double down = s->running_seen ? downtime_ns(s) / 1000.0 : NAN;
	struct mig_source_metrics m = {
		.ram_bytes = s->vm->ram_size,
		.pages = s->nr_pages,
		.precopy_rounds = s->o->precopy_rounds,
		.precopy_rounds_done = s->precopy_rounds_done,
		.compress = !!(s->features & MIG_FEAT_ZSTD),
		.downtime_us = down,
		.downtime_source_clock_us = (double)down_src / 1000.0,
		.downtime_dest_clock_us = (double)down_dst / 1000.0,
		.pause_us = (double)(s->t_paused - s->t_pause) / 1000.0,
		.save_state_us = (double)(s->t_saved - s->t_paused) / 1000.0,
		.send_state_us = (double)(s->t_state_sent - s->t_saved) / 1000.0,
		.total_ms = (double)(s->t_complete - s->t_start) / 1e6,
		.postcopy_ms = (double)(s->t_complete - s->t_pause) / 1e6,
		.bytes_pages = s->bytes_pages,
		.bytes_state = s->bytes_state,
		.bytes_overhead = tx - s->bytes_pages - s->bytes_state,
		.bytes_total = tx,
		.pages_demand = s->pages_demand,
		.pages_pushed = s->pages_pushed,
		.pages_precopy = s->pages_precopy,
		.pages_precopy_resent = s->pages_precopy_resent,
		.pages_zero = s->pages_zero,
		.pages_zstd = s->pages_zstd,
		.requests_in_flight = s->req_in_flight,
		.pages_resent = s->pages_resent,
		.recoveries = s->recoveries,
		.dest = &s->dest,
		.push_MiB_per_s = per_s(s->pages_pushed, push_s),
		.push_nonzero_MiB_per_s = per_s(s->pages_pushed - s->pages_pushed_zero, push_s),
		.stamps = { .stamps = s->stamps,
			    .ev = { { "pause", s->t_pause },
				    { "paused", s->t_paused },
				    { "state_saved", s->t_saved },
				    { "state_sent", s->t_state_sent } } },
		.tls = s->tls,
	};
	int r = mig_metrics_write_source(&m, f);
	if (r)
		pr_mig("cannot write the metrics: %s\n", strerror(-r));
}

static void write_report(struct src *s)
{
	const char *path = s->o->metrics;
	if (!path)
		return;
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
	if (!f) {
		pr_mig("cannot write metrics to %s: %s\n", path, strerror(errno));
		return;
	}
	report(s, f);
	if (f != stdout)
		fclose(f);
	else
		fflush(f);
}

/* ---- The whole run ---- */

static int run_postcopy(struct src *s, char *err, size_t errlen)
{
	for (;;) {
		pthread_t ut, pt;
		pthread_create(&ut, NULL, urgent_thread, s);
		pthread_create(&pt, NULL, push_thread, s);
		pthread_join(ut, NULL);
		pthread_join(pt, NULL);
		if (s->complete)
			return 0;
		if (s->fatal) {
			snprintf(err, errlen, "%s", s->why);
			return -EPROTO;
		}
		if (!s->broken) {
			snprintf(err, errlen, "internal: threads ended without a result");
			return -EIO;
		}
		int r = recover_link(s, err, errlen);
		if (r)
			return r;
	}
}

/* A new source for vm and o; NULL with a message. */
/*
 * The TLS client context when TLS is asked for: the credentials are loaded
 * (and refused with a message) before anything connects.  The destination's
 * certificate must name --tls-hostname, by default the address's host.
 */
static int tls_client(struct src *s, char *err, size_t errlen)
{
	struct mig_tls_opts t = s->o->tls;
	char host[INET_ADDRSTRLEN];
	if (!mig_opts_tls(s->o))
		return 0;
	if (!t.hostname && t.creds_dir)
		t.hostname = inet_ntop(AF_INET, &s->sa.sin_addr, host, sizeof(host));
	return mig_tls_ctx_new(&t, false, &s->tls, err, errlen);
}

static struct src *src_new(struct mig_source_vm *vm, const struct mig_opts *o, char *err,
			   size_t errlen)
{
	if (vm->ram_size == 0 || vm->ram_size % MIG_PAGE_SIZE) {
		snprintf(err, errlen, "RAM size %llu is not a multiple of the page size",
			 (unsigned long long)vm->ram_size);
		return NULL;
	}
	if (o->precopy_rounds && !(vm->dirty_start && vm->dirty_fetch && vm->dirty_stop)) {
		snprintf(err, errlen, "precopy rounds need dirty logging, which this VMM lacks");
		return NULL;
	}
	struct src *s = calloc(1, sizeof(*s));
	if (s)
		s->sent = calloc((vm->ram_size / MIG_PAGE_SIZE + 63) / 64, 8);
	if (!s || !s->sent) {
		if (s)
			free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->vm = vm;
	s->o = o;
	s->nr_pages = vm->ram_size / MIG_PAGE_SIZE;
	s->stamps = mig_stamps_new(s->nr_pages); /* NULL: no stamps, nothing else lost */
	s->features = o->compress ? MIG_FEAT_ZSTD : 0;
	s->t_start = mig_now_ns();
	s->urg.fd = s->bulk.fd = -1;
	mig_spin_init(&s->spin, o->spin_us, false); /* cannot fail without a wake fd */
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->link_lock, NULL);
	pthread_mutex_init(&s->hint_lock, NULL);
	if (mig_random_bytes(&s->session, sizeof(s->session), err, errlen) ||
	    mig_addr_parse(o->addr, &s->sa, err, errlen) || tls_client(s, err, errlen)) {
		mig_tls_ctx_free(s->tls);
		mig_stamps_free(s->stamps);
		free(s->sent);
		free(s);
		return NULL;
	}
	return s;
}

/*
 * LAYOUT, last before the pause, and its acknowledgement: a destination
 * that refuses it must be known while the VM can still go on here.
 */
static int send_layout(struct src *s, char *err, size_t errlen)
{
	struct mig_layout l = {
		.ram_size = s->vm->ram_size,
		.page_size = MIG_PAGE_SIZE,
		.nr_regions = s->vm->nr_regions,
	};
	memcpy(l.regions, s->vm->regions, sizeof(l.regions));
	int r = mig_conn_send(&s->urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	if (r) {
		snprintf(err, errlen, "cannot send LAYOUT: %s", strerror(-r));
		return r;
	}
	struct mig_frame_hdr h;
	const uint8_t *p;
	/* The acknowledgement within idle_ms: heartbeats are not an answer. */
	mig_conn_set_deadline(&s->urg, mig_now_ns() + (uint64_t)s->o->idle_ms * 1000000ull);
	r = mig_conn_recv(&s->urg, &h, &p, err, errlen);
	mig_conn_set_deadline(&s->urg, 0);
	if (r == -ETIMEDOUT)
		snprintf(err, errlen, "destination did not acknowledge LAYOUT within %d ms",
			 s->o->idle_ms);
	if (!r && h.type == MIG_MSG_ERROR) {
		char text[200]; /* escaped, possibly cut short */
		mig_error_text(p, text, sizeof(text));
		snprintf(err, errlen, "destination refused the migration: %s", text);
		r = -ECONNREFUSED;
	} else if (!r && h.type != MIG_MSG_LAYOUT) {
		snprintf(err, errlen, "urgent channel: expected the LAYOUT acknowledgement, got %s",
			 mig_msg_name(h.type));
		r = -EPROTO;
	}
	return r;
}

/*
 * DONE(0) on bulk: no more precopy pages.  Without precopy it goes before
 * the pause: the destination's bulk receiver has read it by the time STATE
 * comes, so its wake-up is not part of the downtime (it was 0.03-2 ms here).
 * After precopy it must follow PRECOPY_DIRTY, after the pause.
 */
static int send_done0(struct src *s)
{
	struct mig_done done0 = { .phase = 0 };
	return mig_conn_send(&s->bulk, MIG_MSG_DONE, &done0, sizeof(done0), NULL, 0);
}

/*
 * The switch-over: pause, save the state, DONE(0) (after PRECOPY_DIRTY;
 * before the pause without precopy) on bulk and STATE on urgent.  From the pause the downtime runs.  On failure
 * the VM has been resumed here (the destination has no whole state).
 */
static int switch_over(struct src *s, char *err, size_t errlen)
{
	struct mig_source_vm *vm = s->vm;
	if (no_more_cancel(s))
		return cancelled(s, err, errlen);
	if (vm->stopped && vm->stopped(vm->ctx)) /* the guest ended during precopy */
		return give_up(s, "the VM stopped at the source before the switch-over", err,
			       errlen);
	set_phase(s, MIG_PHASE_SWITCHOVER);
	s->t_pause = mig_now_ns();
	s->pause_rt = mig_realtime_ns();
	int r = vm->pause(vm->ctx);
	s->t_paused = mig_now_ns();
	if (r) {
		snprintf(err, errlen, "cannot pause the VM: %s", strerror(-r));
		return r;
	}
	r = vm->save_state(vm->ctx, &s->blob, &s->blob_len);
	s->t_saved = mig_now_ns();
	if (r) {
		snprintf(err, errlen, "cannot save the VM state: %s", strerror(-r));
		vm->resume(vm->ctx);
		return r;
	}
	if (s->o->precopy_rounds)
		r = precopy_finish(s, err, errlen);
	if (!r && s->o->precopy_rounds)
		r = send_done0(s);
	struct mig_state_hdr sh = { .pause_realtime_ns = s->pause_rt, .blob_len = s->blob_len };
	if (!r)
		r = mig_conn_send(&s->urg, MIG_MSG_STATE, &sh, sizeof(sh), s->blob, s->blob_len);
	s->t_state_sent = mig_now_ns();
	/* Off the downtime path: turning the log off rewrites the memslot. */
	if (s->dirty_on)
		vm->dirty_stop(vm->ctx);
	s->dirty_on = 0;
	s->bytes_state = sizeof(sh) + s->blob_len;
	if (r) {
		if (!err[0])
			snprintf(err, errlen, "cannot send the VM state: %s", strerror(-r));
		link_cause(s, err, errlen);
		vm->resume(vm->ctx);
	}
	return r;
}

/* Everything before the switch-over; on failure the VM goes on here. */
static int before_switch(struct src *s, char *err, size_t errlen)
{
	int r =
	    connect_pair(s, 0, mig_now_ns() + (uint64_t)s->o->connect_ms * 1000000ull, err, errlen);
	if (r)
		return r;
	start_watch(s);
	if (s->o->precopy_rounds) {
		set_phase(s, MIG_PHASE_PRECOPY);
		s->dirty_on = 1; /* precopy() turns it on; off on every way out */
		r = precopy(s, err, errlen);
	}
	if (!r && cancel_asked(s))
		r = cancelled(s, err, errlen);
	if (!r)
		r = send_layout(s, err, errlen);
	if (!r && !s->o->precopy_rounds) {
		r = send_done0(s);
		if (r)
			snprintf(err, errlen, "bulk channel: cannot send DONE: %s", strerror(-r));
	}
	if (r && r != -ECANCELED)
		link_cause(s, err, errlen);
	return r;
}

static void src_free(struct src *s)
{
	if (s->dirty_on) /* a failed precopy, pause or state save: logging off */
		s->vm->dirty_stop(s->vm->ctx);
	stop_watch(s);
	mig_conn_close(&s->urg);
	mig_conn_close(&s->bulk);
	mig_tls_ctx_free(s->tls);
	mig_auth_wipe(s->secret, sizeof(s->secret));
	free(s->blob);
	free(s->precopy_carry);
	free(s->sent);
	mig_stamps_free(s->stamps);
	mig_spin_destroy(&s->spin);
	free(s);
}

/* A migration that failed before it had a struct src (bad options). */
static void failed_early(const struct mig_opts *o, const char *err)
{
	if (!o->ctl)
		return;
	snprintf(o->ctl->error, sizeof(o->ctl->error), "%s", err);
	__atomic_store_n(&o->ctl->phase, MIG_PHASE_FAILED, __ATOMIC_RELEASE);
	if (o->ctl->phase_changed)
		o->ctl->phase_changed(o->ctl->arg, MIG_PHASE_FAILED);
}

int mig_source_run(struct mig_source_vm *vm, const struct mig_opts *opts, int *switched, char *err,
		   size_t errlen)
{
	struct mig_opts o = *opts;
	mig_opts_defaults(&o);
	*switched = 0;
	err[0] = 0;
	struct src *s = src_new(vm, &o, err, errlen);
	if (!s) {
		failed_early(&o, err);
		return -EINVAL;
	}
	if (o.ctl) {
		ctl_put(&o.ctl->t_start_ns, s->t_start);
		ctl_put(&o.ctl->pages_total, s->nr_pages);
	}
	set_phase(s, MIG_PHASE_SETUP);
	int r = before_switch(s, err, errlen);
	if (!r)
		r = switch_over(s, err, errlen);
	if (!r) {
		*switched = 1;
		set_phase(s, MIG_PHASE_POSTCOPY);
		s->t_push_start = mig_now_ns();
		r = run_postcopy(s, err, errlen);
		if (o.progress && r == 0)
			mig_progress("migrate: complete 100%%  %llu pages  %llu demand  %llu "
				     "pushed  %.1f ms",
				     (unsigned long long)s->nr_pages,
				     (unsigned long long)s->pages_demand,
				     (unsigned long long)s->pages_pushed,
				     (double)(s->t_complete - s->t_start) / 1e6);
		if (o.progress)
			mig_progress_end();
		if (r == 0)
			write_report(s);
	}
	if (r == 0)
		set_phase(s, MIG_PHASE_COMPLETED);
	else if (!*switched && cancel_asked(s)) {
		set_phase(s, MIG_PHASE_CANCELLED);
	} else {
		if (o.ctl)
			snprintf(o.ctl->error, sizeof(o.ctl->error), "%s", err);
		set_phase(s, MIG_PHASE_FAILED);
	}
	src_free(s);
	return r;
}
