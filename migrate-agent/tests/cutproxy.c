// SPDX-License-Identifier: GPL-2.0
/*
 * mig-cutproxy: a TCP forwarder that breaks the migration link on purpose.
 * It forwards every connection from --listen to --to, one thread per
 * direction (so one channel never waits behind another, as on a real link);
 * once --cut-after bytes have gone through (both directions together), it
 * resets every open connection, stays deaf for --down-ms (the listening
 * socket is closed, so reconnects are refused), then forwards again.
 *
 *   mig-cutproxy --listen tcp:H:P --to tcp:H:P --cut-after BYTES
 *                [--down-ms MS] [--cuts N] [--swallow-ms MS] [--rate BYTES]
 * --swallow-ms MS: when the threshold is reached, first silently drop what
 * both sides send for MS ms (a link that dies without a word: the senders'
 * writes succeed, nothing arrives), then reset.
 * --rate BYTES: each direction of each connection carries at most BYTES a
 * second (a slow link; with --cut-after 0 it never cuts).
 * --flip-after BYTES: flip one bit of the byte stream once that many bytes
 * went through, and forward on (an attacker, or a memory error on the way:
 * TLS must take it as a broken session; plain TCP has only the frame CRC).
 * --relay-psk FILE: after the first cut, the first connection (the source's
 * reconnecting urgent channel) is not forwarded but relayed by an insider
 * who holds the PSK: it ends the source's TLS session, opens its own to the
 * destination and passes HELLO and AUTH between the two, frame by frame.
 * Then it says whether the destination took the relayed proof ("relayed
 * proof refused" / "relayed proof ACCEPTED") and closes; later connections
 * are forwarded as before, so the real recovery can go on.
 * Prints one line on stderr for each cut; runs until killed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "migrate/net.h"
#include "migrate/tls.h"

#define MAXFDS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fds[MAXFDS];
static int nfds;
static unsigned long long moved;
static int swallowing;
static unsigned long long swallow_at; /* bytes; 0: never */
static unsigned long long rate;	      /* bytes a second a direction; 0: unlimited */
static unsigned long long flip_at;    /* bytes; 0: never */
/*
 * The next cut's threshold (0: no cut left).  A pump that crosses it stops
 * there until the main loop has cut: on a loaded host the main loop, which
 * looks every millisecond, was once scheduled only after a whole 24 MiB
 * migration had gone through, and the cut came too late to break anything.
 */
static unsigned long long cut_at;
static int cut_pending;
static int flipped;

struct dir {
	int from, to;
	int *refs; /* shared by the two directions of a pair */
};

static void track(int fd)
{
	pthread_mutex_lock(&lock);
	if (nfds < MAXFDS)
		fds[nfds++] = fd;
	pthread_mutex_unlock(&lock);
}

static void untrack_close(int fd)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nfds; i++)
		if (fds[i] == fd) {
			fds[i] = fds[--nfds];
			break;
		}
	close(fd);
	pthread_mutex_unlock(&lock);
}

/* Sleep until @sent bytes since @start_ns are within --rate. */
static void pace(uint64_t start_ns, unsigned long long sent)
{
	uint64_t due = start_ns + (uint64_t)(sent * 1000000000.0 / (double)rate), now = now_ns();
	if (due > now)
		nanosleep(&(struct timespec){ (time_t)((due - now) / 1000000000ull),
					      (long)((due - now) % 1000000000ull) },
			  NULL);
}

static void *pump(void *arg)
{
	struct dir *d = arg;
	static _Thread_local char buf[1 << 16];
	uint64_t start_ns = now_ns();
	unsigned long long sent = 0;
	for (;;) {
		ssize_t r = recv(d->from, buf, sizeof(buf), 0);
		if (r <= 0)
			break;
		if (__atomic_load_n(&swallowing, __ATOMIC_ACQUIRE))
			continue;
		unsigned long long m =
		    __atomic_add_fetch(&moved, (unsigned long long)r, __ATOMIC_RELAXED);
		if (flip_at && m >= flip_at &&
		    !__atomic_exchange_n(&flipped, 1, __ATOMIC_ACQ_REL)) {
			buf[r / 2] ^= 0x10;
			fprintf(stderr, "mig-cutproxy: flipped a bit after %llu bytes\n", m);
		}
		unsigned long long at = __atomic_load_n(&cut_at, __ATOMIC_ACQUIRE);
		if (at && m >= at && !swallow_at) { /* a swallow stops forwarding by itself */
			__atomic_store_n(&cut_pending, 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&cut_pending, __ATOMIC_ACQUIRE))
				nanosleep(&(struct timespec){ 0, 1000000L }, NULL);
			break; /* cut: this chunk is lost with the link */
		}
		if (send(d->to, buf, (size_t)r, MSG_NOSIGNAL) != r)
			break;
		sent += (unsigned long long)r;
		if (rate)
			pace(start_ns, sent);
		/* Start dropping at once, not at the next check of the main loop. */
		if (swallow_at && m >= swallow_at)
			__atomic_store_n(&swallowing, 1, __ATOMIC_RELEASE);
	}
	shutdown(d->to, SHUT_WR);
	shutdown(d->from, SHUT_RD);
	if (__atomic_sub_fetch(d->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		untrack_close(d->from);
		untrack_close(d->to);
		free(d->refs);
	}
	free(d);
	return NULL;
}

static void start_pair(int a, int b)
{
	int *refs = malloc(sizeof(*refs));
	*refs = 2;
	track(a);
	track(b);
	for (int k = 0; k < 2; k++) {
		struct dir *d = malloc(sizeof(*d));
		d->from = k ? b : a;
		d->to = k ? a : b;
		d->refs = refs;
		pthread_t t;
		if (pthread_create(&t, NULL, pump, d)) {
			fprintf(stderr, "mig-cutproxy: cannot start a forwarding thread\n");
			exit(1);
		}
		pthread_detach(t);
	}
}

static void cut_all(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nfds; i++) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		shutdown(fds[i], SHUT_RDWR);
	}
	pthread_mutex_unlock(&lock);
}

/* One frame from one TLS session into the other; 0, or -1 with a message. */
static int relay_frame(struct mig_conn *from, struct mig_conn *to, struct mig_frame_hdr *h)
{
	char err[300];
	const uint8_t *p;
	int r = mig_conn_recv(from, h, &p, err, sizeof(err));
	if (r) {
		fprintf(stderr, "mig-cutproxy: relay: %s\n", err);
		return -1;
	}
	return mig_conn_send(to, h->type, p, h->len, NULL, 0) ? -1 : 0;
}

/*
 * The insider's relay of one reconnecting urgent channel (a: from the
 * source, b: to the destination): HELLO both ways, the destination's
 * CHALLENGE, the source's PROOF and CHALLENGE; then the destination's
 * verdict.  Returns 1 when the destination accepted the relayed proof.
 */
static int relay_auth(int a, int b, const char *psk)
{
	struct mig_tls_opts o = { .psk_file = psk };
	struct mig_tls_ctx *sctx = NULL, *cctx = NULL;
	struct mig_conn src, dst;
	struct mig_frame_hdr h;
	char err[300];
	int accepted = 0;
	static const int from_src[] = { 1, 0, 0, 1,
					1 }; /* HELLO, HELLO, CHALLENGE, PROOF, CHALLENGE */

	mig_conn_init(&src, a, "relay-source", MIG_ROLE_SOURCE, MIG_FEAT_KNOWN);
	mig_conn_init(&dst, b, "relay-dest", MIG_ROLE_DEST, MIG_FEAT_KNOWN);
	mig_conn_set_rcvtimeo(&src, 5000);
	mig_conn_set_rcvtimeo(&dst, 5000);
	if (mig_tls_ctx_new(&o, true, &sctx, err, sizeof(err)) ||
	    mig_tls_ctx_new(&o, false, &cctx, err, sizeof(err)) ||
	    mig_tls_secure(sctx, &src, 5000, err, sizeof(err)) ||
	    mig_tls_secure(cctx, &dst, 5000, err, sizeof(err))) {
		fprintf(stderr, "mig-cutproxy: relay: %s\n", err);
		goto out;
	}
	for (unsigned k = 0; k < sizeof(from_src) / sizeof(from_src[0]); k++)
		if (relay_frame(from_src[k] ? &src : &dst, from_src[k] ? &dst : &src, &h))
			goto out;
	if (relay_frame(&dst, &src, &h))
		goto out;
	accepted = h.type == MIG_MSG_AUTH;
	fprintf(stderr, "mig-cutproxy: relayed proof %s by the destination (it answered %s)\n",
		accepted ? "ACCEPTED" : "refused", mig_msg_name(h.type));
out:
	mig_conn_close(&src);
	mig_conn_close(&dst);
	mig_tls_ctx_free(sctx);
	mig_tls_ctx_free(cctx);
	return accepted;
}

int main(int argc, char **argv)
{
	const char *relay_psk = NULL;
	const char *listen_s = NULL, *to_s = NULL;
	unsigned long long cut_after = 0;
	int down_ms = 500, cuts = 1, swallow_ms = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--listen"))
			listen_s = argv[i + 1];
		else if (!strcmp(argv[i], "--to"))
			to_s = argv[i + 1];
		else if (!strcmp(argv[i], "--cut-after"))
			cut_after = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--down-ms"))
			down_ms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--swallow-ms"))
			swallow_ms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--cuts"))
			cuts = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rate"))
			rate = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--flip-after"))
			flip_at = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--relay-psk"))
			relay_psk = argv[i + 1];
	}
	struct mig_addr la, ta;
	char err[200];
	if (!listen_s || !to_s || mig_addr_parse(listen_s, &la, err, sizeof(err)) ||
	    mig_addr_parse(to_s, &ta, err, sizeof(err))) {
		fprintf(stderr, "usage: mig-cutproxy --listen tcp:H:P --to tcp:H:P --cut-after N "
				"[--down-ms MS] [--cuts N] [--swallow-ms MS] [--rate BYTES]\n"
				"                    [--flip-after N] [--relay-psk FILE]\n");
		return 2;
	}
	if (swallow_ms)
		swallow_at = cut_after;
	signal(SIGPIPE, SIG_IGN); /* OpenSSL writes with write() (migrate/tls.h) */
	int lfd = mig_listen(&la, err, sizeof(err));
	if (lfd < 0) {
		fprintf(stderr, "mig-cutproxy: %s\n", err);
		return 1;
	}
	int done_cuts = 0;
	__atomic_store_n(&cut_at, cuts ? cut_after : 0, __ATOMIC_RELEASE);
	for (;;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		if (poll(&p, 1, 1) > 0) {
			int a = accept(lfd, NULL, NULL);
			int b = a >= 0 ? mig_connect(&ta, 2000, err, sizeof(err)) : -1;
			if (b >= 0 && relay_psk && done_cuts) {
				relay_auth(a, b, relay_psk);
				relay_psk = NULL; /* once */
			} else if (b >= 0)
				start_pair(a, b);
			else if (a >= 0)
				close(a);
		}
		if (done_cuts < cuts && cut_after &&
		    __atomic_load_n(&moved, __ATOMIC_RELAXED) >= cut_after) {
			done_cuts++;
			if (swallow_ms) {
				__atomic_store_n(&swallowing, 1, __ATOMIC_RELEASE);
				nanosleep(&(struct timespec){ swallow_ms / 1000,
							      (swallow_ms % 1000) * 1000000L },
					  NULL);
			}
			fprintf(stderr, "mig-cutproxy: cut %d after %llu bytes\n", done_cuts,
				moved);
			close(lfd);
			cut_all();
			nanosleep(&(struct timespec){ down_ms / 1000, (down_ms % 1000) * 1000000L },
				  NULL);
			lfd = mig_listen(&la, err, sizeof(err));
			if (lfd < 0) {
				fprintf(stderr, "mig-cutproxy: %s\n", err);
				return 1;
			}
			swallow_at = 0; /* one cut with swallowing is enough */
			__atomic_store_n(&moved, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&cut_at, done_cuts < cuts ? cut_after : 0,
					 __ATOMIC_RELEASE);
			__atomic_store_n(&cut_pending, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&swallowing, 0, __ATOMIC_RELEASE);
		}
	}
}
