/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The source side of postcopy, inside the library: struct src and the
 * functions its files call in each other (prefixed src_); not an interface
 * (the API is migrate/migrate.h: mig_source_run(), mig_ctl_cancel()).
 *
 * The source connects two channels, optionally runs precopy rounds, pauses
 * the VM, sends LAYOUT and STATE, then serves page requests on the urgent
 * channel while the bulk channel pushes every other page, until the
 * destination says COMPLETE.  A broken link after the switch-over is
 * retried until the recovery deadline (the destination keeps listening).
 * One job per file, in layers: a file calls only into files below it
 * (tests/host/arch-map.sh checks the order of docs/architecture.md).
 *   source-api.c      the API's lifecycle: mig_source_run(), src_new(),
 *                     src_free(), the postcopy loop, an early failure
 *   source-urgent.c   the urgent thread: PAGE_REQUEST answered, RUNNING,
 *                     COMPLETE believed or not, hints for the pusher
 *   source-recover.c  a link broken after the switch-over: reconnect, RESUME,
 *                     resend what the destination lacks
 *   source-switch.c   the switch-over: LAYOUT, DONE(0), the pause, STATE,
 *                     and everything before it
 *   source-precopy.c  precopy rounds: the dirty log, convergence, the dirty
 *                     pages carried into PRECOPY_DIRTY
 *   source-session.c  connections: the TLS client, connect, HELLO, AUTH,
 *                     both channels of a pair
 *   source-watch.c    liveness: the source's hooks for the link watchdog
 *                     (link.c: heartbeats out, silence in)
 *   source-push.c     the pusher: page encoding, batches, io_uring, pacing,
 *                     which page next (hints first, then in order); one
 *                     push thread per bulk channel
 *   source-prepage.c  adaptive pre-paging: the window a fault opens
 *   source-channels.c the bulk channels (--channels, s->links: channels.h):
 *                     each one's share of RAM
 *   source-report.c   progress out: struct mig_ctl's figures and phase, the
 *                     progress line, the downtime, the metrics
 *   source.c          breaking the link, stopping, cancelling, giving up;
 *                     the control requests of struct mig_ctl
 *
 * Threads after the switch-over:
 *   urgent  reads PAGE_REQUEST, answers each page not sent yet on the same
 *           channel, leaves a hint for the pusher (adaptive pre-paging);
 *   push    one per bulk channel: walks the pages of its channel's share
 *           (hints first: each recent fault's window in its share,
 *           source-prepage.h, then in order) and streams them on its channel,
 *           batched, through io_uring when the kernel has it;
 *   watch   (from the first connection to the end) heartbeats, and a
 *           silent destination is a broken link.
 * The only arbiter of "sent" is the atomic test-and-set on s->sent: a page
 * goes out once, on whichever channel claims it first.  A request for a
 * page that the pusher already claimed is not answered: the page is on its
 * way on the bulk channel, and answering would send it twice.
 *
 * Phases: the caller's struct mig_ctl (o->ctl->phase, enum mig_phase) is
 * the one record of where an outgoing migration is; src_set_phase() writes
 * it, nothing keeps a copy.  QMP's status names in brackets.
 *
 *   NONE -> SETUP -----------> SWITCHOVER -----> POSTCOPY --------> COMPLETED
 *  (none)  (setup)  |      ^   (device: paused,  (postcopy-active)  COMPLETE,
 *                   v      |    state on its     |        ^         every page
 *               PRECOPY ---+    way)             |  link  | RESUME  sent by our
 *               (active)                         | broken |         record
 *                                                v        |
 *                                               RECOVER --+
 *                                               (postcopy-paused)
 *   before the switch-over (SETUP, PRECOPY, SWITCHOVER): a failure -> FAILED,
 *     or CANCELLED when a cancel was asked (only before SWITCHOVER: the
 *     switch-over's compare-exchange refuses later ones); the VM goes on
 *     here, resumed if it was paused;
 *   after it (POSTCOPY, RECOVER): ERROR, a protocol error, a COMPLETE with
 *     pages never sent, recover_ms over -> FAILED (the VM is lost);
 *   cannot start (bad options, address or TLS credentials: no struct src):
 *     NONE -> FAILED (failed_early()).
 *
 * Locking order (a lock on the right is only taken with the ones to its
 * left held, never the other way; the ranks of lock-rank.h, checked in
 * the sanitizer build):
 *
 *   s->live.lock (link_up)
 *     -> s->lock (broken, fatal, complete, why)
 *     -> s->links.urg->tx_lock (a send, net.c) -> its TLS lock (tls.c)
 *   s->links.urg->tx_lock, a bulk channel's tx_lock (a send) -> its TLS lock
 *   s->lock: a leaf (src_set_break() kicks the connections after dropping it)
 *   s->hint.lock (the hints): a leaf
 *
 * Only the watchdog nests: it holds link_lock while it sends a PING and
 * breaks the link (src_set_break()), so that src_set_link_up(s, 0), taken
 * before the connections are closed or set up again, waits for a PING in
 * progress instead of racing it.  That send may wait for the socket, at
 * most idle_ms (mig_conn_set_liveness()).  The watchdog's own lock
 * (link.h) is a leaf, never held while it looks.  Everything else takes
 * one lock at a time, and sends with none of s->lock, s->hint.lock,
 * s->live.lock held.  The bulk channel has one writer at a time (the main thread until
 * the switch-over and during a recovery, the push thread in postcopy): the
 * pusher's batched writes (mig_conn_write(), io_uring) skip its tx_lock.
 */
#ifndef MIGRATE_SOURCE_H
#define MIGRATE_SOURCE_H

#include <liburing.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <zstd.h>

#include "channels.h"
#include "internal.h"
#include "link.h"
#include "lock-rank.h"
#include "metrics.h"
#include "migrate/auth.h"
#include "source-prepage.h"
#include "stamps.h"

#define NHINTS 16
/* Two full PAGE_RUN frames: 256 KiB of pages and their headers. */
#define PUSH_BUF  (2 * MIG_RUN_FRAME_MAX)
#define PUSH_NBUF 2

/* Whether the caller asked for field (start_postcopy, manual_postcopy). */
#define ASKED(s, field) ((s)->o->ctl && __atomic_load_n(&(s)->o->ctl->field, __ATOMIC_ACQUIRE))

/* When each step of the run happened (now_ns()); 0 until it did. */
struct src_times {
	uint64_t t_start, t_pause, t_running, t_complete, t_push_start, t_push_end;
	uint64_t pause_rt; /* the pause on CLOCK_REALTIME, for the destination's clock */
	uint64_t t_paused, t_saved, t_state_sent;
	uint64_t t_progress; /* when the progress line was last written */
};

/*
 * What the run sent and served, for the report and query-migrate
 * (src_publish()).  Each is written by the thread of its path (the push
 * threads atomically), read by the report after they ended.
 */
struct src_counts {
	uint64_t pages_demand, pages_pushed, pages_zero, pages_zstd, pages_precopy,
	    pages_precopy_resent, pages_resent;
	uint64_t pages_pushed_zero; /* of pages_pushed (the push's non-zero rate) */
	uint64_t pages_normal;	    /* sent with their payload, any channel (atomic) */
	uint64_t prepage_pages;	    /* pushed from a window (the push threads, atomic) */
	uint64_t bytes_pages, bytes_state, bytes_total_prev, hdr_total_prev;
	uint64_t req_addrs, req_in_flight, recoveries;
	uint64_t sent_count;  /* atomic */
	uint64_t push_cpu_ns; /* the push threads' CPU time, over recoveries */
	int recoveries_before_running;
};

/* Precopy's rounds (source-precopy.c). */
struct src_precopy {
	int precopy_rounds_done;
	uint64_t precopy_left;	 /* pages the current round has yet to send (atomic) */
	uint64_t precopy_upto;	 /* round 1 sent pages below this (all, unless cut short) */
	uint64_t *precopy_carry; /* dirty pages of the round precopy did not send */
	int dirty_on;		 /* dirty logging is on */
};

/* The rates' last sample: only the watchdog's (source-watch.c). */
struct src_rate {
	uint64_t rate_t, rate_bytes0, rate_pages0;
};

/* The session this source migrates in (source-session.c). */
struct src_session {
	uint64_t id;
	/* Learnt on the session's first urgent connection; proves every later one. */
	uint8_t secret[MIG_SECRET_LEN];
	int have_secret;
	uint32_t attempt; /* connection attempts so far (HELLO.attempt) */
};

/* The faults' hints for the push (source-urgent.c writes, source-push.c reads), under lock. */
struct src_hints {
	pthread_mutex_t lock;
	/* per bulk channel: the windows of the last faults in its share */
	struct src_window win[MIG_MAX_CHANNELS][NHINTS];
	unsigned n[MIG_MAX_CHANNELS];
	struct src_prepage pp; /* the fault history */
};

/* What the destination said after the switch-over (source-urgent.c). */
struct src_heard {
	struct mig_complete complete;
	struct mig_running running;
	int running_seen;
};

/* The VM's state, kept in case the link breaks before it arrived (source-switch.c). */
struct src_state_blob {
	void *blob;
	size_t len;
};

/*
 * The watchdog (link.h, source-watch.c).  lock guards up and the
 * connections' set-up: the watchdog touches s->links only while up.
 */
struct src_liveness {
	pthread_mutex_t lock;
	int up;
	struct mig_link_watch watch;
};

struct src {
	struct mig_source_vm *vm;
	const struct mig_opts *o;
	struct mig_addr sa;
	uint64_t nr_pages;
	uint32_t features;
	struct src_session sess;
	uint64_t *sent;
	struct mig_links links;	 /* o->channels bulk channels; the source's own for the whole run */
	struct mig_tls_ctx *tls; /* NULL: plain TCP */

	pthread_mutex_t lock;
	int broken;   /* link lost: recoverable after the switch-over */
	int fatal;    /* protocol error or peer ERROR: not recoverable */
	int complete; /* COMPLETE received */
	char why[320];
	pthread_cond_t cond; /* with lock: RUNNING came, or the link broke */

	struct src_hints hint;
	struct src_heard heard;
	struct src_times times;
	struct src_counts counts;
	struct src_precopy precopy;
	struct src_rate rate;
	uint32_t push_features;	   /* agreed on the bulk channel when the push began */
	struct mig_stamps *stamps; /* per-request steps (bench) */
	struct src_state_blob state;
	int flush_now; /* a request hit a page waiting in the push buffer */
	struct src_liveness live;
};

/*
 * One pusher's batches, the postcopy push thread's or precopy's (on the
 * main thread): two buffers, so that encoding overlaps sending.
 */
struct pusher {
	struct src *s;
	struct mig_conn *c; /* its bulk channel */
	unsigned k;	    /* which one */
	uint64_t lo, hi;    /* its share of RAM: pages [lo, hi) */
	struct io_uring ring;
	int uring;
	uint8_t *buf[PUSH_NBUF];
	size_t used[PUSH_NBUF];
	int inflight[PUSH_NBUF];
	unsigned cur;
	/* pre-paging window */
	uint64_t pre_next;
	unsigned pre_left;
	int64_t pre_step;
	uint64_t cursor;
	unsigned frames;    /* pages in the current buffer */
	double pace_tokens; /* max_bandwidth: bytes it may push now (below 0: a debt) */
	uint64_t pace_t;    /* when pace_tokens was last refilled; 0: not under a cap */
	ZSTD_CCtx *cctx;    /* its own: one per pusher, never shared between threads */
};

/* A progress figure in the caller's struct mig_ctl (read by another thread). */
static inline void src_ctl_put(uint64_t *field, uint64_t v)
{
	__atomic_store_n(field, v, __ATOMIC_RELAXED);
}

/* source-api.c (the fuzzer builds its sources with src_init()) */
int src_init(struct src *s, struct mig_source_vm *vm, const struct mig_opts *o);

/* source.c */
void src_set_break(struct src *s, int fatal, const char *why);
int src_stopped(struct src *s);
void src_link_cause(struct src *s, char *err, size_t errlen);
int src_cancel_asked(struct src *s);
/*
 * Waiting for a caller's request (struct mig_ctl's asked): read the count
 * with src_ctl_seen() before looking at the requests, then sleep in
 * src_ctl_wait() until a later request or ms pass (what no request
 * announces, such as the VM's end or a broken link, is seen at the next
 * look).
 */
#define SRC_CTL_LOOK_MS 100
uint32_t src_ctl_seen(const struct mig_ctl *c);
void src_ctl_wait(struct mig_ctl *c, uint32_t seen, int ms);
int src_no_more_cancel(struct src *s);
int src_give_up(struct src *s, const char *why, char *err, size_t errlen);
int src_cancelled(struct src *s, char *err, size_t errlen);

/* source-session.c */
int src_tls_client(struct src *s, char *err, size_t errlen);
int src_connect_pair(struct src *s, int recover, uint64_t deadline, char *err, size_t errlen);

/* source-watch.c */
void src_set_link_up(struct src *s, int up);
void src_start_watch(struct src *s);
void src_stop_watch(struct src *s);

/* source-precopy.c */
int src_precopy(struct src *s, char *err, size_t errlen);
int src_precopy_finish(struct src *s, char *err, size_t errlen);

/* source-switch.c */
void src_layout(struct src *s, struct mig_layout *l);
int src_send_done0(struct src *s);
int src_before_switch(struct src *s, char *err, size_t errlen);
int src_switch_over(struct src *s, char *err, size_t errlen);

/* source-urgent.c */
uint64_t src_count_sent(struct src *s);
int src_urgent_frame(struct src *s, const struct mig_frame_hdr *h, const uint8_t *p, uint8_t *buf);
void *src_urgent_thread(void *arg);

/* source-push.c */
void src_wait_running(struct src *s);
size_t src_put_page(struct src *s, struct mig_conn *c, uint8_t *buf, uint64_t i, uint16_t flags,
		    ZSTD_CCtx **cctx);
int src_pusher_init(struct pusher *ps, struct src *s);
void src_pusher_free(struct pusher *ps);
int src_push_page(struct pusher *ps, uint64_t i, uint16_t flags);
int src_drain(struct pusher *ps);
unsigned src_start_push(struct src *s, pthread_t *t);

/* source-channels.c */
void src_share(const struct src *s, unsigned k, uint64_t *lo, uint64_t *hi);
unsigned src_owner(const struct src *s, uint64_t i);

/* source-recover.c */
int src_recover_link(struct src *s, char *err, size_t errlen);

/* source-report.c */
uint64_t src_tx_bytes(struct src *s);
void src_publish(struct src *s);
void src_set_phase(struct src *s, enum mig_phase phase);
void src_progress(struct src *s, const char *phase);
void src_write_report(struct src *s);

#endif /* MIGRATE_SOURCE_H */
