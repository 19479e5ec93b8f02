/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the TLS files share (tls-creds.c: credentials and contexts; tls.c:
 * sessions and the connection back end); not an interface (that is
 * migrate/tls.h).
 */
#ifndef MIGRATE_TLS_INTERNAL_H
#define MIGRATE_TLS_INTERNAL_H

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "migrate/tls.h"

#define PSK_MAX_ENTRIES 64
#define PSK_MIN_KEY	16 /* bytes: 128 bits at least */
#define PSK_MAX_KEY	64
#define PSK_MAX_ID	128
/*
 * With read-ahead one read() fills this buffer with several records.  Not
 * larger: OpenSSL 3.0 moves the unread rest of the buffer to its front
 * before each record, so the bytes moved grow with the square of its size
 * (256 KiB doubled the receiver's memmove time here and saved nothing).
 */
#define TLS_READ_BUF  (64u << 10)
#define TLS_WRITE_BUF (256u << 10) /* the push sends 256 KiB at a time */
/*
 * AES-128-GCM first: with AES-NI and PCLMULQDQ (every x86 server CPU since
 * 2010) it is the fastest AEAD, 1.5 times AES-256-GCM here (openssl speed,
 * 16 KiB blocks: 3.6 against 2.4 GB/s); ChaCha20-Poly1305 for CPUs without
 * them.  OpenSSL's default order puts AES-256 first.  A PSK session is
 * bound to SHA-256, so no SHA-384 suite either way.
 */
#define TLS_SUITES "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256"

struct psk_entry {
	char id[PSK_MAX_ID + 1];
	unsigned char key[PSK_MAX_KEY];
	size_t key_len;
};

struct mig_tls_ctx {
	SSL_CTX *ssl;
	bool server;
	char hostname[256]; /* client, x509: the name to verify */
	struct psk_entry *psk;
	unsigned int nr_psk;
	const char *no_ktls;	   /* why kTLS is not tried at all (probe_ktls()), or NULL */
	pthread_mutex_t ktls_lock; /* the handshakes of both channels report here */
	struct mig_tls_ktls ktls;
};

struct mig_tls {
	SSL *ssl;
	int fd;
	pthread_mutex_t lock;
	bool psk_offered;	   /* server: the client offered a PSK */
	bool unknown_identity;	   /* ... with an identity we lack */
	bool cert_instead;	   /* client, PSK: the server sent a certificate */
	BIO *out;		   /* what sends flush: the write buffer, or the socket (kTLS) */
	bool ktls_send, ktls_recv; /* the kernel seals / opens the records */
	/*
	 * Secrets may cross (the connection's HELLO and AUTH): OpenSSL wipes
	 * the plaintext it handed out (SSL_OP_CLEANSE_PLAINTEXT) and sends wipe
	 * their gather buffer; both end at mig_conn_secrets_done() (atomic).
	 */
	bool wipe;
	const char *fallback;			   /* why not both, or NULL */
	unsigned long socket_writes, socket_reads; /* under lock */
	unsigned long send_waits;		   /* under lock */
	/* A receive that failed after bytes it returned: the next one's result. */
	bool has_held;
	ssize_t held;
	char held_err[160];
};

#endif /* MIGRATE_TLS_INTERNAL_H */
