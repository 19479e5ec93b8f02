// SPDX-License-Identifier: GPL-2.0
/*
 * Connections at the source: the TLS client context, then per attempt the
 * TCP connections (urgent, and --channels bulk ones), each secured (TLS when asked for) and
 * introduced (HELLO, then AUTH: the session's first urgent connection learns
 * the secret, every other one proves it and has the destination prove it;
 * the steps are session.c's, shared with the destination), retried until a
 * deadline unless the destination refused for good.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "session.h"
#include "source.h"

#define BULK_SNDBUF (256 << 10)

/*
 * AUTH after HELLO (wire.h): the session's first urgent connection learns
 * the secret; every other connection proves it, and has the destination
 * prove it.
 */
static int authenticate(struct src *s, const struct mig_hs *hs, char *err, size_t errlen)
{
	struct mig_auth a;
	if (s->sess.have_secret)
		return mig_hs_mutual(hs, err, errlen);
	if (hs->channel != MIG_CHAN_URGENT) {
		snprintf(err, errlen, "%sno session secret yet (the urgent channel brings it)",
			 hs->tag);
		return -EPROTO;
	}
	int r = mig_hs_recv_auth(hs, MIG_AUTH_SECRET, &a, err, errlen);
	if (r)
		return r;
	memcpy(s->sess.secret, a.data, sizeof(s->sess.secret));
	mig_auth_wipe(&a, sizeof(a));
	s->sess.have_secret = 1;
	return 0;
}

/*
 * HELLO out and back on c, then AUTH.  -EBUSY: the destination serves
 * another session; -ECONNREFUSED: it refused; -EPROTO: a wrong answer.
 */
static int hello(struct src *s, struct mig_conn *c, int channel, unsigned index, int recover,
		 char *err, size_t errlen)
{
	char tag[32];
	struct mig_hs hs = { .c = c,
			     .role = MIG_ROLE_SOURCE,
			     .channel = (uint16_t)channel,
			     .session = s->sess.id,
			     .nr_bulk = (uint16_t)s->links.nr_bulk,
			     .bulk_index = (uint16_t)index,
			     .secret = s->sess.secret,
			     .tag = tag };
	struct mig_hello back;
	snprintf(tag, sizeof(tag), "%s channel: ", c->name);
	int r = mig_hs_send_hello(&hs, recover ? MIG_HELLO_RECOVER : 0, s->vm->ram_size,
				  s->features, s->sess.attempt, err, errlen);
	if (!r)
		r = mig_hs_recv_hello(&hs, &back, err, errlen);
	if (r)
		return r;
	if (back.session_id != s->sess.id || back.channel != channel ||
	    back.nr_bulk != s->links.nr_bulk || back.bulk_index != index) {
		snprintf(err, errlen, "%sdestination answered for another session", tag);
		return -EPROTO;
	}
	return authenticate(s, &hs, err, errlen);
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

/* Milliseconds from now to deadline (monotonic ns), at most cap, at least 1. */
static int ms_left(uint64_t deadline, int cap)
{
	uint64_t now = now_ns();
	uint64_t ms = deadline > now ? (deadline - now) / 1000000 : 0;
	return ms < 1 ? 1 : ms > (uint64_t)cap ? cap : (int)ms;
}

/*
 * The TCP connection of one channel.  Its connect may wait for a SYN
 * retransmitted after 1 s (a destination's listen queue overflowing under
 * a storm drops SYNs), so up to CONNECT_MS, within the attempt's deadline.
 */
#define CONNECT_MS 3000

static int connect_channel(struct src *s, struct mig_conn *c, const char *name, int bulk,
			   uint64_t deadline, char *err, size_t errlen)
{
	int fd = mig_connect(&s->sa, ms_left(deadline, CONNECT_MS), err, errlen);
	if (fd < 0) {
		memset(c, 0, sizeof(*c));
		c->fd = -1; /* nothing to close */
		return fd;
	}
	if (mig_conn_init(c, fd, name, MIG_ROLE_DEST, s->features)) {
		mig_conn_close(c);
		snprintf(err, errlen, "%s channel: out of memory", name);
		return -ENOMEM;
	}
	c->wire.ram_size = s->vm->ram_size;
	if (bulk) {
		/*
		 * A short bulk queue: a demand fault on a page already pushed
		 * waits for whatever is queued before it (1 MiB ~ 1 ms here).
		 */
		int sb = BULK_SNDBUF;
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	}
	return 0;
}

/*
 * One channel: connected only now (a connection that waited, silent, for
 * the others' handshakes looked like a stranger's to the destination, and
 * was evicted under a storm), then TLS when asked for, then HELLO and
 * AUTH, all within idle_ms and by deadline.  A destination that accepts but
 * never answers is silent, not slow: frames no longer than a handshake's
 * until AUTH completed.
 */
static int open_channel(struct src *s, struct mig_conn *c, int channel, unsigned index, int recover,
			uint64_t deadline, int *reached, char *err, size_t errlen)
{
	const char *name = channel == MIG_CHAN_URGENT ? "urgent" : mig_bulk_name(index);
	char why[200];
	uint64_t idle = now_ns() + (uint64_t)s->o->idle_ms * 1000000ull;
	if (idle < deadline)
		deadline = idle; /* a stalled channel is given up, and the attempt tried again */
	int r = connect_channel(s, c, name, channel != MIG_CHAN_URGENT, deadline, err, errlen);
	*reached = !r;
	if (r)
		return r;
	r = mig_tls_secure(s->tls, c, ms_left(deadline, INT32_MAX), why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "%s channel: %s", c->name, why);
		return r;
	}
	c->wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	mig_conn_set_deadline(c, deadline);
	r = hello(s, c, channel, index, recover, err, errlen);
	mig_conn_set_deadline(c, 0);
	c->wire.frame_limit = 0;
	return r;
}

/*
 * Every channel of one attempt, the urgent one first, by deadline: 0, or
 * -errno with err and every channel closed (*reached: the failed channel's
 * TCP connection was made; a refused connect is no peer's refusal).  Before the first pair the
 * urgent channel always asks for the secret afresh (the destination gives
 * a new one to a new attempt): a first connection that lost its AUTH
 * SECRET, or whose bulk channels failed, is tried again, not refused.
 */
static int open_all(struct src *s, int recover, uint64_t deadline, int *reached, char *err,
		    size_t errlen)
{
	if (!recover) {
		mig_auth_wipe(s->sess.secret, sizeof(s->sess.secret));
		s->sess.have_secret = 0;
	}
	int r = open_channel(s, s->links.urg, MIG_CHAN_URGENT, 0, recover, deadline, reached, err,
			     errlen);
	unsigned k;
	for (k = 0; !r && k < s->links.nr_bulk; k++)
		r = open_channel(s, s->links.bulk[k], MIG_CHAN_BULK, k, recover, deadline, reached,
				 err, errlen);
	if (r) {
		mig_conn_close(s->links.urg);
		for (unsigned j = 0; j < k; j++) /* the ones connected (the failed one too) */
			mig_conn_close(s->links.bulk[j]);
		return r;
	}
	mig_conn_set_liveness(s->links.urg, s->o->idle_ms);
	for (k = 0; k < s->links.nr_bulk; k++)
		mig_conn_set_liveness(s->links.bulk[k], s->o->idle_ms);
	return 0;
}

/*
 * Connect every channel (wire.h, Channels), retrying until deadline
 * (monotonic ns): one deadline for everything, whatever the number of
 * channels; a channel's handshake also ends idle_ms after it began (a
 * destination that stalls one attempt gets another).
 */
int src_connect_pair(struct src *s, int recover, uint64_t deadline, char *err, size_t errlen)
{
	for (;;) {
		s->sess.attempt++; /* every channel of this attempt carries it */
		int reached = 0;
		int r = open_all(s, recover, deadline, &reached, err, errlen);
		if (!r)
			return 0;
		/*
		 * While recovering, whoever answers at the address may be an
		 * impostor, or a stranger's connection may have taken the
		 * slot: only the deadline ends the tries.
		 */
		if (!recover && reached && permanent_refusal(r))
			return r;
		if (recover && reached)
			pr_mig("reconnection refused (%s); trying again\n", err);
		if (now_ns() + 100 * 1000000ull > deadline)
			return -ETIMEDOUT;
		if (!recover && s->vm->stopped && s->vm->stopped(s->vm->ctx)) {
			snprintf(err, errlen, "the VM stopped before a destination answered");
			return -ECANCELED;
		}
		nanosleep(&(struct timespec){ 0, 100 * 1000000 }, NULL);
	}
}

/*
 * The TLS client context when TLS is asked for: the credentials are loaded
 * (and refused with a message) before anything connects.  The destination's
 * certificate must name --tls-hostname, by default the address's host.
 */
int src_tls_client(struct src *s, char *err, size_t errlen)
{
	struct mig_tls_opts t = s->o->tls;
	if (!mig_opts_tls(s->o))
		return 0;
	if (!t.hostname && t.creds_dir && !s->sa.host[0]) {
		snprintf(err, errlen,
			 "TLS with x509 over %s: name the destination's "
			 "certificate with tls-hostname",
			 s->sa.text);
		return -EINVAL;
	}
	if (!t.hostname && t.creds_dir)
		t.hostname = s->sa.host;
	return mig_tls_ctx_new(&t, false, &s->tls, err, errlen);
}
