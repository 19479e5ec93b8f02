// SPDX-License-Identifier: GPL-2.0
/*
 * TLS 1.3 sessions over migration sockets (OpenSSL 3); see migrate/tls.h.
 *
 * Why OpenSSL: the agent already takes its HMAC and random secrets from
 * libcrypto, so one crypto library serves both.  OpenSSL does not allow two
 * threads inside SSL_read() and SSL_write() of one session at once, which
 * the urgent channel needs (a receiver thread, senders under their own
 * lock); so the socket is non-blocking, every call holds the session's lock
 * only while inside OpenSSL, and waits for the socket in poll() outside it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "lock-rank.h"
#include "migrate/net.h"
#include "migrate/tls.h"
#include "tls-internal.h"

/* ---- sessions ---- */

/* Waits for fd to be ready for `events` until deadline (-1: none): 0 or -ETIMEDOUT. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int left = deadline < 0 ? -1 : (int)(deadline - (int64_t)now_ms());
		int n;

		if (deadline >= 0 && left <= 0)
			return -ETIMEDOUT;
		n = poll(&p, 1, left);
		if (n > 0)
			return 0; /* ready, or an error OpenSSL will report */
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : (int64_t)now_ms() + timeout_ms;
}

/* The client's check of the server's name: a DNS name or an IP address. */
static int expect_name(SSL *ssl, const char *name)
{
	unsigned char ip[16];

	if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1)
		return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
	return SSL_set_tlsext_host_name(ssl, name) == 1 && SSL_set1_host(ssl, name) == 1;
}

/* Why a certificate chain did not verify, when its issuer is unknown to us. */
static const char *issuer_hint(long verify)
{
	switch (verify) {
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
		return " (not signed by the CA of our ca-cert.pem)";
	}
	return "";
}

/* Is reason an alert by which the peer refused our certificate? */
static bool cert_alert(int reason)
{
	switch (reason) {
	case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
	case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
		return true;
	}
	return false;
}

/*
 * A handshake refused over the credentials, as the session saw it (the
 * PSK identity, a certificate where a key was due, the peer's certificate,
 * an alert about ours): -EACCES with a message, or 0.
 */
static int credentials_error(const struct mig_tls *t, unsigned long e, char *err, size_t errlen)
{
	long verify = SSL_get_verify_result(t->ssl);

	if (t->unknown_identity) {
		snprintf(err, errlen, "TLS: the client's PSK identity is not in our PSK file");
		return -EACCES;
	}
	if (t->cert_instead) {
		snprintf(err, errlen,
			 "TLS: the peer did not authenticate with the pre-shared key (it sent a "
			 "certificate instead)");
		return -EACCES;
	}
	if (verify != X509_V_OK) {
		snprintf(err, errlen, "TLS: the peer's certificate was refused: %s%s",
			 X509_verify_cert_error_string(verify), issuer_hint(verify));
		return -EACCES;
	}
	if (e && cert_alert(ERR_GET_REASON(e))) {
		snprintf(err, errlen, "TLS: the peer refused our certificate (%s)",
			 ERR_reason_error_string(e));
		return -EACCES;
	}
	return 0;
}

/*
 * A handshake failure that OpenSSL's last error e names (a peer without TLS
 * or TLS 1.3, another PSK, a close): -errno with a message, or 0.
 */
static int reason_error(const struct mig_tls_ctx *c, unsigned long e, int ssl_err, char *err,
			size_t errlen)
{
	switch (e ? ERR_GET_REASON(e) : 0) {
	case SSL_R_WRONG_VERSION_NUMBER:
	case SSL_R_PACKET_LENGTH_TOO_LONG:
	case SSL_R_HTTP_REQUEST:
	case SSL_R_RECORD_LENGTH_MISMATCH:
		snprintf(err, errlen, "TLS: the peer does not speak TLS (an end without TLS?)");
		return -EPROTO;
	case SSL_R_UNSUPPORTED_PROTOCOL:
	case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
		snprintf(err, errlen, "TLS: the peer does not offer TLS 1.3");
		return -EPROTO;
	case SSL_R_BINDER_DOES_NOT_VERIFY:
	case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
	case SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER: /* how OpenSSL answers a bad binder */
		if (!c->psk)
			return 0;
		snprintf(err, errlen, "TLS: PSK mismatch: the peer holds another key");
		return -EACCES;
	case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
		if (!c->psk || c->server)
			return 0;
		snprintf(err, errlen, "TLS: the server refused our PSK identity");
		return -EACCES;
	case SSL_R_UNEXPECTED_EOF_WHILE_READING:
	case 0:
		if (!(ssl_err == SSL_ERROR_SYSCALL || ssl_err == SSL_ERROR_SSL || !e))
			return 0;
		snprintf(err, errlen, "TLS: the peer closed the connection during the handshake");
		return -ECONNRESET;
	}
	return 0;
}

/* Names why a handshake failed, from OpenSSL's error queue and the session. */
static int handshake_error(const struct mig_tls *t, const struct mig_tls_ctx *c, int ssl_err,
			   char *err, size_t errlen)
{
	unsigned long e = ERR_peek_last_error();
	const char *detail = e ? ERR_reason_error_string(e) : NULL;
	int r = credentials_error(t, e, err, errlen);

	if (!r)
		r = reason_error(c, e, ssl_err, err, errlen);
	if (r)
		return r;
	if (c->psk && c->server && !t->psk_offered) {
		snprintf(err, errlen, "TLS: the client offered no PSK (x509 credentials?)");
		return -EACCES;
	}
	snprintf(err, errlen, "TLS handshake failed: %s", detail ? detail : "unknown error");
	return -EPROTO;
}

/* Counts the socket's system calls that moved bytes (called under t->lock). */
static long count_io(BIO *b, int oper, const char *argp, size_t len, int argi, long argl, int ret,
		     size_t *processed)
{
	struct mig_tls *t = (struct mig_tls *)BIO_get_callback_arg(b);

	(void)argp, (void)len, (void)argi, (void)argl;
	if (ret > 0 && processed && *processed) {
		if (oper == (BIO_CB_WRITE | BIO_CB_RETURN))
			t->socket_writes++;
		else if (oper == (BIO_CB_READ | BIO_CB_RETURN))
			t->socket_reads++;
	}
	return ret;
}

void mig_tls_get_info(struct mig_tls *t, struct mig_tls_info *out)
{
	mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
	out->cipher = SSL_CIPHER_standard_name(SSL_get_current_cipher(t->ssl));
	out->socket_writes = t->socket_writes;
	out->socket_reads = t->socket_reads;
	out->send_waits = t->send_waits;
	out->ktls_send = t->ktls_send;
	out->ktls_recv = t->ktls_recv;
	out->fallback = t->fallback;
	mig_unlock(&t->lock);
}

/*
 * The handshake runs on the socket alone (OpenSSL hands the keys to the
 * kernel there, when it can).  The socket BIO counts the system calls
 * (count_io).
 */
static bool attach_socket(struct mig_tls *t, int fd)
{
	BIO *sock = BIO_new_socket(fd, BIO_NOCLOSE);

	if (!sock)
		return false;
	BIO_set_callback_arg(sock, (char *)t);
	BIO_set_callback_ex(sock, count_io);
	SSL_set_bio(t->ssl, sock, sock); /* one reference, taken twice by ssl */
	t->out = sock;
	return true;
}

/*
 * After the handshake, without kTLS send: OpenSSL writes each record (16
 * KiB at most) as soon as it is sealed, one write() each, and on loopback
 * a write() costs as much as sealing its record.  A buffer in front of the
 * socket gathers a send's records into a write() per TLS_WRITE_BUF; every
 * send ends with flush_out(), so nothing waits in it for the next one.
 * With kTLS send the kernel makes the records from what write() gives it:
 * the socket stays alone (no user-space buffer between OpenSSL's record
 * types and the kernel's).
 */
static bool buffer_writes(struct mig_tls *t)
{
	BIO *sock = SSL_get_rbio(t->ssl);
	BIO *buf = BIO_new(BIO_f_buffer());

	if (!buf || BIO_set_write_buffer_size(buf, TLS_WRITE_BUF) != 1 || BIO_up_ref(sock) != 1) {
		BIO_free(buf);
		return false;
	}
	/* The chain buf -> sock holds one reference of sock, rbio the other. */
	SSL_set0_wbio(t->ssl, BIO_push(buf, sock));
	t->out = buf;
	return true;
}

/* Which directions the kernel took over, and why not the others (ctx->no_ktls first). */
static void note_ktls(struct mig_tls *t, struct mig_tls_ctx *c)
{
#ifndef OPENSSL_NO_KTLS
	t->ktls_send = BIO_get_ktls_send(SSL_get_wbio(t->ssl));
	t->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(t->ssl));
#endif
	if (c->no_ktls)
		t->fallback = c->no_ktls;
	else if (!t->ktls_send)
		t->fallback = "the kernel or OpenSSL refused this session's keys (cipher?)";
	else if (!t->ktls_recv)
		t->fallback = OPENSSL_VERSION_NUMBER < 0x30200000L
				  ? "receive: OpenSSL before 3.2 has no TLS 1.3 kTLS receive"
				  : "receive: the kernel or OpenSSL refused this session's keys";
	mig_lock(&c->ktls_lock, MIG_RANK_TLS_KTLS);
	c->ktls.sessions++;
	c->ktls.ktls_send += t->ktls_send;
	c->ktls.ktls_recv += t->ktls_recv;
	if (t->fallback)
		c->ktls.fallback = t->fallback;
	mig_unlock(&c->ktls_lock);
}

static void session_free(struct mig_tls *t)
{
	SSL_free(t->ssl);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/*
 * After a completed handshake: did the peer prove what this mode demands?
 * x509: OpenSSL verified its certificate (SSL_VERIFY_PEER, fail if none).
 * PSK: the session must have been made from the external PSK; a TLS 1.3
 * handshake can complete without it (a full handshake with a certificate),
 * so both ends check.
 */
static int check_peer_authenticated(struct mig_tls *t, const struct mig_tls_ctx *c, char *err,
				    size_t errlen)
{
	if (!c->psk)
		return 0;
	if (SSL_session_reused(t->ssl) == 1)
		return 0;
	snprintf(err, errlen, "TLS: the peer did not authenticate with the pre-shared key");
	return -EACCES;
}

/* A session on fd (made non-blocking), not yet shaken hands; NULL with err and *r. */
static struct mig_tls *session_new(struct mig_tls_ctx *c, int fd, int *r, char *err, size_t errlen)
{
	struct mig_tls *t = calloc(1, sizeof(*t));
	int flags = fcntl(fd, F_GETFL);

	if (!t || !(t->ssl = SSL_new(c->ssl))) {
		free(t);
		snprintf(err, errlen, "TLS: out of memory");
		*r = -ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->fd = fd;
	SSL_set_app_data(t->ssl, t);
	/*
	 * Until the connection's own handshake is over (HELLO, AUTH: the
	 * session secret, proofs), OpenSSL wipes each record's plaintext once
	 * handed out, and its read buffer when freed; without it the secret
	 * stays in the read buffer until later records happen to overwrite it.
	 * Not for the pages after it: wiping them would cost every byte.
	 */
	SSL_set_options(t->ssl, SSL_OP_CLEANSE_PLAINTEXT);
	t->wipe = true;
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || !attach_socket(t, fd) ||
	    (!c->server && c->hostname[0] && !expect_name(t->ssl, c->hostname))) {
		session_free(t);
		snprintf(err, errlen, "TLS: cannot set up the session");
		*r = -EINVAL;
		return NULL;
	}
	if (c->server)
		SSL_set_accept_state(t->ssl);
	else
		SSL_set_connect_state(t->ssl);
	return t;
}

/* SSL_do_handshake() until done, waiting on the socket until the deadline; 0 or -errno. */
static int drive_handshake(struct mig_tls *t, const struct mig_tls_ctx *c, int timeout_ms,
			   char *err, size_t errlen)
{
	int64_t deadline = deadline_of(timeout_ms);

	for (;;) {
		int r, e;

		ERR_clear_error();
		r = SSL_do_handshake(t->ssl);
		if (r == 1)
			return 0;
		e = SSL_get_error(t->ssl, r);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
			return handshake_error(t, c, e, err, errlen);
		if (wait_fd(t->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
			snprintf(err, errlen, "TLS: no handshake from the peer within %d ms",
				 timeout_ms);
			return -ETIMEDOUT;
		}
	}
}

int mig_tls_handshake(struct mig_tls_ctx *c, int fd, int timeout_ms, struct mig_tls **out,
		      char *err, size_t errlen)
{
	int r;
	struct mig_tls *t = session_new(c, fd, &r, err, errlen);

	if (!t)
		return r;
	r = drive_handshake(t, c, timeout_ms, err, errlen);
	if (!r)
		r = check_peer_authenticated(t, c, err, errlen);
	if (r) {
		session_free(t);
		return r;
	}
	note_ktls(t, c);
	if (!t->ktls_send && !buffer_writes(t)) {
		session_free(t);
		snprintf(err, errlen, "TLS: out of memory");
		return -ENOMEM;
	}
	ERR_clear_error(); /* empty for the first send or receive (see write_all()) */
	*out = t;
	return 0;
}

static void count_wait(struct mig_tls *t)
{
	mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
	t->send_waits++;
	mig_unlock(&t->lock);
}

/*
 * OpenSSL's error queue (one per thread) must be empty before an I/O call
 * for SSL_get_error() to tell why it failed.  It is emptied once when a
 * send or a receive begins and after each failed call, never per record:
 * a successful call leaves nothing in it.
 */

/*
 * Seals all len bytes into records (into the write buffer, or through it):
 * full 16 KiB records, one SSL_write_ex() for all of them unless the
 * socket fills up; then the same bytes are offered again once it drains.
 */
static int write_all(struct mig_tls *t, const void *buf, size_t len, int64_t deadline)
{
	size_t done = 0;

	while (done < len) {
		size_t n = 0;
		int ok, e;

		mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
		ok = SSL_write_ex(t->ssl, (const char *)buf + done, len - done, &n);
		e = ok ? SSL_ERROR_NONE : SSL_get_error(t->ssl, 0);
		mig_unlock(&t->lock);
		if (ok) {
			done += n;
			continue;
		}
		ERR_clear_error();
		if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
			return -EPIPE;
		count_wait(t);
		if (wait_fd(t->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) < 0)
			return -ETIMEDOUT;
	}
	return 0;
}

/*
 * With kTLS send the kernel seals whatever the socket is given, in full
 * records, and keeps the record sequence itself: one sendmsg() takes a
 * frame's header and payload, or a whole batch, where SSL_write_ex() made
 * one sendmsg() per 16 KiB record (and the frame was gathered first).
 * Nothing of OpenSSL's goes stale: after the handshake it only sends
 * alerts, and those through the kernel too.  iov is consumed.
 */
static int send_socket(struct mig_tls *t, struct iovec *iov, int n, int64_t deadline)
{
	for (;;) {
		ssize_t w;
		int e;

		mig_iov_advance(&iov, &n, 0); /* an empty piece would read as a closed socket */
		if (!n)
			return 0;
		mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
		w = sendmsg(t->fd, &(struct msghdr){ .msg_iov = iov, .msg_iovlen = (size_t)n },
			    MSG_NOSIGNAL | MSG_DONTWAIT);
		e = errno;
		if (w > 0)
			t->socket_writes++;
		mig_unlock(&t->lock);
		if (w < 0 && e == EINTR)
			continue;
		if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK)) {
			count_wait(t);
			if (wait_fd(t->fd, POLLOUT, deadline) < 0)
				return -ETIMEDOUT;
			continue;
		}
		if (w <= 0)
			return -EPIPE;
		mig_iov_advance(&iov, &n, (size_t)w);
	}
}

/* Writes out what the write buffer holds. */
static int flush_out(struct mig_tls *t, int64_t deadline)
{
	for (;;) {
		bool retry;
		long r;

		mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
		r = BIO_flush(t->out);
		retry = r <= 0 && BIO_should_retry(t->out);
		mig_unlock(&t->lock);
		if (r > 0)
			return 0;
		if (!retry)
			return -EPIPE;
		count_wait(t);
		if (wait_fd(t->fd, POLLOUT, deadline) < 0)
			return -ETIMEDOUT;
	}
}

int mig_tls_send(struct mig_tls *t, const void *buf, size_t len, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	int r;

	if (t->ktls_send)
		return send_socket(t, &(struct iovec){ (void *)buf, len }, 1, deadline);
	ERR_clear_error();
	r = write_all(t, buf, len, deadline);
	return r ? r : flush_out(t, deadline);
}

/*
 * One SSL_read_ex() (under the lock): its SSL error; on a failure
 * OpenSSL's last error in *code, and the queue emptied.
 */
static int read_once(struct mig_tls *t, void *buf, size_t len, size_t *n, unsigned long *code)
{
	int e;

	if (SSL_read_ex(t->ssl, buf, len, n))
		return SSL_ERROR_NONE;
	e = SSL_get_error(t->ssl, 0);
	*code = ERR_peek_last_error();
	ERR_clear_error();
	return e;
}

/* What mig_tls_recv() returns for a read that failed with e (not WANT_*). */
static ssize_t read_error(int e, unsigned long code, char *err, size_t errlen)
{
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	if (code && cert_alert(ERR_GET_REASON(code))) {
		snprintf(err, errlen, "TLS: the peer refused our certificate (%s)",
			 ERR_reason_error_string(code));
		return -EACCES;
	}
	snprintf(err, errlen, "TLS: the link broke: %s",
		 code ? ERR_reason_error_string(code) : "the connection closed");
	return -ECONNRESET;
}

/*
 * Held under the lock at most this much of a receive at a time: a sender
 * on the same session (the urgent channel's) waits no longer than it
 * takes to open this many bytes of records.
 */
#define TLS_READ_HOLD (64u << 10)

/*
 * After a successful read: the records the session already holds, into
 * buf too.  One read() with read-ahead brings up to TLS_READ_BUF of them,
 * and SSL_read_ex() hands out one record per call; a receiver that took
 * one record per call would see 16 KiB at a time (the destination installs
 * smaller runs of pages when less is buffered).  Stops at an incomplete
 * record (after one non-blocking read() for its rest).  A failure is held
 * for the next call, after the bytes that came before it.
 */
static size_t read_held_records(struct mig_tls *t, uint8_t *buf, size_t len)
{
	size_t got = 0;
	int e = SSL_ERROR_NONE;
	unsigned long code = 0;

	while (got < len && e == SSL_ERROR_NONE) {
		size_t held = 0;

		mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
		while (got < len && held < TLS_READ_HOLD) {
			size_t n = 0;

			e = SSL_has_pending(t->ssl) ? read_once(t, buf + got, len - got, &n, &code)
						    : SSL_ERROR_WANT_READ;
			if (e != SSL_ERROR_NONE)
				break;
			got += n;
			held += n;
		}
		mig_unlock(&t->lock);
	}
	if (e != SSL_ERROR_NONE && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
		t->held = read_error(e, code, t->held_err, sizeof(t->held_err));
		t->has_held = true;
	}
	return got;
}

ssize_t mig_tls_recv(struct mig_tls *t, void *buf, size_t len, int timeout_ms, char *err,
		     size_t errlen)
{
	int64_t deadline = deadline_of(timeout_ms);

	if (t->has_held) {
		snprintf(err, errlen, "%s", t->held_err);
		return t->held;
	}
	ERR_clear_error();
	for (;;) {
		unsigned long code = 0;
		size_t n = 0;
		int e;

		mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
		e = read_once(t, buf, len, &n, &code);
		mig_unlock(&t->lock);
		if (e == SSL_ERROR_NONE)
			return (ssize_t)(n + read_held_records(t, (uint8_t *)buf + n, len - n));
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
			return read_error(e, code, err, errlen);
		if (wait_fd(t->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) < 0)
			return -ETIMEDOUT;
	}
}

void mig_tls_free(struct mig_tls *t)
{
	if (!t)
		return;
	mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
	if (SSL_shutdown(t->ssl) >= 0) /* one try: close_notify if the socket takes it */
		BIO_flush(t->out);
	mig_unlock(&t->lock);
	session_free(t);
}

/* ---- The back end of a migration connection (migrate/net.h) ---- */

/*
 * Frames are sent as a header and one or two payload pieces: gathered into
 * one record where they fit, so a demand page costs one record, not three.
 */
#define TLS_GATHER (16u << 10)

static int tls_io_send(struct mig_conn *c, struct iovec *iov, int n)
{
	int64_t deadline = deadline_of(c->snd_timeout_ms ? c->snd_timeout_ms : -1);
	struct mig_tls *t = c->io_ctx;
	unsigned char rec[TLS_GATHER];
	size_t used = 0, dirty = 0;
	int r = 0;

	if (t->ktls_send)
		return send_socket(t, iov, n, deadline);
	ERR_clear_error();
	for (int k = 0; k < n && !r; k++) {
		if (!iov[k].iov_len)
			continue;
		if (iov[k].iov_len <= sizeof(rec) - used) {
			memcpy(rec + used, iov[k].iov_base, iov[k].iov_len);
			used += iov[k].iov_len;
			dirty = used > dirty ? used : dirty;
			continue;
		}
		if (used)
			r = write_all(c->io_ctx, rec, used, deadline);
		used = 0;
		if (!r)
			r = write_all(c->io_ctx, iov[k].iov_base, iov[k].iov_len, deadline);
	}
	if (!r && used)
		r = write_all(c->io_ctx, rec, used, deadline);
	if (dirty && __atomic_load_n(&t->wipe, __ATOMIC_RELAXED))
		OPENSSL_cleanse(rec, dirty); /* it held a frame of the handshake: AUTH's secret */
	return r ? r : flush_out(c->io_ctx, deadline);
}

static void tls_io_secrets_done(struct mig_conn *c)
{
	struct mig_tls *t = c->io_ctx;

	mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
	SSL_clear_options(t->ssl, SSL_OP_CLEANSE_PLAINTEXT);
	__atomic_store_n(&t->wipe, false, __ATOMIC_RELAXED);
	mig_unlock(&t->lock);
}

static ssize_t tls_io_recv(struct mig_conn *c, void *buf, size_t len, bool wait)
{
	int timeout = !wait ? 0 : mig_conn_wait_ms(c);
	ssize_t n = mig_tls_recv(c->io_ctx, buf, len, timeout, c->io_err, sizeof(c->io_err));

	return n == -ETIMEDOUT ? -EAGAIN : n;
}

static void tls_io_close(struct mig_conn *c)
{
	mig_tls_free(c->io_ctx);
}

int mig_tls_binding(struct mig_tls *t, uint8_t *out, size_t len)
{
	static const char label[] = "EXPORTER-postcopy-kvm-auth";
	int ok;

	mig_lock(&t->lock, MIG_RANK_TLS_SESSION);
	ok = SSL_export_keying_material(t->ssl, out, len, label, sizeof(label) - 1, NULL, 0, 0);
	mig_unlock(&t->lock);
	return ok == 1 ? 0 : -EIO;
}

static int tls_io_binding(struct mig_conn *c, uint8_t *out)
{
	return mig_tls_binding(c->io_ctx, out, MIG_SECRET_LEN);
}

static const struct mig_io_ops tls_io = {
	.name = "tls",
	.send = tls_io_send,
	.recv = tls_io_recv,
	.close = tls_io_close,
	.binding = tls_io_binding,
	.secrets_done = tls_io_secrets_done,
};

int mig_tls_secure(struct mig_tls_ctx *ctx, struct mig_conn *c, int timeout_ms, char *err,
		   size_t errlen)
{
	struct mig_tls *t;
	int r;

	if (!ctx)
		return 0;
	r = mig_tls_handshake(ctx, c->fd, timeout_ms, &t, err, errlen);
	if (r)
		return r;
	c->io = &tls_io;
	c->io_ctx = t;
	c->wire.aead = 1; /* every byte authenticated: page payloads may skip their CRC */
	return 0;
}
