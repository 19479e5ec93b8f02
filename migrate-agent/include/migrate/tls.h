/* SPDX-License-Identifier: GPL-2.0 */
/*
 * TLS for migration connections: OpenSSL 3, TLS 1.3 only, credentials laid
 * out as QEMU's (docs/security.md).
 *
 *   x509  a directory with ca-cert.pem, server-cert.pem, server-key.pem,
 *         client-cert.pem and client-key.pem (QEMU's tls-creds-x509 with
 *         verify-peer=on): each end presents its certificate and verifies
 *         the other's against the CA; the client also checks that the
 *         server's certificate names the host it meant to reach.
 *   psk   a file of lines IDENTITY:HEXKEY (QEMU's tls-creds-psk keys.psk);
 *         the client offers the first line, the server accepts any line.
 *         Both ends require that the session was made from the PSK (TLS
 *         1.3 would let a server ignore it and use a certificate): the
 *         client refuses any certificate.
 * Files holding a secret (the *-key.pem of this side, the PSK file) must
 * be regular files of the program's effective uid, without group or other
 * permission bits (checked on the opened file), or they are refused
 * (-EPERM; -EINVAL for a file that is not regular).
 *
 * One struct mig_tls wraps one connected socket.  One thread may send while
 * another receives (the transport's urgent channel does): each call holds
 * the session's lock only inside OpenSSL and waits for the socket outside
 * it.  The socket is non-blocking from the handshake on.  OpenSSL writes
 * with write(): the process must ignore SIGPIPE (the VMM does).
 */
#ifndef MIGRATE_TLS_H
#define MIGRATE_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mig_tls_opts {
	const char *creds_dir; /* x509 directory, or NULL */
	const char *psk_file;  /* PSK file, or NULL (exactly one of the two) */
	const char *hostname;  /* client, x509: name the server must carry */
};

struct mig_tls_ctx;
struct mig_tls;

/*
 * Kernel TLS (kTLS) of a context's sessions so far: after the handshake
 * OpenSSL hands the keys to the kernel (TCP_ULP "tls") where the kernel
 * offers the tls ULP already (/proc/sys/net/ipv4/tcp_available_ulp: no
 * module is ever loaded for it) and OpenSSL was built with kTLS; else the
 * records are sealed and opened in user space.  MIG_NO_KTLS in the
 * environment turns it off.
 */
struct mig_tls_ktls {
	unsigned int sessions;	/* handshakes completed */
	unsigned int ktls_send; /* ... whose sends the kernel seals */
	unsigned int ktls_recv; /* ... whose receives the kernel opens */
	const char *fallback;	/* why not all of them both ways (a static string), or NULL */
};

/* Loads the credentials for one side; -errno and a sentence in err. */
int mig_tls_ctx_new(const struct mig_tls_opts *o, bool server, struct mig_tls_ctx **out, char *err,
		    size_t errlen);
void mig_tls_ctx_free(struct mig_tls_ctx *ctx);
/* The kTLS summary of ctx's sessions; with none yet, why kTLS would not be tried. */
void mig_tls_ctx_get_ktls(struct mig_tls_ctx *ctx, struct mig_tls_ktls *out);

/*
 * Runs the handshake on a connected socket within timeout_ms.  On success
 * *out owns nothing but the session: the caller still closes fd after
 * mig_tls_free().  -ETIMEDOUT, -ECONNRESET (the peer closed), -EPROTO (the
 * peer does not speak TLS), -EACCES (a credential was refused), each with
 * a sentence in err naming the cause.
 */
int mig_tls_handshake(struct mig_tls_ctx *ctx, int fd, int timeout_ms, struct mig_tls **out,
		      char *err, size_t errlen);

/*
 * Sends all len bytes (0) or fails, as full records (16 KiB) but the last,
 * gathered into a write() per 256 KiB: -ETIMEDOUT when the socket accepted
 * nothing for timeout_ms (-1: no limit), -EPIPE on a broken link.
 */
int mig_tls_send(struct mig_tls *t, const void *buf, size_t len, int timeout_ms);

/*
 * Receives up to len bytes: their count, 0 at the peer's orderly close
 * (close_notify), -ETIMEDOUT after timeout_ms without data (-1: no limit,
 * 0: do not wait), -EACCES when the peer refused our certificate after the
 * handshake (TLS 1.3 clients learn it on their first read), -ECONNRESET
 * for a link that broke, a corrupted record or another alert (err says
 * which).
 */
ssize_t mig_tls_recv(struct mig_tls *t, void *buf, size_t len, int timeout_ms, char *err,
		     size_t errlen);

/*
 * len bytes of keying material exported from the session (RFC 8446, 7.5;
 * label "EXPORTER-postcopy-kvm-auth"): equal at both ends of one session,
 * unknown to anyone else, different on every session.  0 or -EIO.
 */
int mig_tls_binding(struct mig_tls *t, uint8_t *out, size_t len);

/* What a session negotiated, and how its bytes crossed the socket. */
struct mig_tls_info {
	const char *cipher;	     /* its IANA name, e.g. "TLS_AES_128_GCM_SHA256" */
	unsigned long socket_writes; /* write() calls that moved bytes, handshake included */
	unsigned long socket_reads;  /* read() calls that moved bytes, handshake included */
	unsigned long send_waits;    /* sends that waited for room in the socket (poll) */
	bool ktls_send, ktls_recv;   /* the kernel seals / opens this session's records */
	const char *fallback;	     /* why not both (a static string), or NULL */
};
void mig_tls_get_info(struct mig_tls *t, struct mig_tls_info *out);

/* Sends close_notify (best effort) and frees the session. */
void mig_tls_free(struct mig_tls *t);

struct mig_conn;

/*
 * The TLS back end of a migration connection (migrate/net.h): runs the
 * handshake on c's connected socket within timeout_ms (server or client as
 * ctx was made), then every byte of c crosses the session; mig_conn_close()
 * ends it.  ctx NULL: c stays plain TCP, 0.  Errors as mig_tls_handshake(),
 * the sentence in err.  Call before the first frame, from the thread that
 * owns c.
 */
int mig_tls_secure(struct mig_tls_ctx *ctx, struct mig_conn *c, int timeout_ms, char *err,
		   size_t errlen);

#endif /* MIGRATE_TLS_H */
