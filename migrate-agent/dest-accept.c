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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dest.h"
#include "session.h"

/*
 * Every accepted connection gets its own short-lived handshake thread: TLS
 * (when asked for), then HELLO, then AUTH, all within one total deadline
 * from the accept (handshake_ns()), however the bytes trickle in; nothing
 * but HELLO, AUTH and ERROR is accepted before AUTH completed, each frame
 * at most MIG_HANDSHAKE_FRAME_LIMIT bytes.  A connection that fails is
 * refused and closed; it never fails the incoming migration, whoever it
 * came from (the destination keeps listening until stopped).  An
 * authenticated connection leaves its slot: it is offered as a pending
 * channel of its session, and dest_accept_pair() takes a complete set.
 *
 * A connection gets its thread only once it has sent something (until
 * then it waits in the acceptor's poll set: QUIET_MAX, below), and then a
 * slot of one of two budgets, so that strangers compete only with each
 * other.  It takes one of FRESH_SLOTS; when all are taken it
 * evicts the oldest fresh one (a real peer finishes its handshake in
 * milliseconds, so the oldest is the one least likely to be one).  Once it
 * has proved its credentials (TLS: the handshake with the PSK or a
 * certificate from the CA; plain TCP, which has none: a HELLO this
 * destination accepts, naming a session it knows or claiming one) it moves
 * to one of PROVEN_SLOTS, which no fresh connection ever evicts; when
 * those are all taken, the oldest proven one gives way (only holders of
 * the credentials get there).  Under a storm of strangers at any rate a
 * real source's connection is thus at risk only until its TLS handshake
 * (or HELLO) is through, a few milliseconds.
 */
#define FRESH_SLOTS  DEST_FRESH_SLOTS
#define PROVEN_SLOTS DEST_PROVEN_SLOTS
/*
 * An evicted handshake's thread lives on until it sees its socket shut
 * down and has refused the stranger; on a loaded host hundreds of them
 * piled up under a churning flood (218 threads seen).  The acceptor waits
 * (the connections stay in the listen backlog) while this many handshake
 * threads run, fresh and proven together: a bound on threads, whoever
 * holds them (a proven one is never evicted for a fresh one).  A thread
 * counts until the acceptor has joined it (reap_handshakes()), not until
 * it returns: detached ones still exiting once made 67 threads under ASan
 * on a busy host, where migrate-flood.sh allows 64.
 */
#define MAX_HANDSHAKE_THREADS DEST_MAX_HS_THREADS

/*
 * A handshake's total deadline from the accept: idle_ms, as long as a
 * live link may be silent, and never under HANDSHAKE_MIN_MS.  This
 * destination can be the slow one: stopped or starved for a few seconds
 * right after its accept, it finds the source's HELLO waiting and the
 * deadline gone.  With a fixed 3 s it refused the real source for a stop
 * of 4 s ("peer silent", tests/host/lib/stalled-accept.py); a stop shorter
 * than idle_ms is slowness, not death, here as on a live link.  Strangers
 * gain nothing from the longer wait: they hold a slot only until evicted,
 * a quiet descriptor only until QUIET_MAX newer ones come.
 */
#define HANDSHAKE_MIN_MS 3000

static uint64_t handshake_ns(const struct mig_dest *d)
{
	int ms = d->o.idle_ms > HANDSHAKE_MIN_MS ? d->o.idle_ms : HANDSHAKE_MIN_MS;

	return (uint64_t)ms * 1000000ull;
}

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
	c->wire.ram_size = ram_bytes(d->ram);
	c->wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	return c;
}

/* Every channel of p into drop[MIG_MAX_CHANNELS + 1], none left (under d->lock). */
static void take_pending(struct dest_pending *p, struct mig_conn **drop)
{
	drop[0] = p->links.urg;
	for (unsigned k = 0; k < MIG_MAX_CHANNELS; k++)
		drop[k + 1] = p->links.bulk[k];
	*p = (struct dest_pending){ 0 };
}

/* Whether a reconnection's channels are all pending (under d->lock). */
int dest_pending_complete(const struct mig_dest *d)
{
	return mig_links_complete(&d->admission.pend.links);
}

/* The claim of generation gen, or NULL (under d->lock). */
static struct dest_claim *claim_by_gen(struct mig_dest *d, uint64_t gen)
{
	for (int k = 0; k < DEST_MAX_CLAIMS; k++)
		if (d->admission.claims[k].claimed_ns && d->admission.claims[k].gen == gen)
			return &d->admission.claims[k];
	return NULL;
}

/* The claim of session id, or NULL (under d->lock). */
static struct dest_claim *claim_by_session(struct mig_dest *d, uint64_t id)
{
	for (int k = 0; k < DEST_MAX_CLAIMS; k++)
		if (d->admission.claims[k].claimed_ns && d->admission.claims[k].session == id)
			return &d->admission.claims[k];
	return NULL;
}

/* Forget claim k: its channels into drop[MIG_MAX_CHANNELS + 1], its secret wiped. */
static void drop_claim(struct dest_claim *k, struct mig_conn **drop)
{
	take_pending(&k->pend, drop);
	mig_auth_wipe(k->secret, sizeof(k->secret));
	k->claimed_ns = 0;
}

/*
 * A claim for an urgent HELLO without RECOVER (under d->lock), with a new
 * secret: the session's own claim again (its source lost the secret, or
 * gave up an attempt: what was pending for it is dropped), else a free
 * one, else the oldest's.  A claim is not a lock: a stranger who claims
 * and stalls (plain TCP: anyone may claim) holds one claim, never the
 * destination; only a pair of channels fixes a session.
 */
static int claim_session(struct mig_dest *d, const struct mig_hello *m, struct mig_conn **drop,
			 uint64_t *gen, char *why, size_t len)
{
	struct dest_claim *k = claim_by_session(d, m->session_id);
	for (int i = 0; !k && i < DEST_MAX_CLAIMS; i++)
		if (!d->admission.claims[i].claimed_ns)
			k = &d->admission.claims[i];
	if (!k) {
		k = &d->admission.claims[0];
		for (int i = 1; i < DEST_MAX_CLAIMS; i++)
			if (d->admission.claims[i].claimed_ns < k->claimed_ns)
				k = &d->admission.claims[i];
	}
	if (k->claimed_ns)
		drop_claim(k, drop);
	int r = mig_random_bytes(k->secret, sizeof(k->secret), why, len);
	if (r)
		return r;
	k->session = m->session_id;
	k->claimed_ns = now_ns();
	k->gen = *gen = ++d->admission.claim_gen;
	k->features = MIG_FEAT_KNOWN & ~d->o.features_off & m->features;
	return 1;
}

/* What a HELLO is checked against: its session's claim, secret and features. */
struct hs_key {
	uint64_t gen;
	uint32_t features;
	uint8_t secret[MIG_SECRET_LEN];
};

static void key_of(struct hs_key *key, uint64_t gen, uint32_t features, const uint8_t *secret)
{
	key->gen = gen;
	key->features = features;
	memcpy(key->secret, secret, sizeof(key->secret));
}

/*
 * Which session a HELLO belongs to (under d->lock), into key: 1 when it
 * claims one (an urgent HELLO without RECOVER: it learns the secret), 0
 * when it must prove the secret, -EBUSY or -EPROTO when it cannot belong.
 * Once a pair of channels was taken the session is fixed: every other
 * session is told BUSY.  The refusals name no session: they go to
 * strangers.
 */
static int classify_hello(struct mig_dest *d, const struct mig_hello *m, struct mig_conn **drop,
			  struct hs_key *key, char *why, size_t len)
{
	int fresh = !(m->flags & MIG_HELLO_RECOVER) && m->channel == MIG_CHAN_URGENT;
	struct dest_claim *k;

	if (d->admission.session_fixed && m->session_id == d->session) {
		key_of(key, d->admission.session_gen, d->features, d->admission.secret);
		return 0;
	}
	if (d->admission.session_fixed) {
		snprintf(why, len, "busy: another source's session holds this destination");
		return -EBUSY; /* a source that is told so tries again until its deadline */
	}
	if (fresh) {
		uint64_t gen = 0;
		int r = claim_session(d, m, drop, &gen, why, len);
		k = claim_by_gen(d, gen);
		if (r > 0 && k)
			key_of(key, k->gen, k->features, k->secret);
		return r;
	}
	k = claim_by_session(d, m->session_id);
	if (k) {
		key_of(key, k->gen, k->features, k->secret);
		return 0;
	}
	if (m->flags & MIG_HELLO_RECOVER)
		snprintf(why, len, "recovery HELLO, but no session was started here");
	else
		snprintf(why, len, "a session starts with its urgent channel");
	return -EPROTO;
}

/* What a connection's HELLO made it: its session's claim, connection attempt and channel. */
struct hs_result {
	uint64_t gen;
	uint32_t attempt;
	uint16_t channel, bulk_index, nr_bulk;
};

/* HELLO back, then the secret (a new claim) or the proofs both ways. */
static int answer_hello(struct mig_dest *d, struct mig_hs *hs, const struct mig_hello *m, int owner,
			uint32_t features, char *why, size_t len)
{
	hs->channel = m->channel;
	hs->nr_bulk = m->nr_bulk;
	hs->bulk_index = m->bulk_index;
	hs->session = m->session_id;
	int r = mig_hs_send_hello(hs, m->flags & MIG_HELLO_RECOVER, ram_bytes(d->ram), features,
				  m->attempt, why, len);
	if (!r)
		r = owner ? mig_hs_send_secret(hs, why, len) : mig_hs_mutual(hs, why, len);
	return r;
}

struct hs_arg {
	struct mig_dest *d;
	int fd, slot, proven;
	uint64_t gen, t0;
};

/*
 * a's connection proved its credentials (under d->lock): from its fresh
 * slot to a proven one, a free one or the oldest proven one's.  -ECONNRESET
 * when it was evicted meanwhile (its socket is shut down).
 */
static int promote(struct mig_dest *d, struct hs_arg *a)
{
	if (a->proven)
		return 0;
	if (d->admission.hs[a->slot].gen != a->gen)
		return -ECONNRESET;
	int to = -1;
	for (int k = FRESH_SLOTS; to < 0 && k < FRESH_SLOTS + PROVEN_SLOTS; k++)
		if (d->admission.hs[k].fd < 0)
			to = k;
	if (to < 0) {
		to = FRESH_SLOTS;
		for (int k = FRESH_SLOTS + 1; k < FRESH_SLOTS + PROVEN_SLOTS; k++)
			if (d->admission.hs[k].t0 < d->admission.hs[to].t0)
				to = k;
		shutdown(d->admission.hs[to].fd,
			 SHUT_RDWR); /* its thread sees the end, and refuses */
		d->admission.evicted++;
	}
	d->admission.hs[to] = d->admission.hs[a->slot];
	d->admission.hs[a->slot].fd = -1;
	a->slot = to;
	a->proven = 1;
	return 0;
}

/*
 * The HELLO classified (under d->lock): on plain TCP, which has no
 * credentials, a HELLO this destination accepts is the proof that
 * promotes the connection.
 */
static int classify_locked(struct mig_dest *d, struct hs_arg *a, const struct mig_hello *m,
			   struct mig_conn **drop, struct hs_key *key, char *why, size_t len)
{
	int owner = classify_hello(d, m, drop, key, why, len);
	if (owner >= 0 && !d->tls && promote(d, a)) {
		snprintf(why, len, "evicted during its handshake");
		return -ECONNRESET;
	}
	return owner;
}

/* HELLO and AUTH on a new connection; 0 when it is an authenticated channel. */
static int handshake(struct mig_dest *d, struct hs_arg *a, struct mig_conn *c,
		     struct hs_result *res, char *why, size_t len)
{
	struct mig_conn *drop[MIG_MAX_CHANNELS + 1] = { NULL };
	struct hs_key key = { 0 };
	struct mig_hs hs = { .c = c, .role = MIG_ROLE_DEST, .secret = key.secret, .tag = "" };
	struct mig_hello m;
	int r = mig_hs_recv_hello(&hs, &m, why, len);
	if (r)
		return r;
	mig_lock(&d->lock, MIG_RANK_DEST);
	int owner = classify_locked(d, a, &m, drop, &key, why, len);
	mig_unlock(&d->lock);
	dest_free_conns(drop, MIG_MAX_CHANNELS + 1);
	if (owner >= 0) {
		/* The session's, less what this connection cannot have (plain TCP: the CRC). */
		c->wire.features &= key.features;
		r = answer_hello(d, &hs, &m, owner, c->wire.features, why, len);
	}
	mig_auth_wipe(key.secret, sizeof(key.secret));
	if (owner < 0 || r)
		return owner < 0 ? owner : r;
	*res = (struct hs_result){ .gen = key.gen,
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

/* The pending set of the session (or claim) of generation gen, or NULL (under d->lock). */
static struct dest_pending *pending_of(struct mig_dest *d, uint64_t gen)
{
	if (d->admission.session_fixed)
		return gen == d->admission.session_gen ? &d->admission.pend : NULL;
	struct dest_claim *k = claim_by_gen(d, gen);
	return k ? &k->pend : NULL;
}

/*
 * An authenticated channel of the source's connection attempt: pending
 * until the urgent channel and all HELLO.nr_bulk bulk channels of the same
 * attempt arrived.  A later attempt replaces whatever an earlier one left;
 * a channel of an earlier attempt, or of a claim that was dropped or made
 * again, is dropped, and one whose nr_bulk differs from its attempt's is
 * refused.
 */
static void offer(struct mig_dest *d, struct mig_conn *c, const struct hs_result *res)
{
	struct mig_conn *drop[MIG_MAX_CHANNELS + 2] = { NULL };
	struct mig_conn *refused = NULL;
	uint32_t attempt = res->attempt;
	unsigned want = 0;
	mig_lock(&d->lock, MIG_RANK_DEST);
	struct dest_pending *p = pending_of(d, res->gen);
	if (!p) {
		drop[0] = c;
	} else {
		if (attempt > p->attempt || !p->links.nr_bulk) {
			take_pending(p, drop);
			p->attempt = attempt;
			p->links.nr_bulk = res->nr_bulk;
		}
		if (attempt != p->attempt) {
			drop[MIG_MAX_CHANNELS + 1] = c; /* left over from an earlier attempt */
		} else if (res->nr_bulk != p->links.nr_bulk) {
			refused = c;
		} else {
			struct mig_conn **slot = res->channel == MIG_CHAN_URGENT
						     ? &p->links.urg
						     : &p->links.bulk[res->bulk_index];
			drop[MIG_MAX_CHANNELS + 1] = *slot;
			*slot = c;
			pthread_cond_broadcast(&d->cond);
		}
		want = p->links.nr_bulk;
	}
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

/*
 * TLS (when asked for), then HELLO and AUTH, all by t0 + handshake_ns().  A
 * connection that fails TLS proved nothing: it gets no frame.  One that
 * passed it proved its credentials: promoted.
 */
static int handshake_all(struct mig_dest *d, struct hs_arg *a, struct mig_conn *c,
			 struct hs_result *res, int *tls_failed, char *why, size_t len)
{
	uint64_t deadline = a->t0 + handshake_ns(d), now = now_ns();
	int left_ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
	int r = mig_tls_secure(d->tls, c, left_ms, why, len);
	*tls_failed = r != 0;
	if (r)
		return r;
	if (d->tls) {
		mig_lock(&d->lock, MIG_RANK_DEST);
		r = promote(d, a);
		mig_unlock(&d->lock);
		if (r) {
			snprintf(why, len, "evicted during its handshake");
			return r;
		}
	}
	mig_conn_set_deadline(c, deadline);
	return handshake(d, a, c, res, why, len);
}

/* Count a refused connection and say why, rate-limited (REFUSE_LOG_*). */
static void log_refusal(struct mig_dest *d, const char *why)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	uint64_t now = now_ns(), n = ++d->admission.refused;
	int log = n <= REFUSE_LOG_BURST || now - d->admission.refused_logged_ns >= REFUSE_LOG_NS;
	uint64_t more = n - d->admission.refused_at_log - 1;
	if (log) {
		d->admission.refused_logged_ns = now;
		d->admission.refused_at_log = n;
	}
	mig_unlock(&d->lock);
	if (log && more)
		pr_mig("refused a connection: %s (and %llu more since the last message)\n", why,
		       (unsigned long long)more);
	else if (log)
		pr_mig("refused a connection: %s\n", why);
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
	log_refusal(d, why);
}

static void *handshake_thread(void *arg)
{
	struct hs_arg *a = arg;
	struct mig_dest *d = a->d;
	char why[300];
	struct hs_result res = { 0 };
	int tls_failed = 0;
	struct mig_conn *c = new_conn(d, a->fd, "incoming");
	int r = c ? handshake_all(d, a, c, &res, &tls_failed, why, sizeof(why)) : -ENOMEM;
	mig_auth_thread_cleanup(); /* before this thread counts as gone */
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (d->admission.hs[a->slot].gen == a->gen)
		d->admission.hs[a->slot].fd = -1; /* else it was evicted and given to another */
	mig_unlock(&d->lock);
	if (r && c)
		refuse(d, c, r, tls_failed, why);
	else if (c)
		offer(d, c, &res);
	mig_auth_thread_cleanup(); /* again: closing a TLS session used OpenSSL */
	mig_wire_thread_cleanup();
	free(a);
	mig_lock(&d->lock, MIG_RANK_DEST);
	d->admission.hs_ended[d->admission.nr_hs_ended++] =
	    pthread_self(); /* to be joined: reap_handshakes() */
	pthread_cond_broadcast(&d->cond);
	mig_unlock(&d->lock);
	return NULL;
}

/*
 * Join the handshake threads that ended, which only then stop counting in
 * d->admission.handshakes: the bound is on threads that exist, exiting ones too.
 * d->lock held, dropped while joining (an ended thread takes it no more).
 */
static void reap_handshakes(struct mig_dest *d)
{
	pthread_t ended[MAX_HANDSHAKE_THREADS];
	int n = d->admission.nr_hs_ended;

	memcpy(ended, d->admission.hs_ended, (size_t)n * sizeof(ended[0]));
	d->admission.nr_hs_ended = 0;
	mig_unlock(&d->lock);
	for (int k = 0; k < n; k++)
		pthread_join(ended[k], NULL);
	mig_lock(&d->lock, MIG_RANK_DEST);
	d->admission.handshakes -= n;
}

/* A free fresh slot, or the oldest fresh one's, its handshake ended (under d->lock). */
static int take_slot(struct mig_dest *d)
{
	int oldest = 0;
	for (int k = 0; k < FRESH_SLOTS; k++) {
		if (d->admission.hs[k].fd < 0)
			return k;
		if (d->admission.hs[k].t0 < d->admission.hs[oldest].t0)
			oldest = k;
	}
	shutdown(d->admission.hs[oldest].fd, SHUT_RDWR); /* its thread sees the end, and refuses */
	d->admission.evicted++;
	return oldest;
}

/* Start a handshake thread for fd, accepted at t0. */
static void start_handshake(struct mig_dest *d, int fd, uint64_t t0)
{
	struct hs_arg *a = malloc(sizeof(*a));
	pthread_t t;
	int r;

	if (!a) {
		pr_mig("dropped a connection: no memory for its handshake\n");
		close(fd);
		return;
	}
	mig_lock(&d->lock, MIG_RANK_DEST);
	reap_handshakes(d);
	while (d->admission.handshakes >= MAX_HANDSHAKE_THREADS && !dest_stopping(d)) {
		struct timespec ts = dest_mono_in_ms(100);
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		reap_handshakes(d);
	}
	int slot = take_slot(d);
	*a = (struct hs_arg){
		.d = d, .fd = fd, .slot = slot, .gen = ++d->admission.hs_gen, .t0 = t0
	};
	d->admission.hs[slot] = (struct hs_slot){ .fd = fd, .gen = a->gen, .t0 = a->t0 };
	d->admission.handshakes++;
	mig_unlock(&d->lock);
	r = pthread_create(&t, NULL, handshake_thread, a);
	if (r == 0)
		return; /* joined once it ended: reap_handshakes() */
	pr_mig("dropped a connection: cannot start its handshake thread: %s\n", strerror(r));
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (d->admission.hs[slot].gen == a->gen)
		d->admission.hs[slot].fd = -1;
	d->admission.handshakes--;
	mig_unlock(&d->lock);
	free(a);
	close(fd);
}

/*
 * A new connection waits in the acceptor's own poll set, without a thread,
 * until it has sent something (a real source speaks first: its HELLO or
 * TLS ClientHello): a storm of silent connections costs a file descriptor
 * each, at most QUIET_MAX of them, the oldest closed when one more comes,
 * and each at most handshake_ns().  Threads were the cost: under a storm the
 * acceptor spent its time starting and ending handshake threads for
 * strangers, and a real source's connection waited in the listen queue
 * behind them (seen in the ASan build: a channel unanswered for 10 s).
 */
#define QUIET_MAX 256

/* The acceptor's poll set: the listening socket, then the quiet connections, oldest first. */
struct quiet_set {
	struct pollfd pfd[1 + QUIET_MAX];
	uint64_t t0[1 + QUIET_MAX];
	int n; /* quiet connections, in pfd[1..n] */
};

static void quiet_remove(struct quiet_set *q, int k)
{
	memmove(&q->pfd[k], &q->pfd[k + 1], (size_t)(q->n - k) * sizeof(q->pfd[0]));
	memmove(&q->t0[k], &q->t0[k + 1], (size_t)(q->n - k) * sizeof(q->t0[0]));
	q->n--;
}

/*
 * How many bytes the first message of a connection needs, from what it
 * sent so far (hdr, n bytes): a TLS record (5-byte header) or a frame
 * (24-byte header); 0 when it is neither (its handshake thread refuses it
 * at once), and the header's size while that is incomplete.
 */
static size_t first_message_len(const struct mig_dest *d, const uint8_t *hdr, size_t n)
{
	if (d->tls) {
		if (n < 5)
			return 5;
		return hdr[0] == 0x16 ? 5 + ((size_t)hdr[3] << 8 | hdr[4]) : 0;
	}
	struct mig_frame_hdr h;
	if (n < sizeof(h))
		return sizeof(h);
	memcpy(&h, hdr, sizeof(h));
	if (h.magic != MIG_MAGIC || h.len > MIG_HANDSHAKE_FRAME_LIMIT)
		return 0;
	return sizeof(h) + h.len;
}

/*
 * First bytes that are neither a TLS handshake record nor a frame of this
 * protocol (its magic): no source of any kind, a stranger's garbage.  It is
 * refused by the acceptor itself.  A handshake thread for each cost the
 * flood test its source: 32 connections that churn 64 random bytes kept
 * the handshake threads at their cap under ASan on a loaded host, the
 * acceptor waited for a thread, the listen queue filled and dropped the
 * real source's SYNs for its whole 10 s (CI: "cannot connect ...:
 * Connection timed out").  A plain source at a TLS destination (or a TLS
 * one at a plain destination) still gets a thread, which tells it why.
 */
static bool is_stranger(const uint8_t *hdr, size_t n)
{
	uint32_t magic;

	if (n < sizeof(magic) || hdr[0] == 0x16)
		return false;
	memcpy(&magic, hdr + offsetof(struct mig_frame_hdr, magic), sizeof(magic));
	return magic != MIG_MAGIC;
}

/* Why a stranger's garbage was refused, in the words its handshake would have had. */
static const char *stranger_why(const struct mig_dest *d)
{
	if (d->tls)
		return "TLS: the peer does not speak TLS (nor this protocol: a stranger, refused "
		       "unheard)";
	return "bad magic: not this protocol (a stranger, refused unheard)";
}

/*
 * Whether a quiet connection that poll() flagged has sent its whole first
 * message (a TLS ClientHello record, or a HELLO frame; a real source sends
 * it at once): 1, its receive low-water mark back at 1 for its handshake.
 * 2 when its first bytes are neither TLS nor this protocol (is_stranger());
 * 0 when it hung up or was reset first (closed here: no thread for it);
 * -1 when it must wait on: poll() wakes it only once the rest has come
 * (SO_RCVLOWAT), so that a stranger who sends a byte and stalls costs a
 * descriptor here, never a thread or a handshake slot.
 */
static int quiet_spoke(const struct mig_dest *d, struct pollfd *p)
{
	uint8_t hdr[sizeof(struct mig_frame_hdr)];
	int avail = 0, one = 1;
	ssize_t r = recv(p->fd, hdr, sizeof(hdr), MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	if (r <= 0)
		return 0;
	if (is_stranger(hdr, (size_t)r))
		return 2;
	size_t need = first_message_len(d, hdr, (size_t)r);
	if (ioctl(p->fd, FIONREAD, &avail) < 0)
		return 0;
	if (!need || (size_t)avail >= need) {
		setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
		return 1;
	}
	if (p->revents & (POLLRDHUP | POLLHUP | POLLERR))
		return 0; /* it will never complete */
	int lowat = (int)need;
	setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	return -1;
}

/* Quiet connections that spoke to handshake threads; those that hung up, or expired, closed. */
static void quiet_poll(struct mig_dest *d, struct quiet_set *q)
{
	uint64_t now = now_ns();
	for (int k = 1; k <= q->n;) {
		int fd = q->pfd[k].fd;
		uint64_t t0 = q->t0[k];
		int spoke = q->pfd[k].revents ? quiet_spoke(d, &q->pfd[k]) : -1;
		if (spoke >= 0) {
			quiet_remove(q, k);
			if (spoke == 1) {
				start_handshake(d, fd, t0);
			} else {
				close(fd);
				if (spoke == 2)
					log_refusal(d, stranger_why(d));
			}
		} else if (now - t0 > handshake_ns(d)) {
			quiet_remove(q, k);
			close(fd);
		} else {
			k++;
		}
	}
}

/*
 * Accept what the listen queue holds, ACCEPT_BATCH at a time, into the
 * quiet set; nothing while the handshake threads are at their cap
 * (the connections wait in the listen queue, not as descriptors here: the
 * quiet set then holds only silent ones, and what one batch brought).
 */
#define ACCEPT_BATCH 16

static void quiet_accept(struct mig_dest *d, struct quiet_set *q, int lfd)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	int full = d->admission.handshakes >= MAX_HANDSHAKE_THREADS;
	mig_unlock(&d->lock);
	for (int k = 0; !full && k < ACCEPT_BATCH; k++) {
		struct pollfd l = { .fd = lfd, .events = POLLIN };
		if (poll(&l, 1, 0) <= 0)
			return;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (q->n == QUIET_MAX) {
			close(q->pfd[1].fd); /* the oldest: silent all this time */
			quiet_remove(q, 1);
		}
		q->n++;
		q->pfd[q->n] = (struct pollfd){ .fd = fd, .events = POLLIN | POLLRDHUP };
		q->t0[q->n] = now_ns();
	}
}

static void *acceptor_thread(void *arg)
{
	struct mig_dest *d = arg;
	struct quiet_set set = { .n = 0 }, *q = &set;
	while (!dest_stopping(d)) {
		q->pfd[0] = (struct pollfd){ .fd = d->listen.fd, .events = POLLIN };
		if (poll(q->pfd, (nfds_t)(1 + q->n), 100) < 0)
			continue;
		quiet_poll(d, q);
		if (q->pfd[0].revents)
			quiet_accept(d, q, d->listen.fd);
		/* migrate-recover's listeners: looked at each round (100 ms at most). */
		int more = __atomic_load_n(&d->listen.nr_more, __ATOMIC_ACQUIRE);
		for (int k = 0; k < more; k++)
			quiet_accept(d, q, d->listen.more[k]);
	}
	for (int k = 1; k <= q->n; k++)
		close(q->pfd[k].fd);
	return NULL;
}

/* Start accepting connections (the acceptor thread); 0, or -errno with err. */
int dest_start_accepting(struct mig_dest *d, char *err, size_t errlen)
{
	for (int k = 0; k < FRESH_SLOTS + PROVEN_SLOTS; k++)
		d->admission.hs[k].fd = -1;
	if (pthread_create(&d->admission.acceptor, NULL, acceptor_thread, d)) {
		snprintf(err, errlen, "cannot start the acceptor thread");
		return -EAGAIN;
	}
	d->admission.acceptor_on = 1;
	return 0;
}

/* Every claim dropped, their channels into drop[DEST_MAX_CLAIMS][...] (under d->lock). */
static void drop_claims(struct mig_dest *d, struct mig_conn **drop)
{
	for (int k = 0; k < DEST_MAX_CLAIMS; k++)
		if (d->admission.claims[k].claimed_ns)
			drop_claim(&d->admission.claims[k], drop + k * (MIG_MAX_CHANNELS + 1));
}

#define DROP_ALL ((DEST_MAX_CLAIMS + 1) * (MIG_MAX_CHANNELS + 1))

/* Stop accepting; end the handshakes in progress and wait for them. */
void dest_stop_accepting(struct mig_dest *d)
{
	struct mig_conn *drop[DROP_ALL] = { NULL };
	if (d->admission.acceptor_on)
		pthread_join(d->admission.acceptor, NULL);
	d->admission.acceptor_on = 0;
	mig_lock(&d->lock, MIG_RANK_DEST);
	for (int k = 0; k < FRESH_SLOTS + PROVEN_SLOTS; k++)
		if (d->admission.hs[k].fd >= 0)
			shutdown(d->admission.hs[k].fd, SHUT_RDWR);
	while (d->admission.handshakes) {
		if (d->admission.nr_hs_ended)
			reap_handshakes(d);
		else
			pthread_cond_wait(&d->cond, &d->lock);
	}
	drop_claims(d, drop);
	take_pending(&d->admission.pend, drop + DEST_MAX_CLAIMS * (MIG_MAX_CHANNELS + 1));
	mig_unlock(&d->lock);
	dest_free_conns(drop, DROP_ALL);
}

/*
 * A complete set of channels (under d->lock): the session's, or before it
 * is fixed any claim's (its claim in *from).  NULL when there is none.
 */
static struct dest_pending *complete_set(struct mig_dest *d, struct dest_claim **from)
{
	*from = NULL;
	if (d->admission.session_fixed)
		return mig_links_complete(&d->admission.pend.links) ? &d->admission.pend : NULL;
	for (int k = 0; k < DEST_MAX_CLAIMS; k++)
		if (d->admission.claims[k].claimed_ns &&
		    mig_links_complete(&d->admission.claims[k].pend.links)) {
			*from = &d->admission.claims[k];
			return &d->admission.claims[k].pend;
		}
	return NULL;
}

/*
 * The first pair fixes its claim's session (under d->lock): its secret and
 * features are the session's; every other claim is dropped, its channels
 * into drop (DROP_ALL).
 */
static void fix_session(struct mig_dest *d, struct dest_claim *k, struct mig_conn **drop)
{
	d->session = k->session;
	d->admission.session_gen = k->gen;
	d->features = k->features;
	memcpy(d->admission.secret, k->secret, sizeof(d->admission.secret));
	d->admission.session_fixed = 1;
	d->admission.pend = (struct dest_pending){ 0 };
	drop_claims(d, drop);
	dest_phase_enter(d, DEST_PRECOPY);
}

/*
 * Take an authenticated set of channels into *l (the urgent one and
 * l->nr_bulk bulk channels, NULL after), waiting until deadline (0:
 * forever, until stopped).  0, or a negative errno with a message.  The
 * first set fixes the session.
 */
int dest_accept_pair(struct mig_dest *d, uint64_t deadline, struct mig_links *l, char *err,
		     size_t errlen)
{
	struct mig_conn *drop[DROP_ALL] = { NULL };
	struct dest_claim *from;
	struct dest_pending *p;
	int r = 0;
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (!(p = complete_set(d, &from)) && !dest_stopping(d) && d->phase != DEST_FAILED) {
		if (!deadline) {
			pthread_cond_wait(&d->cond, &d->lock);
			continue;
		}
		struct timespec ts = mig_mono_ts(deadline);
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) == ETIMEDOUT)
			break;
	}
	if (p) {
		*l = p->links;
		*p = (struct dest_pending){ 0 };
		if (from)
			fix_session(d, from, drop);
	} else if (d->phase == DEST_FAILED) {
		snprintf(err, errlen, "%s", d->why);
		r = -ECANCELED;
	} else {
		bool stop = dest_stopping(d);
		snprintf(err, errlen, stop ? "stopped" : "no source connected within the deadline");
		r = stop ? -ECANCELED : -ETIMEDOUT;
	}
	mig_unlock(&d->lock);
	dest_free_conns(drop, DROP_ALL);
	return r;
}
