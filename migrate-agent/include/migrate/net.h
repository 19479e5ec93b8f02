/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Transport: TCP connections carrying wire.h frames.  One struct mig_conn
 * per connection; sending is serialized by its tx lock, receiving belongs to
 * one thread at a time.  Every received frame is checked (header, payload
 * CRC, message contract) before mig_conn_recv() hands it out.  The bytes
 * cross the socket through the connection's I/O back end: plain TCP, or a
 * TLS session (migrate/tls.h, mig_tls_secure()); nothing above this header
 * knows which.
 */
#ifndef MIGRATE_NET_H
#define MIGRATE_NET_H

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "common/clock.h" /* now_ns(): every time and deadline here */
#include "migrate/wire.h"

struct mig_conn;

/*
 * An I/O back end: how a connection's bytes cross its socket.  NULL in
 * struct mig_conn means plain TCP.  The contract:
 *   send   all of iov[0..n) (which it may consume), 0; -ETIMEDOUT when the
 *          peer took nothing for the send timeout (mig_conn_set_liveness),
 *          another -errno for a broken link.  Callers serialize senders.
 *   recv   up to len bytes: their count; 0 at the peer's orderly close;
 *          -EAGAIN when nothing came (at once if !wait, else within the
 *          receive timeout, mig_conn_set_rcvtimeo); another -errno with a
 *          sentence in c->io_err (-EACCES: the peer refused our
 *          credentials, -ECONNRESET: the link or the session broke).
 *          Safe while another thread sends.
 *   close  frees the session; the socket is closed by mig_conn_close().
 *   secrets_done (optional)  the connection's HELLO and AUTH are over: no
 *          secret crosses it any more, so the back end may stop wiping
 *          what it sends and receives (mig_conn_secrets_done()).
 */
struct mig_io_ops {
	const char *name;
	int (*send)(struct mig_conn *c, struct iovec *iov, int n);
	ssize_t (*recv)(struct mig_conn *c, void *buf, size_t len, bool wait);
	void (*close)(struct mig_conn *c);
	/* MIG_SECRET_LEN bytes that only this session's two ends can know: 0 or -errno. */
	int (*binding)(struct mig_conn *c, uint8_t *out);
	void (*secrets_done)(struct mig_conn *c);
};

/*
 * For a back end's send: after a sendmsg() that took `done` bytes of
 * (*iov)[0 .. *n), what is left, from its first byte not sent; empty
 * pieces at the front are dropped too (done 0 drops just those).
 */
static inline void mig_iov_advance(struct iovec **iov, int *n, size_t done)
{
	for (; *n > 0 && done >= (*iov)->iov_len; (*iov)++, (*n)--)
		done -= (*iov)->iov_len;
	if (*n > 0) {
		(*iov)->iov_base = (char *)(*iov)->iov_base + done;
		(*iov)->iov_len -= done;
	}
}

struct mig_conn {
	int fd;
	const struct mig_io_ops *io; /* NULL: plain TCP */
	void *io_ctx;		     /* the back end's session */
	int rcv_timeout_ms;	     /* 0: none */
	uint64_t deadline_ns;	     /* nonzero: every receive ends by then (now_ns()) */
	int snd_timeout_ms;	     /* 0: none */
	char io_err[160];	     /* the back end's last error */
	const char *name;	     /* "urgent" or "bulk", for messages */
	struct mig_wire_ctx wire;
	pthread_mutex_t tx_lock;
	uint32_t tx_seq;
	uint8_t *rbuf;
	size_t rcap, rstart, rend;
	uint64_t tx_bytes; /* every byte sent, headers included */
	uint64_t tx_hdr;   /* bytes of frame headers sent */
	uint64_t rx_bytes;
	uint64_t last_rx_ns; /* now_ns() of the last bytes received (atomic) */
	/*
	 * ... and of the last frame other than PING (atomic): progress, which
	 * heartbeats do not make.
	 */
	uint64_t last_frame_ns;
	uint64_t last_tx_ns; /* ... and of the last bytes sent (atomic) */
};

/* ---- addr.c: QEMU's migration URI forms ---- */

#define MIG_ADDR_MAX 4

struct mig_addr {
	unsigned n; /* addresses to try in turn (a host name may have several) */
	struct sockaddr_storage sa[MIG_ADDR_MAX];
	socklen_t len[MIG_ADDR_MAX];
	bool any;	/* tcp::PORT or tcp:0:PORT: any address, to listen on */
	bool is_unix;	/* unix:PATH */
	char host[256]; /* the host as given: TLS's default name for the peer */
	char text[300]; /* the URI as given, for messages */
};

/*
 * Parse tcp:HOST:PORT (HOST a name, resolved now, or an IPv4 address),
 * tcp:[IPV6]:PORT, tcp::PORT or tcp:0:PORT (any address: listening only)
 * or unix:PATH: 0, or -EINVAL with the reason in err.
 */
int mig_addr_parse(const char *spec, struct mig_addr *a, char *err, size_t errlen);

/*
 * A socket listening on a's first address that binds (SO_REUSEADDR; a
 * stale unix socket file is removed first), or -errno with a message.
 */
int mig_listen(const struct mig_addr *a, char *err, size_t errlen);

/* A socket connected to one of a's addresses within timeout_ms, or -errno with a message. */
int mig_connect(const struct mig_addr *a, int timeout_ms, char *err, size_t errlen);

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
/* When bytes last came in on c (now_ns()). */
static inline uint64_t mig_conn_heard(const struct mig_conn *c)
{
	return __atomic_load_n(&c->last_rx_ns, __ATOMIC_RELAXED);
}
/* Send a heartbeat (PING) on c if nothing went out for quiet_ns. */
void mig_conn_ping_if_quiet(struct mig_conn *c, uint64_t now, uint64_t quiet_ns);
/* When c last received a frame other than PING (now_ns()). */
static inline uint64_t mig_conn_progress(const struct mig_conn *c)
{
	return __atomic_load_n(&c->last_frame_ns, __ATOMIC_RELAXED);
}
/* Receive timeout of c (0: none): mig_conn_recv() says -ETIMEDOUT after it. */
void mig_conn_set_rcvtimeo(struct mig_conn *c, int ms);
/*
 * A total deadline for receiving on c (now_ns(); 0: none): past it
 * mig_conn_recv() says -ETIMEDOUT, however the bytes trickle in and
 * however many heartbeats came.  For the handshake and for an awaited
 * reply.  Call from the receiving thread.
 */
void mig_conn_set_deadline(struct mig_conn *c, uint64_t deadline_ns);
/*
 * How long a blocking receive on c may wait now, in ms: the receive
 * timeout or what is left of the deadline, whichever is shorter; 0 once
 * the deadline passed; -1 for no limit.  For I/O back ends.
 */
int mig_conn_wait_ms(const struct mig_conn *c);
/*
 * The channel binding of c's session (MIG_SECRET_LEN bytes into out): a
 * TLS exporter value (RFC 5705), which a relay between two TLS sessions
 * cannot make equal on both; all zeroes on plain TCP, which has none.
 * 0 or -errno.
 */
int mig_conn_binding(struct mig_conn *c, uint8_t *out);
/*
 * Wipe len bytes at p, a payload mig_conn_recv() handed out from c's
 * receive buffer, once parsed: a frame that carried a secret (AUTH).  Only
 * that frame: page frames are never wiped, they cost nothing here.
 */
void mig_conn_wipe_rx(struct mig_conn *c, const uint8_t *p, size_t len);
/*
 * No secret crosses c any more (its handshake is over): the back end stops
 * wiping its own copies of what crosses (the TLS session's plaintext), a
 * cost only the handshake's frames should pay.  Until then it wipes them.
 */
void mig_conn_secrets_done(struct mig_conn *c);
/* The socket, when bytes may be written to it directly (plain TCP); else -1. */
int mig_conn_raw_fd(const struct mig_conn *c);
/*
 * Write len bytes of already framed data (mig_conn_put()) on c; the caller
 * serializes senders (holds tx_lock, or is the channel's only sender).
 * 0 or -errno.
 */
int mig_conn_write(struct mig_conn *c, const void *buf, size_t len);
/* Close the session and the socket (if open) and free the buffers. */
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
 * Is the next frame on c already received whole and of this type?  Then
 * mig_conn_recv() will hand it out without waiting (unchecked: only a hint).
 */
bool mig_conn_next_is(const struct mig_conn *c, uint16_t type);

/*
 * Receive and check the next frame.  On 0, *h is its header and *payload
 * points to h->len checked bytes, valid until the next call.  -ECONNRESET
 * when the peer closed the connection at a frame boundary, -EPIPE inside a
 * frame, -ETIMEDOUT when a receive timeout (SO_RCVTIMEO) expired, other
 * negative errnos for a rejected frame (message in err).  Heartbeats (PING)
 * are consumed here: callers never see them; before the handshake completed
 * (wire.frame_limit set) a PING is a protocol error (-EPROTO): a stranger
 * gets to send HELLO, AUTH and ERROR, nothing else.
 */
int mig_conn_recv(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload, char *err,
		  size_t errlen);
/*
 * mig_conn_recv() for the receiver of the push: a raw PAGE_RUN's pages go
 * from the socket (or the TLS session) straight into pages[cap] (the
 * caller's page-aligned memory) instead of through c's buffer, and are
 * checked there; *payload then points to its struct mig_page_run only.
 * What was read ahead into c's buffer is copied; what had not come yet
 * is read in place.  Other frames as mig_conn_recv().  On an error pages[cap] may hold rejected bytes.
 */
int mig_conn_recv_pages(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload,
			uint8_t *pages, size_t cap, char *err, size_t errlen);
/*
 * The same for a caller that polls the socket itself (the destination's
 * fault thread): -EAGAIN at once when no byte of a next frame is there,
 * neither buffered here or in the TLS session nor on the socket; once a
 * frame has begun, it waits for the rest of it as mig_conn_recv() does.
 */
int mig_conn_recv_ready(struct mig_conn *c, struct mig_frame_hdr *h, const uint8_t **payload,
			char *err, size_t errlen);

/*
 * Is r (a negative errno from a send or mig_conn_recv()) a broken link,
 * which recovery may mend, rather than a hostile or broken peer?
 */
static inline int mig_link_error(int r)
{
	return r == -ECONNRESET || r == -EPIPE || r == -ENOTCONN || r == -ETIMEDOUT ||
	       r == -EHOSTUNREACH || r == -ENETUNREACH || r == -ECONNABORTED;
}

/* The realtime clock in nanoseconds (the monotonic one: now_ns(), common/clock.h). */
uint64_t mig_realtime_ns(void);

#endif /* MIGRATE_NET_H */
