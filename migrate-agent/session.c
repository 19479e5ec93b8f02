// SPDX-License-Identifier: GPL-2.0
/*
 * The handshake's steps (session.h), written once for both roles: the
 * role in struct mig_hs picks whose label a proof carries, whose nonce
 * comes first and whom a refusal names.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "internal.h"
#include "migrate/auth.h"
#include "session.h"

static int peer_role(const struct mig_hs *hs)
{
	return hs->role == MIG_ROLE_SOURCE ? MIG_ROLE_DEST : MIG_ROLE_SOURCE;
}

static const char *peer_name(const struct mig_hs *hs)
{
	return hs->role == MIG_ROLE_SOURCE ? "destination" : "source";
}

static const char *auth_kind_name(uint32_t kind)
{
	return kind == MIG_AUTH_SECRET ? "SECRET" : kind == MIG_AUTH_PROOF ? "PROOF" : "CHALLENGE";
}

/* Our own message into err: hs's tag, then fmt. */
__attribute__((format(printf, 4, 5))) static void say(const struct mig_hs *hs, char *err,
						      size_t errlen, const char *fmt, ...)
{
	int n = snprintf(err, errlen, "%s", hs->tag);
	va_list ap;
	if (n < 0 || (size_t)n >= errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static int send_frame(const struct mig_hs *hs, uint16_t type, const void *p, size_t len, char *err,
		      size_t errlen)
{
	int r = mig_conn_send(hs->c, type, p, len, NULL, 0);
	if (r)
		say(hs, err, errlen, "cannot send %s: %s", mig_msg_name(type), strerror(-r));
	return r;
}

/*
 * The next frame, which must be of type want (named what in the message);
 * the peer's ERROR is a refusal, -EBUSY when the destination said it is busy.
 */
static int recv_frame(const struct mig_hs *hs, uint16_t want, const char *what, const uint8_t **p,
		      char *err, size_t errlen)
{
	struct mig_frame_hdr fh;
	struct mig_error e;
	int r = mig_conn_recv(hs->c, &fh, p, err, errlen);
	if (r)
		return r;
	if (fh.type == MIG_MSG_ERROR) {
		memcpy(&e, *p, sizeof(e));
		mig_peer_error(err, errlen, *p, "%s refused the %s channel", peer_name(hs),
			       hs->c->name);
		/* only a destination is ever busy (with another source's session) */
		return e.code == MIG_ERR_BUSY && hs->role == MIG_ROLE_SOURCE ? -EBUSY
									     : -ECONNREFUSED;
	}
	if (fh.type != want) {
		say(hs, err, errlen, "expected %s, got %s", what, mig_msg_name(fh.type));
		return -EPROTO;
	}
	return 0;
}

int mig_hs_send_hello(const struct mig_hs *hs, uint32_t flags, uint64_t ram_size, uint32_t features,
		      uint32_t attempt, char *err, size_t errlen)
{
	struct mig_hello h = {
		.version = MIG_VERSION,
		.role = (uint16_t)hs->role,
		.channel = hs->channel,
		.page_size = PAGE_SIZE,
		.flags = flags,
		.session_id = hs->session,
		.ram_size = ram_size,
		.features = features,
		.attempt = attempt,
		.nr_bulk = hs->nr_bulk,
		.bulk_index = hs->bulk_index,
	};
	return send_frame(hs, MIG_MSG_HELLO, &h, sizeof(h), err, errlen);
}

int mig_hs_recv_hello(const struct mig_hs *hs, struct mig_hello *h, char *err, size_t errlen)
{
	const uint8_t *p;
	int r = recv_frame(hs, MIG_MSG_HELLO, "HELLO first", &p, err, errlen);
	if (!r)
		memcpy(h, p, sizeof(*h));
	return r;
}

int mig_hs_recv_auth(const struct mig_hs *hs, uint32_t kind, struct mig_auth *a, char *err,
		     size_t errlen)
{
	const uint8_t *p;
	char what[24];
	snprintf(what, sizeof(what), "AUTH %s", auth_kind_name(kind));
	int r = recv_frame(hs, MIG_MSG_AUTH, what, &p, err, errlen);
	if (r)
		return r;
	memcpy(a, p, sizeof(*a));
	mig_conn_wipe_rx(hs->c, p, sizeof(*a)); /* the secret or a proof: a's is the one copy */
	if (kind == MIG_AUTH_SECRET)
		mig_conn_secrets_done(hs->c); /* the source's last secret on this connection */
	if (a->kind != kind) {
		mig_auth_wipe(a, sizeof(*a)); /* it may be a secret, but not ours to keep */
		say(hs, err, errlen, "expected %s, got AUTH", what);
		return -EPROTO;
	}
	return 0;
}

int mig_hs_send_secret(const struct mig_hs *hs, char *err, size_t errlen)
{
	struct mig_auth a = { .kind = MIG_AUTH_SECRET };
	memcpy(a.data, hs->secret, sizeof(a.data));
	int r = send_frame(hs, MIG_MSG_AUTH, &a, sizeof(a), err, errlen);
	mig_auth_wipe(&a, sizeof(a));
	mig_conn_secrets_done(hs->c); /* the destination's last secret on this connection */
	return r;
}

/* The peer's CHALLENGE, answered with our PROOF for its nonce. */
static int prove(const struct mig_hs *hs, const uint8_t *bind, char *err, size_t errlen)
{
	struct mig_auth in, out = { .kind = MIG_AUTH_PROOF };
	int r = mig_hs_recv_auth(hs, MIG_AUTH_CHALLENGE, &in, err, errlen);
	if (r)
		return r;
	r = mig_auth_proof(hs->secret, hs->role, in.data, hs->session,
			   mig_auth_channel(hs->channel, hs->bulk_index), bind, out.data);
	if (r)
		say(hs, err, errlen,
		    "cannot compute the proof of the session secret (HMAC failed)");
	else
		r = send_frame(hs, MIG_MSG_AUTH, &out, sizeof(out), err, errlen);
	mig_auth_wipe(&out, sizeof(out));
	return r;
}

/* Our CHALLENGE: a fresh nonce, also left in nonce for the peer's proof. */
static int challenge(const struct mig_hs *hs, uint8_t *nonce, char *err, size_t errlen)
{
	struct mig_auth out = { .kind = MIG_AUTH_CHALLENGE };
	int r = mig_random_bytes(out.data, sizeof(out.data), err, errlen);
	if (r)
		return r;
	memcpy(nonce, out.data, sizeof(out.data));
	return send_frame(hs, MIG_MSG_AUTH, &out, sizeof(out), err, errlen);
}

/*
 * The peer's PROOF for our nonce.  A peer that cannot make it does not hold
 * the secret (-EACCES): a stranger at the destination, an impostor at the
 * source, whose message says so.
 */
static int check_proof(const struct mig_hs *hs, const uint8_t *nonce, const uint8_t *bind,
		       char *err, size_t errlen)
{
	struct mig_auth in;
	int r = mig_hs_recv_auth(hs, MIG_AUTH_PROOF, &in, err, errlen);
	if (r)
		return r;
	if (!mig_auth_check(hs->secret, peer_role(hs), nonce, hs->session,
			    mig_auth_channel(hs->channel, hs->bulk_index), bind, in.data)) {
		say(hs, err, errlen, "wrong proof of the session secret%s",
		    hs->role == MIG_ROLE_SOURCE ? ": not our destination" : "");
		r = -EACCES;
	}
	mig_auth_wipe(&in, sizeof(in));
	return r;
}

int mig_hs_mutual(const struct mig_hs *hs, char *err, size_t errlen)
{
	uint8_t bind[MIG_SECRET_LEN], nonce[MIG_SECRET_LEN];
	int challenge_first = hs->role == MIG_ROLE_DEST; /* wire.h: the destination does */
	int r = mig_conn_binding(hs->c, bind);
	if (r) {
		say(hs, err, errlen, "cannot read the TLS session's exporter value");
		return r;
	}
	if (!challenge_first)
		r = prove(hs, bind, err, errlen);
	if (!r)
		r = challenge(hs, nonce, err, errlen);
	if (!r)
		r = check_proof(hs, nonce, bind, err, errlen);
	if (!r && challenge_first)
		r = prove(hs, bind, err, errlen);
	mig_auth_wipe(bind, sizeof(bind)); /* the TLS session's exporter value */
	mig_conn_secrets_done(hs->c);
	return r;
}
