// SPDX-License-Identifier: GPL-2.0
/*
 * tls-pingpong: what the TLS layer adds to one demand fault's two hops, with
 * nothing else on the link (docs/security.md, "Cost").
 *
 *   build/bin/mig-tls-pingpong [--tls-creds DIR] [--rounds N] [--stream MIB]
 *
 * Two threads over loopback TCP (TCP_NODELAY, as the agent's channels):
 * the client sends a request the size of a PAGE_REQUEST frame and waits for
 * a reply the size of a PAGE frame, N times (default 5000); the server
 * answers each.  Plain: blocking read()/write() on the sockets.  With
 * --tls-creds (x509, QEMU's layout, server name 127.0.0.1): the same bytes
 * through migrate/tls.h, as the agent's urgent channel sends them.  Prints
 * the round trip's p50, p90 and p99.
 *
 * --stream MIB: the push's side instead, one way: the client sends MIB of
 * page frames (a header and a 4 KiB page each) in 256 KiB batches, as the
 * push does; the server takes whatever has arrived into a 256 KiB buffer,
 * as the connection's receive does, then answers one byte.  Prints the
 * rate (MiB/s from the first send to that answer) and the CPU time of the
 * sending and the receiving thread.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h" /* struct mig_lat: the agent's own percentiles */
#include "migrate/net.h"
#include "migrate/tls.h"
#include "migrate/wire.h"

/* A PAGE_REQUEST frame for one page, a PAGE frame of one raw page. */
#define REQUEST_BYTES                                                                              \
	(sizeof(struct mig_frame_hdr) + sizeof(struct mig_page_request) + sizeof(uint64_t))
#define REPLY_BYTES (sizeof(struct mig_frame_hdr) + sizeof(struct mig_page) + PAGE_SIZE)

struct end {
	int fd;
	struct mig_tls *tls; /* NULL: plain */
};

static int end_send(struct end *e, const void *buf, size_t len)
{
	if (e->tls)
		return mig_tls_send(e->tls, buf, len, 10000);
	for (size_t done = 0; done < len;) {
		ssize_t n = write(e->fd, (const char *)buf + done, len - done);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

static int end_recv(struct end *e, void *buf, size_t len)
{
	char err[200];
	for (size_t done = 0; done < len;) {
		ssize_t n = e->tls ? mig_tls_recv(e->tls, (char *)buf + done, len - done, 10000,
						  err, sizeof(err))
				   : read(e->fd, (char *)buf + done, len - done);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

/* Connected socket fd as one end: TLS on it when ctx is given. */
static int end_open(struct end *e, int fd, struct mig_tls_ctx *ctx)
{
	char err[300];
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	e->fd = fd;
	e->tls = NULL;
	if (!ctx)
		return 0;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); /* as the agent's */
	if (mig_tls_handshake(ctx, fd, 10000, &e->tls, err, sizeof(err))) {
		fprintf(stderr, "mig-tls-pingpong: %s\n", err);
		return -1;
	}
	return 0;
}

struct server {
	int lfd, rounds;
	struct mig_tls_ctx *ctx;
	int failed;
	uint64_t stream; /* bytes, 0: ping-pong */
	double cpu_ms;	 /* stream: of the receiving thread */
};

#define BATCH (256u << 10)
#define FRAME (sizeof(struct mig_frame_hdr) + PAGE_SIZE)

static double thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whatever has arrived, up to len: as net.c's fill() takes it. */
static ssize_t end_recv_some(struct end *e, void *buf, size_t len)
{
	char err[200];
	return e->tls ? mig_tls_recv(e->tls, buf, len, 10000, err, sizeof(err))
		      : read(e->fd, buf, len);
}

static void stream_receive(struct server *s, struct end *e)
{
	static uint8_t buf[BATCH];
	double cpu = thread_cpu_ms();
	uint64_t got = 0;

	while (got < s->stream) {
		ssize_t n = end_recv_some(e, buf, sizeof(buf));
		if (n <= 0) {
			s->failed = 1;
			return;
		}
		got += (uint64_t)n;
	}
	s->cpu_ms = thread_cpu_ms() - cpu;
	if (end_send(e, buf, 1))
		s->failed = 1;
}

static void *server_thread(void *arg)
{
	struct server *s = arg;
	static char req[REQUEST_BYTES], reply[REPLY_BYTES];
	struct end e;
	int fd = accept(s->lfd, NULL, NULL);
	if (fd < 0 || end_open(&e, fd, s->ctx)) {
		s->failed = 1;
		return NULL;
	}
	if (s->stream)
		stream_receive(s, &e);
	for (int i = 0; i < s->rounds && !s->stream && !s->failed; i++)
		if (end_recv(&e, req, sizeof(req)) || end_send(&e, reply, sizeof(reply)))
			s->failed = 1;
	mig_tls_free(e.tls);
	close(fd);
	return NULL;
}

/* The client's side: rounds round trips, their times into rtt. */
static int client(const struct sockaddr_in *sa, struct mig_tls_ctx *ctx, int rounds,
		  struct mig_lat *rtt)
{
	static char req[REQUEST_BYTES], reply[REPLY_BYTES];
	struct end e;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ||
	    end_open(&e, fd, ctx))
		return -1;
	int r = 0;
	for (int i = 0; i < rounds && !r; i++) {
		uint64_t t0 = now_ns();
		r = end_send(&e, req, sizeof(req)) || end_recv(&e, reply, sizeof(reply));
		mig_lat_add(rtt, now_ns() - t0);
	}
	mig_tls_free(e.tls);
	close(fd);
	return r ? -1 : 0;
}

/* The client's side of --stream: bytes in batches of whole frames; MiB/s, its CPU ms. */
static int stream_send(const struct sockaddr_in *sa, struct mig_tls_ctx *ctx, uint64_t bytes,
		       double *mib_s, double *cpu_ms)
{
	static uint8_t batch[BATCH / FRAME * FRAME];
	struct end e;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ||
	    end_open(&e, fd, ctx))
		return -1;
	for (size_t i = 0; i < sizeof(batch); i++) /* incompressible enough: no zero pages */
		batch[i] = (uint8_t)(i * 2654435761u >> 13);
	double cpu = thread_cpu_ms();
	uint64_t t0 = now_ns(), sent = 0;
	int r = 0;
	while (sent < bytes && !r) {
		size_t n = bytes - sent < sizeof(batch) ? (size_t)(bytes - sent) : sizeof(batch);
		r = end_send(&e, batch, n);
		sent += n;
	}
	char ack;
	if (!r)
		r = end_recv(&e, &ack, 1);
	*mib_s = (double)bytes / (1 << 20) / ((double)(now_ns() - t0) / 1e9);
	*cpu_ms = thread_cpu_ms() - cpu;
	mig_tls_free(e.tls);
	close(fd);
	return r ? -1 : 0;
}

static int load_creds(const char *dir, struct mig_tls_ctx **sctx, struct mig_tls_ctx **cctx)
{
	struct mig_tls_opts so = { .creds_dir = dir };
	struct mig_tls_opts co = { .creds_dir = dir, .hostname = "127.0.0.1" };
	char err[300];
	if (mig_tls_ctx_new(&so, true, sctx, err, sizeof(err)) ||
	    mig_tls_ctx_new(&co, false, cctx, err, sizeof(err))) {
		fprintf(stderr, "mig-tls-pingpong: %s\n", err);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *creds = NULL;
	int rounds = 5000;
	uint64_t stream = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tls-creds") && i + 1 < argc)
			creds = argv[++i];
		else if (!strcmp(argv[i], "--stream") && i + 1 < argc)
			stream = strtoull(argv[++i], NULL, 0) << 20;
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else
			rounds = 0;
	}
	if (rounds < 100) {
		fprintf(stderr, "usage: mig-tls-pingpong [--tls-creds DIR] [--rounds N>=100] "
				"[--stream MIB]\n");
		return 2;
	}
	struct server s = { .rounds = rounds, .stream = stream };
	struct mig_tls_ctx *cctx = NULL;
	if (creds && load_creds(creds, &s.ctx, &cctx))
		return 1;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	s.lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct mig_lat rtt = { 0 };
	pthread_t th;
	if (s.lfd < 0 || bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(s.lfd, (struct sockaddr *)&sa, &sl) || listen(s.lfd, 1) ||
	    pthread_create(&th, NULL, server_thread, &s)) {
		perror("mig-tls-pingpong: set-up");
		return 1;
	}
	double mib_s = 0, cpu_ms = 0;
	int r = stream ? stream_send(&sa, cctx, stream, &mib_s, &cpu_ms)
		       : client(&sa, cctx, rounds, &rtt);
	pthread_join(th, NULL);
	if (stream) {
		if (r || s.failed) {
			fprintf(stderr, "mig-tls-pingpong: the stream failed\n");
			return 1;
		}
		printf("%s: stream of %llu MiB in %u-byte batches: %.1f MiB/s, CPU ms sender %.0f "
		       "receiver %.0f\n",
		       creds ? "tls" : "plain", (unsigned long long)(stream >> 20),
		       (unsigned)(BATCH / FRAME * FRAME), mib_s, cpu_ms, s.cpu_ms);
		return 0;
	}
	if (r || s.failed || rtt.n != (uint64_t)rounds) {
		fprintf(stderr, "mig-tls-pingpong: the exchange failed\n");
		return 1;
	}
	printf("%s: %d round trips of %zu + %zu bytes: p50 %.1f us, p90 %.1f us, p99 %.1f us\n",
	       creds ? "tls" : "plain", rounds, REQUEST_BYTES, REPLY_BYTES,
	       (double)mig_lat_pct(&rtt, 50) / 1e3, (double)mig_lat_pct(&rtt, 90) / 1e3,
	       (double)mig_lat_pct(&rtt, 99) / 1e3);
	mig_tls_ctx_free(s.ctx);
	mig_tls_ctx_free(cctx);
	free(rtt.ns);
	close(s.lfd);
	return 0;
}
