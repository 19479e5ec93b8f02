/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The destination side of postcopy, inside the library: struct mig_dest and
 * the functions its files call in each other (prefixed dest_); not an
 * interface (the API is migrate/migrate.h).  One job per file, in layers:
 * a file calls only into files below it (tests/host/arch-map.sh checks
 * the order of docs/architecture.md), so no two call each other.
 *
 *   dest-api.c       the API's lifecycle: listen, resume, pause, abort,
 *                    status, wait, free
 *   dest-incoming.c  mig_dest_incoming(): the staging buffer, LAYOUT, the
 *                    precopy's end, STATE
 *   dest-recover.c   link breaks: RESUME, repeated requests, the supervisor
 *   dest-accept.c    listening: one handshake thread per connection (TLS,
 *                    HELLO, AUTH), the session claim, pairs of channels
 *   dest-channels.c  the link d->links (channels.h, the source's --channels):
 *                    a receiver thread per bulk channel
 *   dest-fault.c     the demand path on the RAM's fault thread: requests
 *                    out, replies in and installed (the page source)
 *   dest-watch.c     liveness: the destination's hooks for the link watchdog
 *                    (link.c), and what counts as no progress
 *   dest-rx.c        frames from the source: the bulk receiver thread, and
 *                    the urgent channel's frames on the fault thread;
 *                    precopy pages staged, postcopy pages batched into runs
 *   dest-install.c   the page record's use (it is the RAM's, ram/record.h):
 *                    claims, the stager, completion
 *   dest-report.c    COMPLETE's counters, the arrival timeline, the metrics
 *   dest-phase.c     the phase (enum dest_phase): its only writer, the
 *                    transitions allowed, failing, the stop request, DONE(0)
 *   dest.c           the links' small operations: kick, ERROR, free
 *
 * Locking order (a lock on the right is only taken with the ones to its
 * left held, never the other way; the ranks of lock-rank.h):
 *
 *   d->loop.lock (the urgent channel while the fault thread reads it)
 *     -> d->lock (the phase's writes, why, session, claims, handshake slots,
 *                 pending channels; cond; a failure reported from a frame the loop read)
 *       -> a pending connection's TLS lock (closing it, tls.c)
 *     -> d->req_lock (which connections are live: links, link_ok)
 *       -> c->tx_lock (a send, net.c) -> its TLS lock (tls.c)
 *     -> d->lat_lock (the fault latencies): a leaf
 *   the link watchdog's own lock (link.h): a leaf, never held while it looks
 *
 * The sanitizer build checks this order on every lock (lock-rank.h).
 * d->lock and d->req_lock are never held together: code that needs both
 * takes one, drops it, then takes the other.  Under d->lock nothing waits
 * on the network but the close of a pending connection (one try at a TLS
 * close_notify, dest_stop_accepting()); a send under d->req_lock may wait
 * for the socket (the watchdog breaks a link that stalls it).
 */
#ifndef MIGRATE_DEST_H
#define MIGRATE_DEST_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "channels.h"
#include "internal.h"
#include "link.h"
#include "lock-rank.h"
#include "metrics.h"
#include "migrate/auth.h"
#include "ram/backend.h"
#include "ram/ram.h"
#include "ram/record.h"
#include "stamps.h"

/* Handshake slots and session claims: see dest-accept.c. */
#define DEST_FRESH_SLOTS 32
/* Handshake threads at once, fresh and proven (dest-accept.c). */
#define DEST_MAX_HS_THREADS (DEST_FRESH_SLOTS + 8)
#define DEST_PROVEN_SLOTS   16
#define DEST_MAX_CLAIMS	    8
#define DEST_MAX_LISTENERS  4 /* migrate-recover's addresses per migration */

struct hs_slot {
	int fd;	      /* -1: free */
	uint64_t gen; /* which handshake holds it */
	uint64_t t0;  /* when it was accepted */
};

/*
 * The authenticated channels of one session's connection attempt, pending
 * until the urgent channel and all nr_bulk bulk channels are there.
 */
struct dest_pending {
	struct mig_links links; /* links.nr_bulk: its HELLO.nr_bulk (0: no channel pending) */
	uint32_t attempt;	/* the source's connection attempt they belong to */
};

/*
 * A session claimed by an urgent HELLO and not fixed yet (no pair taken):
 * its own secret and pending channels.  Free when claimed_ns is 0.
 */
struct dest_claim {
	uint64_t session, claimed_ns, gen;
	uint32_t features;
	uint8_t secret[MIG_SECRET_LEN];
	struct dest_pending pend;
};

/*
 * A run of consecutive pages of one kind received together on one channel,
 * claimed (INSTALLING) and copied to a page-aligned buffer (or a run of
 * zero pages, nothing copied), installed with one call into the kernel
 * (ram_install_claimed()) when the run is full, when a page that does not
 * extend it arrives, and always before the receiver may block: a faulting
 * vCPU never waits on a run for more than the frames already received.
 */
#define RUN_MAX 32
_Static_assert(RUN_MAX >= MIG_MAX_RUN_PAGES, "a PAGE_RUN fits a run");
_Static_assert(RUN_MAX <= 64, "a run's zero pages fit struct run's zeros");

struct run {
	uint8_t *buf; /* RUN_MAX pages, private anonymous */
	/*
	 * The bulk receiver's: a PAGE_RUN's pages land here (RUN_MAX pages,
	 * private anonymous) and are installed from here.  NULL on the urgent
	 * channel, which carries no PAGE_RUN.
	 */
	uint8_t *direct;
	uint64_t first;
	unsigned n;
	int zero; /* a run of zero pages (nothing in buf) */
	/* A run of data: its zero pages, filled with zeros in buf (bit k for page first + k). */
	uint64_t zeros;
	enum ram_arrival by;   /* every page's */
	uint64_t old[RUN_MAX]; /* the record's words the claims replaced */
};

/* The destination's own threads besides the acceptor and the handshakes. */
struct dest_workers {
	pthread_t sup, stager;
	int sup_on, stager_on;
	pthread_t rx[MIG_MAX_CHANNELS]; /* bulk[k]'s receiver, while rx_on[k] */
	int rx_on[MIG_MAX_CHANNELS];
};

/*
 * Who may join the migration (dest-accept.c).  Until a pair was taken, the
 * sessions claimed (each its secret and pending channels); then the
 * session, its secret (session_gen: the claim it was), the pending
 * channels of its reconnections.  Connections being authenticated: hs[]
 * (DEST_FRESH_SLOTS, then DEST_PROVEN_SLOTS).  All under the
 * destination's lock (its cond signals).
 */
struct dest_admission {
	struct dest_claim claims[DEST_MAX_CLAIMS];
	int session_fixed;
	uint64_t session_gen, claim_gen;
	uint8_t secret[MIG_SECRET_LEN];
	struct dest_pending pend;
	pthread_t acceptor;
	int acceptor_on, handshakes;		 /* handshake threads started and not yet joined */
	pthread_t hs_ended[DEST_MAX_HS_THREADS]; /* of those, the ones that ended */
	int nr_hs_ended;
	struct hs_slot hs[DEST_FRESH_SLOTS + DEST_PROVEN_SLOTS];
	uint64_t hs_gen, evicted, refused, refused_at_log, refused_logged_ns;
};

/*
 * The destination's phase: one record, d->phase.  Who moves it (each
 * transition under d->lock, through dest_phase_enter() or
 * dest_phase_break(), which refuse and log any other):
 *
 *   LISTENING --first pair (dest-accept.c fix_session())--> PRECOPY
 *   PRECOPY --STATE (dest-incoming.c wait_bulk_done())--> SWITCHING
 *   SWITCHING --vCPUs run (dest-api.c mig_dest_resumed())--> POSTCOPY
 *   POSTCOPY --every page here (dest-install.c send_complete())--> COMPLETING
 *   COMPLETING --COMPLETE sent--> COMPLETE;  --the send failed--> POSTCOPY
 *
 *   a break (dest_phase_break(): dest-rx.c rx_failed(), dest-watch.c
 *   release_link(), dest-api.c mig_dest_pause(), the supervisor when the
 *   source reconnected) moves the phase to its broken twin:
 *     PRECOPY -> PRECOPY_BROKEN --new pair (dest_reset_before_state())--> PRECOPY
 *     SWITCHING -> SWITCHING_BROKEN --vCPUs run--> RECOVERING
 *     PRECOPY_BROKEN --STATE--> SWITCHING_BROKEN (the urgent channel was whole)
 *     POSTCOPY -> RECOVERING --reconnected (dest-recover.c)--> POSTCOPY
 *     COMPLETING -> COMPLETING_BROKEN --sent--> COMPLETE, --not sent--> RECOVERING
 *   a break in a broken phase, COMPLETE or FAILED changes nothing;
 *
 *   any phase but COMPLETE --dest_fail() (an error, mig_dest_abort(), no
 *   reconnection within recover_ms)--> FAILED
 *
 * COMPLETE and FAILED are terminal: a late event (a failure after COMPLETE
 * went out, the vCPUs resumed after a failure) is ignored, not a bug.
 * Readers outside d->lock (dest_phase(), an acquire load) may assume:
 * FAILED and COMPLETE never change; a phase past SWITCHING_BROKEN means
 * the vCPUs ran.  Anything else may change under them: they act on it as
 * a hint (end a loop, skip a scan), or take d->lock.  d->why is written
 * before the phase it explains, but a failure rewrites a break's cause:
 * read it under d->lock.
 *
 * Not phases, kept apart (dest-phase.c writes them too):
 *   stop   a request to end (mig_dest_abort(), mig_dest_free(), a failed
 *          mig_dest_incoming()): threads end on it in any phase, and the
 *          phase still says how the migration ended;
 *   done0  DONE(0) came on bulk channel 0: the position of one stream,
 *          not of the migration (it comes before or after STATE, which
 *          the urgent channel carries); a break before STATE clears it.
 */
enum dest_phase {
	DEST_LISTENING,	       /* no pair of channels taken yet */
	DEST_PRECOPY,	       /* staging precopy pages, until STATE */
	DEST_PRECOPY_BROKEN,   /* the link broke before STATE: a new pair asks for it again */
	DEST_SWITCHING,	       /* STATE came: waiting for DONE(0), loading, until resumed */
	DEST_SWITCHING_BROKEN, /* the link broke after STATE: recovered once the vCPUs run */
	DEST_POSTCOPY,	       /* the vCPUs run: faults and the push, until every page is here */
	DEST_RECOVERING,       /* postcopy with a broken link: waiting for the source */
	/*
	 * From here on the receivers and the watchdog end (dest_phase_over());
	 * the supervisor waits for COMPLETE or FAILED, as a failed send of
	 * COMPLETE falls back.
	 */
	DEST_COMPLETING,	/* every page is here: one thread is sending COMPLETE */
	DEST_COMPLETING_BROKEN, /* a break while it was being sent */
	DEST_COMPLETE,		/* COMPLETE went out */
	DEST_FAILED,		/* d->why says why */
	DEST_NR_PHASES
};

/* COMPLETE sent or being sent, or failed: the migration's links are no longer read. */
static inline bool dest_phase_over(enum dest_phase ph)
{
	return ph >= DEST_COMPLETING;
}

/* A broken link, waiting for the source to reconnect (or for COMPLETE's send). */
static inline bool dest_phase_broken(enum dest_phase ph)
{
	return ph == DEST_PRECOPY_BROKEN || ph == DEST_SWITCHING_BROKEN || ph == DEST_RECOVERING ||
	       ph == DEST_COMPLETING_BROKEN;
}

/* When each step of the migration happened here (now_ns()); 0 until it did. */
struct dest_times {
	uint64_t t_link_ns; /* when the current link was set up (under req_lock) */
	uint64_t t_state_rx, t_phase0;
	uint64_t t_start, t_state, t_resumed, pause_rt, resume_rt, t_done, t_broken_ns;
};

/* What came and what was asked, for the report. */
struct dest_counts {
	uint64_t pages_dup, faults, req_sent; /* atomic */
	uint64_t recoveries, bytes_rx_prev;
	uint64_t bulk_rx_cpu_ns; /* atomic: the bulk receivers' CPU time, over recoveries */
};

/*
 * Where the destination listens: the address it was given (lfd), and the
 * listeners migrate-recover added (mig_dest_listen_more()), polled by the
 * acceptor beside it: written under d->lock before nr_more is raised
 * (release), closed only by mig_dest_free().
 */
struct dest_listeners {
	int fd;
	int more[DEST_MAX_LISTENERS];
	int nr_more;
	int recover_asked; /* a listener was added since the last break (under d->lock) */
};

/*
 * The urgent channel as the RAM's fault thread reads it (dest-fault.c):
 * conn NULL while it must not (before the resume, a broken link), under
 * lock.  Its own run of pages being gathered.
 */
struct dest_loop {
	pthread_mutex_t lock;
	struct mig_conn *conn;
	struct run run;
};

struct mig_dest {
	struct mig_opts o;
	struct mig_addr sa;
	struct dest_listeners listen;
	struct mig_tls_ctx *tls; /* NULL: plain TCP */
	struct mig_dest_vm *vm;
	/*
	 * The page record is the RAM's (ram/record.h): where each page is, how
	 * and when it came.  This side keeps transport state only.
	 */
	struct ram *ram;
	uint64_t nr_pages, session;
	uint32_t features;
	/*
	 * Precopy pages wait here, at their RAM offset, until the switch-over
	 * (STAGED in the record).  A zero page is only a flag in the record:
	 * writing 4 KiB of zeros here faults a page in (~7 us each), and the
	 * precopy of a mostly empty guest is mostly zero markers.
	 */
	uint8_t *stage;
	struct mig_stamps *stamps; /* per-fault steps (bench) */

	struct dest_loop loop;

	/*
	 * req_lock guards which connections are live (links, link_ok).
	 * bulk[k] is bulk channel k (wire.h "Channels"); bulk[0] alone also
	 * carries precopy, PRECOPY_DIRTY and DONE(0).
	 */
	pthread_mutex_t req_lock;
	struct mig_links links;
	int link_ok;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	/*
	 * Written only by dest-phase.c, under lock (each change broadcasts
	 * cond); read anywhere with dest_phase(), dest_stopping(),
	 * dest_done0().  The diagram: enum dest_phase.
	 */
	enum dest_phase phase;
	int stop, done0;
	char why[320]; /* under lock: the break's or the failure's cause */

	struct dest_workers workers;
	struct mig_link_watch watch; /* link.h, dest-watch.c */

	struct dest_admission admission;

	struct dest_times times;
	struct dest_counts counts;
	pthread_mutex_t lat_lock;
	struct mig_lat lat;
};

/* The monotonic clock ms from now, for pthread_cond_timedwait() on d->cond. */
static inline struct timespec dest_mono_in_ms(unsigned ms)
{
	return mig_mono_ts(now_ns() + ms * 1000000ull);
}

/* dest.c */
void dest_kick_links(struct mig_dest *d);
void dest_send_error(struct mig_conn *c, uint32_t code, const char *msg);
void dest_free_conn(struct mig_conn *c);
void dest_free_conns(struct mig_conn **c, unsigned n);
void dest_links_free(struct mig_dest *d);

/* dest-phase.c */
const char *dest_phase_name(enum dest_phase ph);
/* QEMU's status of a phase (its row in dest-phase.c). */
enum mig_phase dest_phase_status(enum dest_phase ph);
enum dest_phase dest_phase(struct mig_dest *d);
bool dest_phase_enter(struct mig_dest *d, enum dest_phase to);
bool dest_phase_break(struct mig_dest *d, const char *why);
bool dest_stopping(struct mig_dest *d);
void dest_request_stop(struct mig_dest *d);
bool dest_done0(struct mig_dest *d);
void dest_set_done0(struct mig_dest *d, bool done);
void dest_fail(struct mig_dest *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* dest-accept.c */
int dest_start_accepting(struct mig_dest *d, char *err, size_t errlen);
void dest_stop_accepting(struct mig_dest *d);
int dest_accept_pair(struct mig_dest *d, uint64_t deadline, struct mig_links *l, char *err,
		     size_t errlen);
int dest_pending_complete(const struct mig_dest *d);

/* dest-channels.c */
void dest_start_receivers(struct mig_dest *d);
void dest_join_receivers(struct mig_dest *d);

/* dest-incoming.c */
int dest_incoming_alloc(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen);
void dest_incoming_free(struct mig_dest *d);

/* dest-rx.c */
int dest_flush_run(struct mig_dest *d, struct run *run);
int dest_rx_ready(struct mig_dest *d, struct mig_conn *c, struct run *run);
int dest_rx_frame(struct mig_dest *d, struct mig_conn *c, struct run *run,
		  const struct mig_frame_hdr *h, const uint8_t *p, char *err, size_t errlen);
void dest_rx_loop(struct mig_dest *d, struct mig_conn *c);

/* dest-install.c */
uint64_t dest_count_state(struct mig_dest *d, enum ram_page_state st);
uint64_t dest_pages_owed(struct mig_dest *d);
void dest_try_complete(struct mig_dest *d);
bool dest_claim_page(struct mig_dest *d, uint64_t i, enum ram_arrival by, uint64_t *old);
void dest_installed(struct mig_dest *d, uint64_t i, uint64_t old, uint64_t now);
void dest_after_installs(struct mig_dest *d);
int dest_install_run(struct mig_dest *d, uint64_t first, unsigned n, void *data,
		     const uint64_t *zeros, enum ram_arrival by, const uint64_t *old);
int dest_install_staged(struct mig_dest *d, uint64_t i);
void *dest_stager_thread(void *arg);

/* dest-fault.c */
void dest_loop_attach(struct mig_dest *d, struct mig_conn *urg);
void dest_loop_detach(struct mig_dest *d);

/* dest-recover.c */
void dest_send_running(struct mig_dest *d, struct mig_conn *urg);
void *dest_supervisor_thread(void *arg);
void dest_forget_staged(struct mig_dest *d);
void dest_reset_before_state(struct mig_dest *d);
int dest_incoming_reconnect(struct mig_dest *d, char *err, size_t errlen);

/* dest-watch.c */
int dest_start_watch(struct mig_dest *d);

/* dest-report.c */
/* COMPLETE from one scan of the record: false (m untouched) unless every page is present. */
bool dest_fill_complete(struct mig_dest *d, struct mig_complete *m);

#endif /* MIGRATE_DEST_H */
