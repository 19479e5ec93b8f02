// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's listening socket: every connection gets its own
 * handshake thread (TLS, then HELLO and AUTH with session.c's steps, the
 * same as the source's), a new session is claimed by the first urgent
 * HELLO, and authenticated channels wait as a pending pair until
 * dest_accept_pair() takes them (the first pair, or a reconnection).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dest.h"
#include "session.h"

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
/*
 * An evicted handshake's thread lives on until it sees its socket shut
 * down and has refused the stranger; on a loaded host hundreds of them
 * piled up under a churning flood (218 threads seen).  The acceptor waits
 * (the connections stay in the listen backlog) while this many run.
 */
#define MAX_HANDSHAKE_THREADS (MAX_HANDSHAKES + MAX_HANDSHAKES / 2)

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
	c->wire.ram_size = d->ram->size;
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

/* Every pending channel into drop[MIG_MAX_CHANNELS + 1], none left (under d->lock). */
static void take_pending(struct mig_dest *d, struct mig_conn **drop)
{
	drop[0] = d->pend_urg;
	drop[1] = d->pend_bulk;
	d->pend_urg = d->pend_bulk = NULL;
	for (unsigned k = 0; k < MIG_MAX_CHANNELS - 1; k++) {
		drop[k + 2] = d->pend_more[k];
		d->pend_more[k] = NULL;
	}
	d->pend_nr_bulk = 0;
}

/* The pending channel slot for c's channel: urgent, bulk 0, or bulk index. */
static struct mig_conn **pending_slot(struct mig_dest *d, uint16_t channel, uint16_t index)
{
	if (channel == MIG_CHAN_URGENT)
		return &d->pend_urg;
	return index ? &d->pend_more[index - 1] : &d->pend_bulk;
}

/* Whether the urgent channel and all bulk channels of one attempt are pending (under d->lock). */
int dest_pending_complete(const struct mig_dest *d)
{
	if (!d->pend_urg || !d->pend_bulk)
		return 0;
	for (unsigned k = 0; k + 1 < d->pend_nr_bulk; k++)
		if (!d->pend_more[k])
			return 0;
	return 1;
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
	d->features = MIG_FEAT_KNOWN & ~d->o.features_off & m->features;
	take_pending(d, drop);
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

/* What a connection's HELLO made it: its session, connection attempt and channel. */
struct hs_result {
	uint64_t session;
	uint32_t attempt;
	uint16_t channel, bulk_index, nr_bulk;
};

/* HELLO back, then the secret (a new session) or the proofs both ways. */
static int answer_hello(struct mig_dest *d, struct mig_hs *hs, const struct mig_hello *m, int owner,
			uint32_t features, char *why, size_t len)
{
	hs->channel = m->channel;
	hs->nr_bulk = m->nr_bulk;
	hs->bulk_index = m->bulk_index;
	hs->session = m->session_id;
	int r = mig_hs_send_hello(hs, m->flags & MIG_HELLO_RECOVER, d->ram->size, features,
				  m->attempt, why, len);
	if (!r)
		r = owner ? mig_hs_send_secret(hs, why, len) : mig_hs_mutual(hs, why, len);
	return r;
}

/* HELLO and AUTH on a new connection; 0 when it is an authenticated channel. */
static int handshake(struct mig_dest *d, struct mig_conn *c, struct hs_result *res, char *why,
		     size_t len)
{
	struct mig_conn *drop[MIG_MAX_CHANNELS + 1] = { NULL };
	uint8_t secret[MIG_SECRET_LEN];
	struct mig_hs hs = { .c = c, .role = MIG_ROLE_DEST, .secret = secret, .tag = "" };
	struct mig_hello m;
	int r = mig_hs_recv_hello(&hs, &m, why, len);
	if (r)
		return r;
	mig_lock(&d->lock, MIG_RANK_DEST);
	int owner = classify_hello(d, &m, drop, why, len);
	uint32_t features = d->features;
	memcpy(secret, d->secret, sizeof(secret));
	mig_unlock(&d->lock);
	dest_free_conns(drop, MIG_MAX_CHANNELS + 1);
	if (owner >= 0) {
		/* The session's, less what this connection cannot have (plain TCP: the CRC). */
		c->wire.features &= features;
		r = answer_hello(d, &hs, &m, owner, c->wire.features, why, len);
	}
	mig_auth_wipe(secret, sizeof(secret));
	if (owner < 0 || r)
		return owner < 0 ? owner : r;
	*res = (struct hs_result){ .session = m.session_id,
				   .attempt = m.attempt,
				   .channel = m.channel,
				   .bulk_index = m.bulk_index,
				   .nr_bulk = m.nr_bulk };
	c->wire.frame_limit = 0;
	c->name = m.channel == MIG_CHAN_URGENT ? "urgent" : mig_bulk_name(m.bulk_index);
	mig_conn_set_liveness(c, d->o.idle_ms);
	mig_conn_set_deadline(c, 0);
	mig_conn_set_rcvtimeo(c, 0);
	return 0;
}

/*
 * An authenticated channel of the source's connection attempt: pending
 * until the urgent channel and all HELLO.nr_bulk bulk channels of the same
 * attempt arrived.  A later attempt replaces whatever an earlier one left;
 * a channel of an earlier attempt, or of a session claim that gave way, is
 * dropped, and one whose nr_bulk differs from its attempt's is refused.
 */
static void offer(struct mig_dest *d, struct mig_conn *c, const struct hs_result *res)
{
	struct mig_conn *drop[MIG_MAX_CHANNELS + 2] = { NULL };
	struct mig_conn *refused = NULL;
	uint32_t attempt = res->attempt;
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (res->session != d->session) {
		drop[0] = c;
	} else {
		if (attempt > d->pend_attempt || !d->pend_nr_bulk) {
			take_pending(d, drop);
			d->pend_attempt = attempt;
			d->pend_nr_bulk = res->nr_bulk;
		}
		if (attempt != d->pend_attempt) {
			drop[MIG_MAX_CHANNELS + 1] = c; /* left over from an earlier attempt */
		} else if (res->nr_bulk != d->pend_nr_bulk) {
			refused = c;
		} else {
			struct mig_conn **slot = pending_slot(d, res->channel, res->bulk_index);
			drop[MIG_MAX_CHANNELS + 1] = *slot;
			*slot = c;
			pthread_cond_broadcast(&d->cond);
		}
	}
	unsigned want = d->pend_nr_bulk;
	mig_unlock(&d->lock);
	dest_free_conns(drop, MIG_MAX_CHANNELS + 2);
	if (refused) {
		char why[120];
		snprintf(why, sizeof(why),
			 "%s channel: %u bulk channels, its attempt's others said %u",
			 refused->name, res->nr_bulk, want);
		dest_send_error(refused, MIG_ERR_PROTOCOL, why);
		pr_mig("refused a connection: %s\n", why);
		dest_free_conn(refused);
	}
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
	mig_lock(&d->lock, MIG_RANK_DEST);
	uint64_t now = mig_now_ns(), n = ++d->refused;
	int log = n <= REFUSE_LOG_BURST || now - d->refused_logged_ns >= REFUSE_LOG_NS;
	uint64_t more = n - d->refused_at_log - 1;
	if (log) {
		d->refused_logged_ns = now;
		d->refused_at_log = n;
	}
	mig_unlock(&d->lock);
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
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (d->hs[a->slot].gen == a->gen)
		d->hs[a->slot].fd = -1; /* else it was evicted and given to another */
	mig_unlock(&d->lock);
	if (r && c)
		refuse(d, c, r, tls_failed, why);
	else if (c)
		offer(d, c, &res);
	mig_auth_thread_cleanup(); /* again: closing a TLS session used OpenSSL */
	mig_wire_thread_cleanup();
	mig_lock(&d->lock, MIG_RANK_DEST);
	d->handshakes--;
	pthread_cond_broadcast(&d->cond);
	mig_unlock(&d->lock);
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
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (d->handshakes >= MAX_HANDSHAKE_THREADS && !d->stop) {
		struct timespec ts = dest_mono_in_ms(100);
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	}
	int slot = take_slot(d);
	*a = (struct hs_arg){
		.d = d, .fd = fd, .slot = slot, .gen = ++d->hs_gen, .t0 = mig_now_ns()
	};
	d->hs[slot] = (struct hs_slot){ .fd = fd, .gen = a->gen, .t0 = a->t0 };
	d->handshakes++;
	mig_unlock(&d->lock);
	if (pthread_create(&t, NULL, handshake_thread, a) == 0) {
		pthread_detach(t);
		return;
	}
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (d->hs[slot].gen == a->gen)
		d->hs[slot].fd = -1;
	d->handshakes--;
	mig_unlock(&d->lock);
	free(a);
	close(fd);
}

static void *acceptor_thread(void *arg)
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

/* Start accepting connections (the acceptor thread); 0, or -errno with err. */
int dest_start_accepting(struct mig_dest *d, char *err, size_t errlen)
{
	for (int k = 0; k < MAX_HANDSHAKES; k++)
		d->hs[k].fd = -1;
	if (pthread_create(&d->acceptor, NULL, acceptor_thread, d)) {
		snprintf(err, errlen, "cannot start the acceptor thread");
		return -EAGAIN;
	}
	d->acceptor_on = 1;
	return 0;
}

/* Stop accepting; end the handshakes in progress and wait for them. */
void dest_stop_accepting(struct mig_dest *d)
{
	if (d->acceptor_on)
		pthread_join(d->acceptor, NULL);
	d->acceptor_on = 0;
	mig_lock(&d->lock, MIG_RANK_DEST);
	for (int k = 0; k < MAX_HANDSHAKES; k++)
		if (d->hs[k].fd >= 0)
			shutdown(d->hs[k].fd, SHUT_RDWR);
	while (d->handshakes)
		pthread_cond_wait(&d->cond, &d->lock);
	struct mig_conn *drop[MIG_MAX_CHANNELS + 1];
	take_pending(d, drop);
	dest_free_conns(drop, MIG_MAX_CHANNELS + 1);
	mig_unlock(&d->lock);
}

/*
 * Take an authenticated set of channels: the urgent one, and the bulk
 * channels into bulk[MIG_MAX_CHANNELS] (*nr_bulk of them, NULL after),
 * waiting until deadline (0: forever, until stopped).  0, or a negative
 * errno with a message.  The first set fixes the session.
 */
int dest_accept_pair(struct mig_dest *d, uint64_t deadline, struct mig_conn **urg,
		     struct mig_conn **bulk, unsigned *nr_bulk, char *err, size_t errlen)
{
	int r = 0;
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (!dest_pending_complete(d) && !d->stop && !d->failed) {
		if (!deadline) {
			pthread_cond_wait(&d->cond, &d->lock);
			continue;
		}
		struct timespec ts = mig_mono_ts(deadline);
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) == ETIMEDOUT)
			break;
	}
	if (dest_pending_complete(d)) {
		struct mig_conn *all[MIG_MAX_CHANNELS + 1];
		*nr_bulk = d->pend_nr_bulk;
		take_pending(d, all);
		*urg = all[0];
		for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++)
			bulk[k] = all[k + 1];
		d->session_fixed = 1;
	} else if (d->failed) {
		snprintf(err, errlen, "%s", d->why);
		r = -ECANCELED;
	} else {
		snprintf(err, errlen,
			 d->stop ? "stopped" : "no source connected within the deadline");
		r = d->stop ? -ECANCELED : -ETIMEDOUT;
	}
	mig_unlock(&d->lock);
	return r;
}
