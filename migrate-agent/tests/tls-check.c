// SPDX-License-Identifier: GPL-2.0
/*
 * mig-tls-check: both ends of one TLS connection over loopback TCP, each
 * configured from the command line, to test migrate/tls.h against real
 * OpenSSL handshakes: good credentials, and each bad input a user can give.
 *
 *   mig-tls-check SERVER-SIDE CLIENT-SIDE [--hostname NAME] [--bytes N]
 *                 [--timeout-ms MS] [--mixed] [--sndbuf BYTES]
 *   a side:  --server-creds DIR | --server-psk FILE | --server-plain
 *            --client-creds DIR | --client-psk FILE | --client-plain |
 *            --client-silent | --client-truncate
 *
 * After the handshake both ends send N bytes (default 4 MiB) to each other
 * at once, one thread sending while another receives on the same session,
 * and check every byte.  Prints one line per end, "server: ok ..." (with the
 * negotiated cipher suite, the system calls that moved bytes, the sends
 * that waited for the socket, the CRC32C of the bytes received, and kTLS
 * or the reason for its absence) or "server: <the error>"; exits 0 only if
 * both ends succeeded and each direction's CRC32C is the same at both ends.
 *
 * --mixed: the sends are of sizes from 1 byte to 300,000 (frame headers,
 * pages with their header, exact and inexact multiples of a record) and
 * the receives ask for 1 byte to 300,000 (short reads inside a record and
 * across records), so every record boundary falls somewhere else in the
 * stream.  --sndbuf: a small socket send buffer (SO_SNDBUF) and a receiver
 * that starts late, so that sends stop inside a batch of records and go
 * on where they stopped (the "send waits" of the line).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "migrate/tls.h"
#include "migrate/wire.h"

static bool mixed;
static int sndbuf;

/* The --mixed sizes: of a send, and of a receive (cycled, each its own phase). */
static const size_t send_sizes[] = { 1,	     24, 4120,	 16384, 16385, 4096, 65543,
				     262144, 5,	 300000, 4119,	32768, 16379 };
static const size_t recv_sizes[] = { 1, 7, 4096, 4097, 20000, 65536, 300000, 24, 16384 };
#define NSIZES(a) (sizeof(a) / sizeof((a)[0]))

enum side_kind {
	SIDE_TLS,
	SIDE_PLAIN,
	SIDE_SILENT,
	SIDE_TRUNCATE
};

struct end {
	const char *name;
	bool server;
	enum side_kind kind;
	struct mig_tls_opts opts;
	int fd;
	size_t bytes;
	int timeout_ms;
	char result[512];
	bool ok;
	uint32_t crc_sent, crc_received; /* CRC32C of the stream each way, once ok */
};

static unsigned char pattern(bool from_server, size_t i)
{
	return (unsigned char)((i * 131 + (i >> 12)) ^ (from_server ? 0x5a : 0xa5));
}

struct sender {
	struct mig_tls *t;
	bool server;
	size_t bytes;
	int r;
	uint32_t crc; /* of what was sent */
};

/* Sent per call: as the push sends its batches (many TLS records each). */
#define SEND_CHUNK (256u << 10)
#define MAX_CHUNK  (300000u)

static void *send_all(void *arg)
{
	struct sender *s = arg;
	unsigned char *buf = malloc(MAX_CHUNK);
	size_t k = 0;

	if (!buf)
		s->r = -ENOMEM;
	for (size_t off = 0, n; off < s->bytes && !s->r; off += n) {
		n = mixed ? send_sizes[k++ % NSIZES(send_sizes)] : SEND_CHUNK;
		if (n > s->bytes - off)
			n = s->bytes - off;
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(s->server, off + i);
		s->crc = crc32c(s->crc, buf, n);
		s->r = mig_tls_send(s->t, buf, n, 60000);
	}
	free(buf);
	return NULL;
}

/* Full duplex over one session: a sender thread while this one receives. */
static void exchange(struct end *e, struct mig_tls *t)
{
	struct sender s = { .t = t, .server = e->server, .bytes = e->bytes };
	static __thread unsigned char buf[MAX_CHUNK];
	pthread_t th;
	size_t got = 0, k = 0;
	uint32_t crc = 0;
	char err[256] = "";

	if (pthread_create(&th, NULL, send_all, &s)) {
		snprintf(e->result, sizeof(e->result), "cannot start the sender thread");
		return; /* not ok: the run fails with this result */
	}
	if (sndbuf)
		usleep(200000); /* the sender fills the small buffer and waits */
	while (got < e->bytes) {
		size_t want = mixed ? recv_sizes[k++ % NSIZES(recv_sizes)] : 20000;
		ssize_t n = mig_tls_recv(t, buf, want, 60000, err, sizeof(err));

		if (n <= 0) {
			snprintf(e->result, sizeof(e->result), "%s after %zu bytes",
				 n == 0 ? "peer closed" : err, got);
			break;
		}
		if ((size_t)n > want) {
			snprintf(e->result, sizeof(e->result), "%zd bytes for a receive of %zu", n,
				 want);
			break;
		}
		crc = crc32c(crc, buf, (size_t)n);
		for (ssize_t i = 0; i < n; i++, got++)
			if (buf[i] != pattern(!e->server, got)) {
				snprintf(e->result, sizeof(e->result), "byte %zu corrupted", got);
				got = e->bytes + 1;
				break;
			}
	}
	pthread_join(th, NULL);
	if (got == e->bytes && !s.r) {
		struct mig_tls_info info;

		mig_tls_get_info(t, &info);
		e->ok = true;
		e->crc_sent = s.crc;
		e->crc_received = crc;
		snprintf(e->result, sizeof(e->result),
			 "ok: %zu bytes each way over TLS 1.3, %s, %lu socket writes, %lu socket "
			 "reads, %lu send waits, crc32c sent %08x received %08x, kTLS send %s "
			 "receive %s (%s)",
			 got, info.cipher, info.socket_writes, info.socket_reads, info.send_waits,
			 s.crc, crc, info.ktls_send ? "yes" : "no", info.ktls_recv ? "yes" : "no",
			 info.fallback ? info.fallback : "no fallback");
	} else if (s.r && !e->result[0]) {
		snprintf(e->result, sizeof(e->result), "send failed: %s", strerror(-s.r));
	}
}

/* The ends that are not TLS: what a plain migration end or a broken peer does. */
static void misbehave(struct end *e)
{
	static const unsigned char client_hello_start[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01 };
	char buf[4096];

	switch (e->kind) {
	case SIDE_PLAIN: /* a frame-like greeting, as an end without TLS sends */
		memset(buf, 'P', 64);
		if (write(e->fd, buf, 64) != 64)
			break;
		(void)!read(e->fd, buf, sizeof(buf));
		break;
	case SIDE_TRUNCATE: /* the start of a ClientHello, then gone */
		(void)!write(e->fd, client_hello_start, sizeof(client_hello_start));
		break;
	case SIDE_SILENT:
		(void)!read(e->fd, buf, sizeof(buf)); /* until the other end gives up */
		break;
	case SIDE_TLS:
		break;
	}
	snprintf(e->result, sizeof(e->result), "not TLS (%s)",
		 e->kind == SIDE_PLAIN	  ? "plain"
		 : e->kind == SIDE_SILENT ? "silent"
					  : "truncated");
}

static void *run_end(void *arg)
{
	struct end *e = arg;
	struct mig_tls_ctx *ctx = NULL;
	struct mig_tls *t = NULL;
	char err[400] = "";
	int r;

	if (e->kind != SIDE_TLS) {
		misbehave(e);
		shutdown(e->fd, SHUT_RDWR);
		return NULL;
	}
	if (sndbuf && setsockopt(e->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0) {
		snprintf(e->result, sizeof(e->result), "SO_SNDBUF: %s", strerror(errno));
		return NULL;
	}
	r = mig_tls_ctx_new(&e->opts, e->server, &ctx, err, sizeof(err));
	if (!r)
		r = mig_tls_handshake(ctx, e->fd, e->timeout_ms, &t, err, sizeof(err));
	if (r < 0)
		snprintf(e->result, sizeof(e->result), "%s", err);
	else
		exchange(e, t);
	mig_tls_free(t);
	mig_tls_ctx_free(ctx);
	shutdown(e->fd, SHUT_RDWR); /* the other end must not wait for us */
	return NULL;
}

/* A connected loopback TCP pair: fds[0] accepted (server), fds[1] connected. */
static int tcp_pair(int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		return -errno;
	fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fds[1] < 0 || connect(fds[1], (struct sockaddr *)&a, sizeof(a)) < 0)
		return -errno;
	fds[0] = accept(l, NULL, NULL);
	close(l);
	return fds[0] < 0 ? -errno : 0;
}

static int parse_side(const char *flag, const char *value, struct end *srv, struct end *cli)
{
	struct end *e = !strncmp(flag, "--server-", 9) ? srv : cli;
	const char *what = flag + 9; /* after "--server-" or "--client-" */

	if (strncmp(flag, "--server-", 9) && strncmp(flag, "--client-", 9))
		return -1;
	if (!strcmp(what, "creds"))
		e->opts.creds_dir = value;
	else if (!strcmp(what, "psk"))
		e->opts.psk_file = value;
	else if (!strcmp(what, "plain"))
		e->kind = SIDE_PLAIN;
	else if (!strcmp(what, "silent") && e == cli)
		e->kind = SIDE_SILENT;
	else if (!strcmp(what, "truncate") && e == cli)
		e->kind = SIDE_TRUNCATE;
	else
		return -1;
	return (!strcmp(what, "creds") || !strcmp(what, "psk")) ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct end srv = { .name = "server", .server = true }, cli = { .name = "client" };
	int fds[2] = { -1, -1 }, r;
	pthread_t ts, tc;

	signal(SIGPIPE, SIG_IGN); /* as in the VMM: a dead peer is an error, not a signal */
	srv.bytes = cli.bytes = 4 << 20;
	srv.timeout_ms = cli.timeout_ms = 30000;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--hostname") && v) {
			cli.opts.hostname = v;
			i++;
		} else if (!strcmp(argv[i], "--bytes") && v) {
			srv.bytes = cli.bytes = strtoull(v, NULL, 0);
			i++;
		} else if (!strcmp(argv[i], "--mixed")) {
			mixed = true;
		} else if (!strcmp(argv[i], "--sndbuf") && v) {
			sndbuf = atoi(v);
			i++;
		} else if (!strcmp(argv[i], "--timeout-ms") && v) {
			srv.timeout_ms = cli.timeout_ms = atoi(v);
			i++;
		} else if ((r = parse_side(argv[i], v, &srv, &cli)) >= 0 && (r == 0 || v)) {
			i += r;
		} else {
			fprintf(stderr,
				"mig-tls-check: bad argument '%s' (see the source's header)\n",
				argv[i]);
			return 2;
		}
	}
	r = tcp_pair(fds);
	if (r < 0) {
		fprintf(stderr, "mig-tls-check: loopback TCP: %s\n", strerror(-r));
		return 2;
	}
	srv.fd = fds[0];
	cli.fd = fds[1];
	if (pthread_create(&ts, NULL, run_end, &srv) || pthread_create(&tc, NULL, run_end, &cli)) {
		fprintf(stderr, "mig-tls-check: cannot start the two ends' threads\n");
		return 2;
	}
	pthread_join(ts, NULL);
	pthread_join(tc, NULL);
	printf("server: %s\nclient: %s\n", srv.result, cli.result);
	close(fds[0]);
	close(fds[1]);
	if (!srv.ok || !cli.ok)
		return 1;
	/* Each byte was checked where it arrived; the CRC32C of each direction checks the order. */
	if (srv.crc_sent != cli.crc_received || cli.crc_sent != srv.crc_received) {
		fprintf(stderr,
			"mig-tls-check: the CRC32C of a direction differs between its ends\n");
		return 1;
	}
	return 0;
}
