// SPDX-License-Identifier: GPL-2.0
/*
 * Connections at the source: the TLS client context, then per attempt the
 * TCP connections (urgent, and --channels bulk ones), each secured (TLS when asked for) and
 * introduced (HELLO, then AUTH: the session's first urgent connection learns
 * the secret, every other one proves it and has the destination prove it),
 * retried until a deadline unless the destination refused for good.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "source.h"

#define BULK_SNDBUF (256 << 10)

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

/*
 * HELLO out and back on c, then AUTH.  -EBUSY: the destination serves
 * another session; -ECONNREFUSED: it refused; -EPROTO: a wrong answer.
 */
static int hello(struct src *s, struct mig_conn *c, int channel, unsigned index, int recover,
		 char *err, size_t errlen)
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
		.nr_bulk = (uint16_t)s->nr_bulk,
		.bulk_index = (uint16_t)index,
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
	if (back.session_id != s->session || back.channel != channel ||
	    back.nr_bulk != s->nr_bulk || back.bulk_index != index) {
		snprintf(err, errlen, "%s channel: destination answered for another session",
			 c->name);
		return -EPROTO;
	}
	return authenticate(s, c, mig_auth_channel((uint16_t)channel, (uint16_t)index), err,
			    errlen);
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
static int open_channel(struct src *s, struct mig_conn *c, int channel, unsigned index, int recover,
			char *err, size_t errlen)
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
	r = hello(s, c, channel, index, recover, err, errlen);
	mig_conn_set_deadline(c, 0);
	c->wire.frame_limit = 0;
	return r;
}

/* Connect the urgent channel and every bulk channel: 0, or -errno with err. */
static int connect_all(struct src *s, char *err, size_t errlen)
{
	int fd = mig_connect(&s->sa, 1000, err, errlen);
	if (fd < 0)
		return fd;
	mig_conn_init(&s->urg, fd, "urgent", MIG_ROLE_DEST, s->features);
	s->urg.wire.ram_size = s->vm->ram_size;
	for (unsigned k = 0; k < s->nr_bulk; k++) {
		fd = mig_connect(&s->sa, 1000, err, errlen);
		if (fd < 0) {
			mig_conn_close(&s->urg);
			src_close_bulk(s);
			return fd;
		}
		struct mig_conn *c = src_bulk(s, k);
		mig_conn_init(c, fd, mig_bulk_name(k), MIG_ROLE_DEST, s->features);
		/*
		 * A short bulk queue: a demand fault on a page already pushed
		 * waits for whatever is queued before it (1 MiB ~ 1 ms here).
		 */
		int sb = BULK_SNDBUF;
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
		c->wire.ram_size = s->vm->ram_size;
	}
	return 0;
}

/* TLS, HELLO and AUTH on every channel of the attempt, the urgent one first. */
static int open_all(struct src *s, int recover, char *err, size_t errlen)
{
	int r = open_channel(s, &s->urg, MIG_CHAN_URGENT, 0, recover, err, errlen);
	for (unsigned k = 0; !r && k < s->nr_bulk; k++)
		r = open_channel(s, src_bulk(s, k), MIG_CHAN_BULK, k, recover, err, errlen);
	if (r)
		return r;
	mig_conn_set_liveness(&s->urg, s->o->idle_ms);
	for (unsigned k = 0; k < s->nr_bulk; k++)
		mig_conn_set_liveness(src_bulk(s, k), s->o->idle_ms);
	return 0;
}

/* Connect every channel (wire.h, Channels), retrying until deadline (monotonic ns). */
int src_connect_pair(struct src *s, int recover, uint64_t deadline, char *err, size_t errlen)
{
	for (;;) {
		s->attempt++; /* every channel of this attempt carries it */
		if (!connect_all(s, err, errlen)) {
			int r = open_all(s, recover, err, errlen);
			if (!r)
				return 0;
			mig_conn_close(&s->urg);
			src_close_bulk(s);
			/*
			 * While recovering, whoever answers at the address may be an
			 * impostor, or a stranger's connection may have taken the
			 * slot: only the deadline ends the tries.
			 */
			if (!recover && permanent_refusal(r))
				return r;
			if (recover)
				pr_mig("reconnection refused (%s); trying again\n", err);
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

/*
 * The TLS client context when TLS is asked for: the credentials are loaded
 * (and refused with a message) before anything connects.  The destination's
 * certificate must name --tls-hostname, by default the address's host.
 */
int src_tls_client(struct src *s, char *err, size_t errlen)
{
	struct mig_tls_opts t = s->o->tls;
	char host[INET_ADDRSTRLEN];
	if (!mig_opts_tls(s->o))
		return 0;
	if (!t.hostname && t.creds_dir)
		t.hostname = inet_ntop(AF_INET, &s->sa.sin_addr, host, sizeof(host));
	return mig_tls_ctx_new(&t, false, &s->tls, err, errlen);
}
