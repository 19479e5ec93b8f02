// SPDX-License-Identifier: GPL-2.0
/*
 * TCP transport for wire.h frames: framed send with gathered payloads,
 * buffered and fully checked receive (addresses, connect and listen: addr.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "lock-rank.h"
#include "migrate/auth.h"
#include "migrate/net.h"

#define RBUF_MIN (256u << 10)

uint64_t mig_realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mig_conn_init(struct mig_conn *c, int fd, const char *name, int peer_role, uint32_t features)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->name = name;
	c->wire.peer_role = peer_role;
	c->wire.features = features;
	pthread_mutex_init(&c->tx_lock, NULL);
	c->rcap = RBUF_MIN;
	c->rbuf = malloc(c->rcap);
	if (!c->rbuf)
		return -ENOMEM;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->last_rx_ns = c->last_tx_ns = c->last_frame_ns = now_ns();
	return 0;
}

void mig_conn_set_liveness(struct mig_conn *c, int idle_ms)
{
	int one = 1, idle_s = idle_ms / 2000 > 0 ? idle_ms / 2000 : 1, intvl = 1, cnt = 3;
	unsigned int user_timeout = (unsigned int)idle_ms;
	setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(c->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
	setsockopt(c->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(c->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
	/* A send blocked that long (the peer reads nothing) fails: -ETIMEDOUT. */
	struct timeval tv = { .tv_sec = idle_ms / 1000, .tv_usec = (idle_ms % 1000) * 1000 };
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c->snd_timeout_ms = idle_ms; /* for back ends that wait themselves */
}

void mig_conn_set_rcvtimeo(struct mig_conn *c, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	c->rcv_timeout_ms = ms;
}

void mig_conn_set_deadline(struct mig_conn *c, uint64_t deadline_ns)
{
	c->deadline_ns = deadline_ns;
	if (!deadline_ns) /* back to the configured per-receive timeout */
		mig_conn_set_rcvtimeo(c, c->rcv_timeout_ms);
}

int mig_conn_binding(struct mig_conn *c, uint8_t *out)
{
	if (c->io && c->io->binding)
		return c->io->binding(c, out);
	memset(out, 0, MIG_SECRET_LEN);
	return 0;
}

void mig_conn_wipe_rx(struct mig_conn *c, const uint8_t *p, size_t len)
{
	/* Only inside the buffer: p is const to callers, the buffer is ours. */
	if (c->rbuf && p >= c->rbuf && len <= c->rcap && (size_t)(p - c->rbuf) <= c->rcap - len)
		mig_auth_wipe(c->rbuf + (p - c->rbuf), len);
}

void mig_conn_secrets_done(struct mig_conn *c)
{
	if (c->io && c->io->secrets_done)
		c->io->secrets_done(c);
}

bool mig_conn_next_is(const struct mig_conn *c, uint16_t type)
{
	struct mig_frame_hdr h;

	if (mig_conn_buffered(c) < sizeof(h))
		return false;
	memcpy(&h, c->rbuf + c->rstart, sizeof(h));
	return h.type == type && mig_conn_buffered(c) - sizeof(h) >= h.len;
}

void mig_conn_ping_if_quiet(struct mig_conn *c, uint64_t now, uint64_t quiet_ns)
{
	uint64_t last = __atomic_load_n(&c->last_tx_ns, __ATOMIC_RELAXED);
	if (now > last && now - last >= quiet_ns)
		mig_conn_send(c, MIG_MSG_PING, NULL, 0, NULL, 0);
}

void mig_conn_close(struct mig_conn *c)
{
	if (c->io)
		c->io->close(c);
	c->io = NULL;
	c->io_ctx = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->rbuf);
	c->rbuf = NULL;
	c->rcap = c->rstart = c->rend = 0;
}

void mig_conn_kick(struct mig_conn *c)
{
	if (c->fd >= 0)
		shutdown(c->fd, SHUT_RDWR);
}

/* ---- The plain TCP back end (c->io == NULL) ---- */

static int plain_send(struct mig_conn *c, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = sendmsg(c->fd, &(struct msghdr){ .msg_iov = iov, .msg_iovlen = n },
				    MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		mig_iov_advance(&iov, &n, (size_t)w);
	}
	return 0;
}

/* SO_RCVTIMEO bounds the blocking wait; EAGAIN is its expiry. */
static ssize_t plain_recv(struct mig_conn *c, void *buf, size_t len, int flags)
{
	for (;;) {
		ssize_t n = recv(c->fd, buf, len, flags);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK)
			return -EAGAIN;
		snprintf(c->io_err, sizeof(c->io_err), "receive failed: %s", strerror(errno));
		return -errno;
	}
}

static int io_send(struct mig_conn *c, struct iovec *iov, int n)
{
	return c->io ? c->io->send(c, iov, n) : plain_send(c, iov, n);
}

static ssize_t io_recv(struct mig_conn *c, void *buf, size_t len, bool wait)
{
	return c->io ? c->io->recv(c, buf, len, wait)
		     : plain_recv(c, buf, len, wait ? 0 : MSG_DONTWAIT);
}

int mig_conn_raw_fd(const struct mig_conn *c)
{
	return c->io ? -1 : c->fd;
}

int mig_conn_write(struct mig_conn *c, const void *buf, size_t len)
{
	struct iovec iov = { (void *)buf, len };
	if (c->fd < 0)
		return -ENOTCONN;
	return io_send(c, &iov, 1);
}

int mig_conn_send(struct mig_conn *c, uint16_t type, const void *p1, size_t l1, const void *p2,
		  size_t l2)
{
	struct mig_frame_hdr h;
	uint32_t crc = mig_payload_crc_off(&c->wire, type) ? 0 : crc32c(crc32c(0, p1, l1), p2, l2);
	mig_lock(&c->tx_lock, MIG_RANK_CONN_TX);
	if (c->fd < 0) {
		mig_unlock(&c->tx_lock);
		return -ENOTCONN;
	}
	mig_frame_hdr_init(&h, type, (uint32_t)(l1 + l2), c->tx_seq++, crc);
	struct iovec iov[3] = {
		{ &h, sizeof(h) },
		{ (void *)p1, l1 },
		{ (void *)p2, l2 },
	};
	int r = io_send(c, iov, 3);
	if (r == 0) {
		mig_conn_sent(c, now_ns());
		c->tx_bytes += sizeof(h) + l1 + l2;
		c->tx_hdr += sizeof(h);
	}
	mig_unlock(&c->tx_lock);
	return r;
}

size_t mig_conn_put(struct mig_conn *c, uint8_t *buf, uint16_t type, const void *p1, size_t l1,
		    const void *p2, size_t l2)
{
	struct mig_frame_hdr h;
	if (l1) /* p1 may be NULL for an empty payload (PING) */
		memcpy(buf + sizeof(h), p1, l1);
	if (l2)
		memcpy(buf + sizeof(h) + l1, p2, l2);
	uint32_t crc =
	    mig_payload_crc_off(&c->wire, type) ? 0 : crc32c(0, buf + sizeof(h), l1 + l2);
	mig_frame_hdr_init(&h, type, (uint32_t)(l1 + l2), c->tx_seq++, crc);
	memcpy(buf, &h, sizeof(h));
	c->tx_bytes += sizeof(h) + l1 + l2;
	c->tx_hdr += sizeof(h);
	return sizeof(h) + l1 + l2;
}

/*
 * With a total deadline: the receive about to block waits at most until
 * then (-EAGAIN once it passed, as a receive timeout).  The socket's
 * SO_RCVTIMEO is set for each wait: a system call, but only while a
 * handshake or an awaited reply runs.
 */
static int apply_deadline(struct mig_conn *c)
{
	int ms;
	struct timeval tv;

	if (!c->deadline_ns)
		return 0;
	ms = mig_conn_wait_ms(c);
	if (ms == 0)
		return -EAGAIN;
	if (!c->io) {
		tv = (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	return 0;
}

int mig_conn_wait_ms(const struct mig_conn *c)
{
	uint64_t now, left;

	if (!c->deadline_ns)
		return c->rcv_timeout_ms ? c->rcv_timeout_ms : -1;
	now = now_ns();
	if (now >= c->deadline_ns)
		return 0;
	left = (c->deadline_ns - now + 999999) / 1000000;
	if (c->rcv_timeout_ms && (uint64_t)c->rcv_timeout_ms < left)
		left = (uint64_t)c->rcv_timeout_ms;
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

/*
 * One blocking read of up to len bytes into buf: their count, or -errno
 * (0: the peer closed).  all: len bytes are expected, so on plain TCP the
 * kernel gathers them before it returns (MSG_WAITALL: one system call,
 * not one per segment that wakes us; a timeout still ends it early).
 */
static ssize_t read_some(struct mig_conn *c, void *buf, size_t len, bool all)
{
	int r = apply_deadline(c);
	if (r)
		return r;
	ssize_t n =
	    all && !c->io ? plain_recv(c, buf, len, MSG_WAITALL) : io_recv(c, buf, len, true);
	if (n > 0) {
		c->rx_bytes += n;
		__atomic_store_n(&c->last_rx_ns, now_ns(), __ATOMIC_RELAXED);
	}
	return n;
}

/*
 * Make at least need bytes available at rbuf + rstart, reading no more
 * than max bytes past rstart (max < need: need), so that what follows can
 * be read somewhere else.
 */
static int fill_max(struct mig_conn *c, size_t need, size_t max)
{
	if (c->rend - c->rstart >= need)
		return 0;
	if (need > c->rcap) {
		uint8_t *nb = malloc(need);
		if (!nb)
			return -ENOMEM;
		memcpy(nb, c->rbuf + c->rstart, c->rend - c->rstart);
		free(c->rbuf);
		c->rbuf = nb;
		c->rcap = need;
		c->rend -= c->rstart;
		c->rstart = 0;
	} else if (c->rcap - c->rstart < need) {
		memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
		c->rend -= c->rstart;
		c->rstart = 0;
	}
	if (max < need || max > c->rcap - c->rstart)
		max = max < need ? need : c->rcap - c->rstart;
	c->io_err[0] = 0;
	while (c->rend - c->rstart < need) {
		ssize_t n = read_some(c, c->rbuf + c->rend, c->rstart + max - c->rend, false);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return c->rend == c->rstart ? -ECONNRESET : -EPIPE;
		c->rend += n;
	}
	return 0;
}

static int fill(struct mig_conn *c, size_t need)
{
	return fill_max(c, need, c->rcap);
}

/* Exactly len bytes from the connection into buf (nothing buffered): 0 or -errno. */
static int read_into(struct mig_conn *c, uint8_t *buf, size_t len)
{
	c->io_err[0] = 0;
	while (len) {
		ssize_t n = read_some(c, buf, len, true);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EPIPE;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int recv_one(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload, char *err,
		    size_t errlen);

/*
 * Does a plain stream begin with a TLS record header (handshake or alert,
 * version 3.x)?  Then the peer was given TLS and this end was not.
 */
static bool tls_record(const uint8_t *b)
{
	return (b[0] == 0x16 || b[0] == 0x15) && b[1] == 3 && b[2] <= 4;
}

int mig_conn_recv(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload, char *err,
		  size_t errlen)
{
	int r;
	do
		r = recv_one(c, h, payload, err, errlen);
	while (r == 0 && h->type == MIG_MSG_PING);
	return r;
}

/*
 * Nothing buffered: one non-blocking read.  0 when bytes came, -EAGAIN when
 * none were there, another -errno with err (the peer closed, the link or
 * the session broke).
 */
static int try_read(struct mig_conn *c, char *err, size_t errlen)
{
	ssize_t n;

	if (c->rend == c->rstart)
		c->rstart = c->rend = 0;
	c->io_err[0] = 0;
	n = io_recv(c, c->rbuf + c->rend, c->rcap - c->rend, false);
	if (n > 0) {
		c->rend += n;
		c->rx_bytes += n;
		__atomic_store_n(&c->last_rx_ns, now_ns(), __ATOMIC_RELAXED);
		return 0;
	}
	if (n == -EAGAIN || n == -EWOULDBLOCK)
		return -EAGAIN;
	if (n == 0)
		snprintf(err, errlen, "%s channel: connection closed by peer", c->name);
	else if (c->io_err[0])
		snprintf(err, errlen, "%s channel: %s", c->name, c->io_err);
	else
		snprintf(err, errlen, "%s channel: receive failed: %s", c->name, strerror((int)-n));
	return n ? (int)n : -ECONNRESET;
}

int mig_conn_recv_ready(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload,
			char *err, size_t errlen)
{
	int r;

	do {
		r = c->rend > c->rstart ? 0 : try_read(c, err, errlen);
		if (!r)
			r = recv_one(c, h, payload, err, errlen);
	} while (r == 0 && h->type == MIG_MSG_PING);
	return r;
}

/* The why of a failed fill() of a frame header (r: its -errno). */
static int header_fill_failed(struct mig_conn *c, int r, char *err, size_t errlen)
{
	if (r == -EAGAIN || r == -EWOULDBLOCK) {
		snprintf(err, errlen, "%s channel: peer silent (nothing received in time)",
			 c->name);
		return -ETIMEDOUT;
	}
	if (c->io_err[0])
		snprintf(err, errlen, "%s channel: %s", c->name, c->io_err);
	else if (r == -EPIPE)
		snprintf(err, errlen, "%s channel: connection closed inside a frame header",
			 c->name);
	else if (r == -ECONNRESET)
		snprintf(err, errlen, "%s channel: connection closed by peer", c->name);
	else
		snprintf(err, errlen, "%s channel: receive failed: %s", c->name, strerror(-r));
	return r;
}

/* The why of a failed fill() of h's payload (r: its -errno). */
static int payload_fill_failed(struct mig_conn *c, const struct mig_frame_hdr *h, int r, char *err,
			       size_t errlen)
{
	if (r == -EAGAIN || r == -EWOULDBLOCK) {
		snprintf(err, errlen, "%s channel: peer silent inside a %s frame", c->name,
			 mig_msg_name(h->type));
		return -ETIMEDOUT;
	}
	if (c->io_err[0]) {
		snprintf(err, errlen, "%s channel: inside a %s frame: %s", c->name,
			 mig_msg_name(h->type), c->io_err);
	} else if (r == -ECONNRESET || r == -EPIPE) {
		r = -EPIPE;
		snprintf(err, errlen,
			 "%s channel: truncated %s frame (connection closed inside its "
			 "%u-byte payload)",
			 c->name, mig_msg_name(h->type), h->len);
	} else {
		snprintf(err, errlen, "%s channel: receive failed: %s", c->name, strerror(-r));
	}
	return r;
}

/*
 * The next frame's header, read and checked (reading at most max bytes
 * ahead): 0, or -errno with err.
 */
static int recv_header(struct mig_conn *c, struct mig_frame_hdr *h, size_t max, char *err,
		       size_t errlen)
{
	char why[200];
	int r = fill_max(c, sizeof(*h), max);
	if (r)
		return header_fill_failed(c, r, err, errlen);
	memcpy(h, c->rbuf + c->rstart, sizeof(*h));
	r = mig_check_hdr(h, why, sizeof(why));
	if (r && !c->io && tls_record(c->rbuf + c->rstart)) {
		snprintf(err, errlen,
			 "%s channel: the peer speaks TLS, this end does not (give both ends "
			 "--tls-creds or --tls-psk)",
			 c->name);
		return -EPROTO;
	}
	if (r) {
		snprintf(err, errlen, "%s channel: rejected frame: %s", c->name, why);
		return r;
	}
	if (c->wire.frame_limit && h->len > c->wire.frame_limit) {
		snprintf(err, errlen,
			 "%s channel: rejected %s frame of %u bytes before the handshake completed "
			 "(limit %u)",
			 c->name, mig_msg_name(h->type), h->len, c->wire.frame_limit);
		return -EMSGSIZE;
	}
	return 0;
}

/*
 * The frame at rstart, its first head bytes of payload buffered, the rest
 * (if any) in data: checked, and consumed from the buffer with the skip
 * bytes after it (copied to data).
 */
static int took_frame(struct mig_conn *c, const struct mig_frame_hdr *h, size_t head, size_t skip,
		      const uint8_t *data, char *err, size_t errlen)
{
	char why[200];
	int r = mig_check_parts(&c->wire, h, c->rbuf + c->rstart + sizeof(*h), (uint32_t)head, data,
				why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "%s channel: rejected %s frame: %s", c->name,
			 mig_msg_name(h->type), why);
		return r;
	}
	c->rstart += sizeof(*h) + head + skip;
	if (c->rstart == c->rend)
		c->rstart = c->rend = 0;
	if (h->type != MIG_MSG_PING)
		__atomic_store_n(&c->last_frame_ns, now_ns(), __ATOMIC_RELAXED);
	else if (c->wire.frame_limit) {
		snprintf(err, errlen, "%s channel: PING before the handshake completed", c->name);
		return -EPROTO;
	}
	return 0;
}

/* The payload of the frame whose header was just read, through the buffer. */
static int recv_payload(struct mig_conn *c, const struct mig_frame_hdr *h, const uint8_t **payload,
			char *err, size_t errlen)
{
	int r = fill(c, sizeof(*h) + h->len);
	if (r)
		return payload_fill_failed(c, h, r, err, errlen);
	*payload = c->rbuf + c->rstart + sizeof(*h);
	return took_frame(c, h, h->len, 0, NULL, err, errlen);
}

static int recv_one(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload, char *err,
		    size_t errlen)
{
	int r = recv_header(c, h, c->rcap, err, errlen);
	return r ? r : recv_payload(c, h, payload, err, errlen);
}

/*
 * A raw PAGE_RUN whose header was just read: its struct into the buffer,
 * its pages into pages[cap]: what was read ahead of them copied, the rest
 * (of a run longer than what had come) read in place.  Anything else, or a run that does not fit, goes
 * through the buffer (and the parser says what is wrong with it).
 */
static int recv_run(struct mig_conn *c, const struct mig_frame_hdr *h, const uint8_t **payload,
		    uint8_t *pages, size_t cap, char *err, size_t errlen)
{
	struct mig_page_run run;
	size_t head = sizeof(*h) + sizeof(run);
	if (h->len <= sizeof(run))
		return recv_payload(c, h, payload, err, errlen);
	int r = fill(c, head);
	if (r)
		return payload_fill_failed(c, h, r, err, errlen);
	memcpy(&run, c->rbuf + c->rstart + sizeof(*h), sizeof(run));
	size_t len = h->len - sizeof(run);
	if (run.encoding != MIG_PAGE_RAW || len > cap || len != (uint64_t)run.count * PAGE_SIZE)
		return recv_payload(c, h, payload, err, errlen);
	size_t have = c->rend - c->rstart - head;
	if (have > len)
		have = len;
	memcpy(pages, c->rbuf + c->rstart + head, have);
	if (have < len) { /* every buffered byte was the run's: the rest in place */
		r = read_into(c, pages + have, len - have);
		if (r)
			return payload_fill_failed(c, h, r, err, errlen);
	}
	*payload = c->rbuf + c->rstart + sizeof(*h);
	return took_frame(c, h, sizeof(run), have, pages, err, errlen);
}

int mig_conn_recv_pages(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload,
			uint8_t *pages, size_t cap, char *err, size_t errlen)
{
	int r;
	do {
		/*
		 * Read ahead as far as the buffer goes: reading only up to a
		 * run's struct cost two system calls per frame, and the push's
		 * runs are short where zero and other pages alternate (2 pages
		 * on average in mig-memtest: 4x the receives, +40% CPU).
		 */
		r = recv_header(c, h, c->rcap, err, errlen);
		if (!r && h->type == MIG_MSG_PAGE_RUN)
			r = recv_run(c, h, payload, pages, cap, err, errlen);
		else if (!r)
			r = recv_payload(c, h, payload, err, errlen);
	} while (r == 0 && h->type == MIG_MSG_PING);
	return r;
}
