/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Transport: TCP connections carrying wire.h frames.  One struct mig_conn
 * per connection; sending is serialized by its tx lock, receiving belongs to
 * one thread at a time.  Every received frame is checked (header, payload
 * CRC, message contract) before mig_conn_recv() hands it out.
 */
#ifndef MIGRATE_NET_H
#define MIGRATE_NET_H

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "migrate/wire.h"

struct mig_spin;

struct mig_conn {
	int fd;
	const char *name; /* "urgent" or "bulk", for messages */
	struct mig_wire_ctx wire;
	pthread_mutex_t tx_lock;
	uint32_t tx_seq;
	uint8_t *rbuf;
	size_t rcap, rstart, rend;
	struct mig_spin *spin; /* NULL: blocking recv; else a spinning policy (spin.h) */
	uint64_t tx_bytes;     /* every byte sent, headers included */
	uint64_t tx_hdr;       /* bytes of frame headers sent */
	uint64_t rx_bytes;
	uint64_t last_rx_ns; /* mig_now_ns() of the last bytes received (atomic) */
	uint64_t last_tx_ns; /* ... and of the last bytes sent (atomic) */
};

/* Parse "tcp:HOST:PORT" (HOST a dotted IPv4 address or "localhost"). */
int mig_addr_parse(const char *spec, struct sockaddr_in *sa, char *err, size_t errlen);

/* A listening socket (SO_REUSEADDR), or -errno with a message. */
int mig_listen(const struct sockaddr_in *sa, char *err, size_t errlen);

/* A connected socket within timeout_ms, or -errno with a message. */
int mig_connect(const struct sockaddr_in *sa, int timeout_ms, char *err, size_t errlen);

/* Set up c around a connected fd; peer_role is the role the peer must claim. */
int mig_conn_init(struct mig_conn *c, int fd, const char *name, int peer_role, uint32_t features);
/*
 * Let the kernel watch the link too: TCP keepalive probes after idle_ms / 2
 * of silence, TCP_USER_TIMEOUT = idle_ms (data unacknowledged that long
 * fails the connection), and a send blocked idle_ms fails (SO_SNDTIMEO).
 * A stalled peer process is caught by the heartbeats (PING): its kernel
 * still acknowledges.
 */
void mig_conn_set_liveness(struct mig_conn *c, int idle_ms);
/* Note that bytes were sent on c now (for senders that write the fd themselves). */
static inline void mig_conn_sent(struct mig_conn *c, uint64_t now)
{
	__atomic_store_n(&c->last_tx_ns, now, __ATOMIC_RELAXED);
}
/* When bytes last came in on c (mig_now_ns()). */
static inline uint64_t mig_conn_heard(const struct mig_conn *c)
{
	return __atomic_load_n(&c->last_rx_ns, __ATOMIC_RELAXED);
}
/* Send a heartbeat (PING) on c if nothing went out for quiet_ns. */
void mig_conn_ping_if_quiet(struct mig_conn *c, uint64_t now, uint64_t quiet_ns);
/* Close the socket (if open) and free the buffers. */
void mig_conn_close(struct mig_conn *c);
/* Make blocked send/recv on c return at once (from any thread); keeps the fd. */
void mig_conn_kick(struct mig_conn *c);

/*
 * Send one frame whose payload is p1[l1] followed by p2[l2] (either may be
 * empty).  Thread safe.  Returns 0 or -errno.
 */
int mig_conn_send(struct mig_conn *c, uint16_t type, const void *p1, size_t l1, const void *p2,
		  size_t l2);

/*
 * Write one frame into buf (which must have room for 24 + l1 + l2 bytes),
 * consuming a sequence number of c; for senders that batch frames and
 * write them themselves.  Returns the bytes written.
 */
size_t mig_conn_put(struct mig_conn *c, uint8_t *buf, uint16_t type, const void *p1, size_t l1,
		    const void *p2, size_t l2);

/* Bytes received and not yet handed out by mig_conn_recv(). */
static inline size_t mig_conn_buffered(const struct mig_conn *c)
{
	return c->rend - c->rstart;
}

/*
 * Receive and check the next frame.  On 0, *h is its header and *payload
 * points to h->len checked bytes, valid until the next call.  -ECONNRESET
 * when the peer closed the connection at a frame boundary, -EPIPE inside a
 * frame, -ETIMEDOUT when a receive timeout (SO_RCVTIMEO) expired, other
 * negative errnos for a rejected frame (message in err).  Heartbeats (PING)
 * are consumed here: callers never see them.
 */
int mig_conn_recv(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload, char *err,
		  size_t errlen);

/*
 * Is r (a negative errno from a send or mig_conn_recv()) a broken link,
 * which recovery may mend, rather than a hostile or broken peer?
 */
static inline int mig_link_error(int r)
{
	return r == -ECONNRESET || r == -EPIPE || r == -ENOTCONN || r == -ETIMEDOUT ||
	       r == -EHOSTUNREACH || r == -ENETUNREACH || r == -ECONNABORTED;
}

/* Monotonic and realtime clocks in nanoseconds. */
uint64_t mig_now_ns(void);
uint64_t mig_realtime_ns(void);

#endif /* MIGRATE_NET_H */
