// SPDX-License-Identifier: GPL-2.0
/*
 * mig-hs-check: the handshake's steps (migrate-agent/session.c) with both
 * roles against each other over a socketpair, one thread each: a new
 * session's secret, the proofs both ways, a wrong secret, a busy or
 * refusing peer, frames out of order and an impostor destination.  Each
 * case checks both ends' results and messages; prints "ok: CASE" or
 * "FAIL: CASE: ..." and exits 0 only when every case passed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../session.h"
#include "migrate/auth.h"

#define RAM_SIZE   (16ull << 20)
#define SESSION_ID 0x5e55104ull
#define DEADLINE_S 20 /* only a broken case waits for it */

/* One end: its connection, handshake, secret, result and message. */
struct end {
	struct mig_conn c;
	struct mig_hs hs;
	uint8_t secret[MIG_SECRET_LEN];
	int (*step)(struct end *e);
	int r;
	char err[300];
};

static void send_error(struct end *e, uint32_t code, const char *text)
{
	struct mig_error m = { .code = code, .msg_len = (uint32_t)strlen(text) };
	mig_conn_send(&e->c, MIG_MSG_ERROR, &m, sizeof(m), text, m.msg_len);
}

static int send_auth(struct end *e, uint32_t kind, uint8_t fill)
{
	struct mig_auth a = { .kind = kind };
	memset(a.data, fill, sizeof(a.data));
	return mig_conn_send(&e->c, MIG_MSG_AUTH, &a, sizeof(a), NULL, 0);
}

/* ---- The source's steps (what source-session.c does) ---- */

static int src_hello(struct end *e)
{
	struct mig_hello back;
	int r = mig_hs_send_hello(&e->hs, 0, RAM_SIZE, 0, 7, e->err, sizeof(e->err));
	if (!r)
		r = mig_hs_recv_hello(&e->hs, &back, e->err, sizeof(e->err));
	if (!r &&
	    (back.session_id != SESSION_ID || back.attempt != 7 || back.role != MIG_ROLE_DEST))
		r = -EBADMSG; /* not what the destination's steps should answer */
	return r;
}

static int src_learn(struct end *e)
{
	struct mig_auth a;
	int r = src_hello(e);
	if (!r)
		r = mig_hs_recv_auth(&e->hs, MIG_AUTH_SECRET, &a, e->err, sizeof(e->err));
	if (!r)
		memcpy(e->secret, a.data, sizeof(e->secret));
	return r;
}

static int src_mutual(struct end *e)
{
	int r = src_hello(e);
	return r ? r : mig_hs_mutual(&e->hs, e->err, sizeof(e->err));
}

static int src_refuses_busy(struct end *e)
{
	send_error(e, MIG_ERR_BUSY, "busy, says the source");
	return 0;
}

/* ---- The destination's steps (what dest-accept.c does) ---- */

static int dst_answer(struct end *e)
{
	struct mig_hello m;
	int r = mig_hs_recv_hello(&e->hs, &m, e->err, sizeof(e->err));
	if (r)
		return r;
	e->hs.channel = m.channel;
	e->hs.session = m.session_id;
	e->hs.nr_bulk = m.nr_bulk;
	e->hs.bulk_index = m.bulk_index;
	return mig_hs_send_hello(&e->hs, m.flags, RAM_SIZE, 0, m.attempt, e->err, sizeof(e->err));
}

static int dst_give(struct end *e)
{
	int r = dst_answer(e);
	return r ? r : mig_hs_send_secret(&e->hs, e->err, sizeof(e->err));
}

/* The proofs, and a refusal in an ERROR when they fail (refuse() in dest-accept.c). */
static int dst_mutual(struct end *e)
{
	int r = dst_answer(e);
	if (!r)
		r = mig_hs_mutual(&e->hs, e->err, sizeof(e->err));
	if (r)
		send_error(e, MIG_ERR_PROTOCOL, e->err);
	return r;
}

static int dst_busy(struct end *e)
{
	struct mig_hello m;
	int r = mig_hs_recv_hello(&e->hs, &m, e->err, sizeof(e->err));
	if (!r)
		send_error(e, MIG_ERR_BUSY,
			   "busy: another source's session holds this destination");
	return r;
}

static int dst_auth_first(struct end *e)
{
	return send_auth(e, MIG_AUTH_SECRET, 0x11);
}

static int dst_challenge_for_secret(struct end *e)
{
	int r = dst_answer(e);
	return r ? r : send_auth(e, MIG_AUTH_CHALLENGE, 0x22);
}

/* An impostor: it challenges, takes the source's proof and challenge, proves nothing. */
static int dst_impostor(struct end *e)
{
	struct mig_frame_hdr h;
	const uint8_t *p;
	int r = dst_answer(e);
	if (!r)
		r = send_auth(e, MIG_AUTH_CHALLENGE, 0x33);
	for (int k = 0; k < 2 && !r; k++)
		r = mig_conn_recv(&e->c, &h, &p, e->err, sizeof(e->err));
	return r ? r : send_auth(e, MIG_AUTH_PROOF, 0x44);
}

/* ---- The cases ---- */

struct hs_case {
	const char *name;
	uint16_t channel;
	int (*src)(struct end *e);
	int (*dst)(struct end *e);
	uint8_t src_fill, dst_fill; /* the secret each end holds (the source's learned or not) */
	int src_r, dst_r;	    /* what each end's steps must return */
	const char *src_text, *dst_text; /* what the message must say, or NULL */
};

static const struct hs_case cases[] = {
	{ "a new session's secret", MIG_CHAN_URGENT, src_learn, dst_give, 0, 0xaa, 0, 0, NULL,
	  NULL },
	{ "proofs both ways", MIG_CHAN_BULK, src_mutual, dst_mutual, 0xaa, 0xaa, 0, 0, NULL, NULL },
	{ "another secret", MIG_CHAN_BULK, src_mutual, dst_mutual, 0xbb, 0xaa, -ECONNREFUSED,
	  -EACCES, "destination refused the bulk channel: wrong proof of the session secret",
	  "wrong proof of the session secret" },
	{ "a busy destination", MIG_CHAN_URGENT, src_learn, dst_busy, 0, 0xaa, -EBUSY, 0,
	  "destination refused the urgent channel: busy: another source's session", NULL },
	{ "the source's ERROR (never busy)", MIG_CHAN_URGENT, src_refuses_busy, dst_answer, 0, 0xaa,
	  0, -ECONNREFUSED, NULL, "source refused the incoming channel: busy, says the source" },
	{ "AUTH before HELLO (the wire's check)", MIG_CHAN_URGENT, src_learn, dst_auth_first, 0,
	  0xaa, -EPROTO, 0, "urgent channel: rejected AUTH frame: AUTH before HELLO", NULL },
	{ "a challenge for a new session", MIG_CHAN_URGENT, src_learn, dst_challenge_for_secret, 0,
	  0xaa, -EPROTO, 0, "urgent channel: expected AUTH SECRET, got AUTH", NULL },
	{ "an impostor destination", MIG_CHAN_BULK, src_mutual, dst_impostor, 0xaa, 0xaa, -EACCES,
	  0, "bulk channel: wrong proof of the session secret: not our destination", NULL },
};

static void end_init(struct end *e, int fd, int role, const struct hs_case *k, char *tag)
{
	int src = role == MIG_ROLE_SOURCE;
	const char *name = !src ? "incoming" : k->channel == MIG_CHAN_URGENT ? "urgent" : "bulk";
	mig_conn_init(&e->c, fd, name, src ? MIG_ROLE_DEST : MIG_ROLE_SOURCE, 0);
	e->c.wire.ram_size = RAM_SIZE;
	e->c.wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	mig_conn_set_deadline(&e->c, now_ns() + DEADLINE_S * 1000000000ull);
	memset(e->secret, src ? k->src_fill : k->dst_fill, sizeof(e->secret));
	snprintf(tag, 32, "%s", src ? name : "");
	if (src)
		strcat(tag, " channel: ");
	e->hs = (struct mig_hs){
		.c = &e->c, .role = role, .nr_bulk = 1, .secret = e->secret, .tag = tag
	};
	if (src) {
		e->hs.channel = k->channel;
		e->hs.session = SESSION_ID;
	}
	e->step = src ? k->src : k->dst;
	e->r = 0;
	e->err[0] = 0;
}

/* An end's steps; then its write side shut, so that a peer still waiting sees the end. */
static void *run_end(void *arg)
{
	struct end *e = arg;
	e->r = e->step(e);
	shutdown(e->c.fd, SHUT_WR);
	mig_auth_thread_cleanup();
	mig_wire_thread_cleanup();
	return NULL;
}

static int says(const char *err, const char *text)
{
	return !text || strstr(err, text);
}

static int run_case(const struct hs_case *k)
{
	struct end s, d;
	char stag[32], dtag[32];
	pthread_t t;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("socketpair");
		return -1;
	}
	end_init(&s, sv[0], MIG_ROLE_SOURCE, k, stag);
	end_init(&d, sv[1], MIG_ROLE_DEST, k, dtag);
	if (pthread_create(&t, NULL, run_end, &d)) {
		fprintf(stderr, "cannot start a thread\n");
		return -1;
	}
	run_end(&s);
	pthread_join(t, NULL);
	int ok = s.r == k->src_r && d.r == k->dst_r && says(s.err, k->src_text) &&
		 says(d.err, k->dst_text) &&
		 (s.r || d.r || !memcmp(s.secret, d.secret, sizeof(s.secret)));
	if (ok)
		printf("ok: %s\n", k->name);
	else
		printf("FAIL: %s: source %d (%s), destination %d (%s)\n", k->name, s.r, s.err, d.r,
		       d.err);
	mig_conn_close(&s.c);
	mig_conn_close(&d.c);
	return ok ? 0 : -1;
}

int main(void)
{
	int failed = 0;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		failed += run_case(&cases[k]) != 0;
	return failed ? 1 : 0;
}
