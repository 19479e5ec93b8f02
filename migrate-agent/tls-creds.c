// SPDX-License-Identifier: GPL-2.0
/*
 * TLS credentials and contexts (migrate/tls.h): x509 files or a PSK file,
 * as QEMU reads them, checked before anything listens or connects; the
 * TLS 1.3 context of one side, and whether kTLS may be tried here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lock-rank.h"
#include "migrate/net.h"
#include "migrate/tls.h"
#include "tls-internal.h"

/* ---- credentials ---- */

/* Larger is no key file: a PSK file of PSK_MAX_ENTRIES lines is 17 KiB, an RSA-8192 PEM 7 KiB. */
#define KEY_FILE_MAX (64u << 10)

/* A key file's contents, NUL-terminated; freed with key_file_free(), which wipes them. */
struct key_file {
	char *buf;
	size_t len;
};

static void key_file_free(struct key_file *k)
{
	OPENSSL_clear_free(k->buf, k->len + 1);
	k->buf = NULL;
}

/*
 * May the opened file st hold a secret key?  As ssh insists for its keys:
 * a regular file of the user who runs this program, that group and others
 * can neither read nor write (a key others can read is a key others may
 * hold; one another user owns or may write is a key they chose).  0 or
 * -errno with a message naming the file and why.
 */
static int key_file_refused(const char *path, const struct stat *st, char *err, size_t errlen)
{
	unsigned int mode = (unsigned int)(st->st_mode & 07777);

	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	if (st->st_uid != geteuid()) {
		snprintf(err, errlen,
			 "%s: bad ownership: owned by uid %u, not by uid %u (who runs this "
			 "program): a secret key must belong to its user",
			 path, (unsigned int)st->st_uid, (unsigned int)geteuid());
		return -EPERM;
	}
	if (mode & 077) {
		snprintf(err, errlen,
			 "%s: %s by group or others (mode %04o): an unprotected key file, a "
			 "secret key must be private to its owner (chmod 600 it)",
			 path,
			 mode & 044   ? "readable"
			 : mode & 022 ? "writable"
				      : "usable",
			 mode);
		return -EPERM;
	}
	if (st->st_size > KEY_FILE_MAX) {
		snprintf(err, errlen, "%s: %lld bytes: too large for a key file", path,
			 (long long)st->st_size);
		return -EFBIG;
	}
	return 0;
}

/* All of fd (at most KEY_FILE_MAX bytes) into a new k. */
static int read_all(int fd, const char *path, struct key_file *k, char *err, size_t errlen)
{
	size_t n = 0;
	ssize_t got = 1;

	k->buf = OPENSSL_malloc(KEY_FILE_MAX + 1);
	k->len = KEY_FILE_MAX;
	if (!k->buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	while (n <= KEY_FILE_MAX && (got > 0 || (got < 0 && errno == EINTR)))
		if ((got = read(fd, k->buf + n, KEY_FILE_MAX + 1 - n)) > 0)
			n += (size_t)got;
	if (got < 0 || n > KEY_FILE_MAX) {
		snprintf(err, errlen, "%s: %s", path,
			 got < 0 ? strerror(errno) : "grew while read");
		key_file_free(k);
		return got < 0 ? -EIO : -EFBIG;
	}
	k->buf[n] = 0; /* past it nothing was written: key_file_free() wipes len + 1 bytes */
	k->len = n;
	return 0;
}

/*
 * A key file, checked on the descriptor that is then read (fstat(), not a
 * stat() of the path, which another process could swap between the check
 * and the open), and read with read(): no stdio, whose buffer would keep
 * a copy of the key that nobody wipes.  A symlink is followed: what is
 * checked is the file it leads to, as ssh does.
 */
static int read_key_file(const char *path, struct key_file *k, char *err, size_t errlen)
{
	struct stat st;
	int r, fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); /* a FIFO: no wait */

	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	r = key_file_refused(path, &st, err, errlen);
	if (!r)
		r = read_all(fd, path, k, err, errlen);
	close(fd);
	return r;
}

/* Larger is no certificate file: a CA bundle of every public root is 0.2 MiB. */
#define CERT_FILE_MAX (4u << 20)

/*
 * A certificate file OpenSSL is about to open by its path: a regular file
 * of a sane size (a FIFO, which OpenSSL's fopen() would wait on forever,
 * a directory or a device is refused), and the reason when it is missing
 * or unreadable, which OpenSSL does not say.  Certificates are public: the
 * check is against mistakes, so a stat() by path is enough.  0 or -errno.
 */
static int cert_file_refused(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st) < 0 || faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) < 0) {
		int e = errno;

		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_size > CERT_FILE_MAX) {
		snprintf(err, errlen, "%s: %lld bytes: too large for a certificate file", path,
			 (long long)st.st_size);
		return -EFBIG;
	}
	return 0;
}

/* Our private key, parsed from k: the one copy is then the context's. */
static int use_key(struct mig_tls_ctx *c, const char *path, const char *who, const char *cert,
		   const struct key_file *k, char *err, size_t errlen)
{
	BIO *b = BIO_new_mem_buf(k->buf, (int)k->len); /* read-only: no copy */
	EVP_PKEY *key = b ? PEM_read_bio_PrivateKey_ex(
				b, NULL, SSL_CTX_get_default_passwd_cb(c->ssl),
				SSL_CTX_get_default_passwd_cb_userdata(c->ssl), NULL, NULL)
			  : NULL;
	bool parsed = key != NULL;
	int ok = parsed && SSL_CTX_use_PrivateKey(c->ssl, key) == 1;

	EVP_PKEY_free(key); /* the context holds its own reference */
	BIO_free(b);
	if (!ok) {
		/* A key of another pair parses, and use refuses it: say which. */
		if (parsed)
			snprintf(err, errlen, "%s does not match %s", path, cert);
		else
			snprintf(err, errlen, "%s: cannot load the %s key", path, who);
		return -EINVAL;
	}
	return 0;
}

static int load_x509_files(struct mig_tls_ctx *c, const char *ca, const char *cert,
			   const char *keypath, const struct key_file *key, char *err,
			   size_t errlen)
{
	const char *who = c->server ? "server" : "client";
	X509 *own;
	int r = cert_file_refused(ca, err, errlen);

	if (!r)
		r = cert_file_refused(cert, err, errlen);
	if (r)
		return r;
	if (SSL_CTX_load_verify_locations(c->ssl, ca, NULL) != 1) {
		snprintf(err, errlen, "%s: cannot load the CA certificate", ca);
		return -EINVAL;
	}
	if (SSL_CTX_use_certificate_chain_file(c->ssl, cert) != 1) {
		snprintf(err, errlen, "%s: cannot load the %s certificate", cert, who);
		return -EINVAL;
	}
	if (use_key(c, keypath, who, cert, key, err, errlen))
		return -EINVAL;
	if (SSL_CTX_check_private_key(c->ssl) != 1) {
		snprintf(err, errlen, "%s does not match %s", keypath, cert);
		return -EINVAL;
	}
	own = SSL_CTX_get0_certificate(c->ssl);
	if (X509_cmp_current_time(X509_get0_notAfter(own)) < 0) {
		snprintf(err, errlen, "%s has expired", cert);
		return -EKEYEXPIRED;
	}
	return 0;
}

static int load_x509(struct mig_tls_ctx *c, const char *dir, char *err, size_t errlen)
{
	const char *who = c->server ? "server" : "client";
	char ca[PATH_MAX], cert[PATH_MAX], keypath[PATH_MAX];
	struct key_file key;
	int r;

	snprintf(ca, sizeof(ca), "%s/ca-cert.pem", dir);
	snprintf(cert, sizeof(cert), "%s/%s-cert.pem", dir, who);
	snprintf(keypath, sizeof(keypath), "%s/%s-key.pem", dir, who);
	r = read_key_file(keypath, &key, err, errlen); /* the certificates may be anyone's */
	if (r)
		return r;
	r = load_x509_files(c, ca, cert, keypath, &key, err, errlen);
	key_file_free(&key);
	if (!r)
		SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return r;
}

/*
 * One "IDENTITY:HEXKEY" line into e; -EINVAL if malformed.  The key is
 * decoded straight into e: no other copy of it is made.
 */
static int parse_psk_line(char *line, struct psk_entry *e)
{
	char *colon = strchr(line, ':');
	size_t len = 0;

	if (!colon || colon == line || colon - line > PSK_MAX_ID)
		return -EINVAL;
	*colon = 0;
	if (OPENSSL_hexstr2buf_ex(e->key, sizeof(e->key), &len, colon + 1, '\0') != 1 ||
	    len < PSK_MIN_KEY || len > PSK_MAX_KEY) {
		OPENSSL_cleanse(e->key, sizeof(e->key));
		return -EINVAL;
	}
	memcpy(e->id, line, (size_t)(colon - line) + 1); /* with its NUL */
	e->key_len = len;
	return 0;
}

/* The PSK file's lines (in k, which they are cut in place) into c's table. */
static int parse_psk_file(struct mig_tls_ctx *c, const char *path, struct key_file *k, char *err,
			  size_t errlen)
{
	char *line = k->buf, *next;
	int n = 0;

	for (; line < k->buf + k->len; line = next) {
		next = line + strcspn(line, "\n");
		*next++ = 0; /* the last line's NUL is the buffer's */
		n++;
		line[strcspn(line, "\r")] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		if (c->nr_psk == PSK_MAX_ENTRIES || parse_psk_line(line, &c->psk[c->nr_psk]) < 0) {
			snprintf(err, errlen,
				 "%s:%d: not IDENTITY:HEXKEY with a key of %d to %d bytes", path, n,
				 PSK_MIN_KEY, PSK_MAX_KEY);
			return -EINVAL;
		}
		c->nr_psk++;
	}
	if (!c->nr_psk) {
		snprintf(err, errlen, "%s: no key in the file", path);
		return -EINVAL;
	}
	return 0;
}

static int load_psk(struct mig_tls_ctx *c, const char *path, char *err, size_t errlen)
{
	struct key_file k;
	int r = read_key_file(path, &k, err, errlen);

	if (r)
		return r;
	c->psk = OPENSSL_secure_zalloc(PSK_MAX_ENTRIES * sizeof(*c->psk));
	if (!c->psk) {
		snprintf(err, errlen, "%s: out of memory", path);
		r = -ENOMEM;
	} else {
		r = parse_psk_file(c, path, &k, err, errlen);
	}
	key_file_free(&k);
	return r;
}

/* A TLS 1.3 session resumable with an external PSK (RFC 8446, 4.2.11). */
static SSL_SESSION *psk_session(SSL *ssl, const struct psk_entry *e)
{
	static const unsigned char aes128gcm_sha256[] = { 0x13, 0x01 };
	const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, aes128gcm_sha256);
	SSL_SESSION *s = cipher ? SSL_SESSION_new() : NULL;

	if (s && SSL_SESSION_set1_master_key(s, e->key, e->key_len) &&
	    SSL_SESSION_set_cipher(s, cipher) &&
	    SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))
		return s;
	SSL_SESSION_free(s);
	return NULL;
}

static int psk_use_session(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
			   SSL_SESSION **sess)
{
	const struct mig_tls_ctx *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const struct psk_entry *e = &c->psk[0];

	*sess = NULL;
	if (md && md != EVP_sha256())
		return 1; /* after a HelloRetryRequest for another hash: no PSK */
	*sess = psk_session(ssl, e);
	*id = (const unsigned char *)e->id;
	*idlen = strlen(e->id);
	return *sess != NULL;
}

/*
 * Client, PSK: any certificate is refused.  TLS 1.3 lets a server ignore
 * the client's PSK and authenticate with a certificate instead; a client
 * that checks no certificate would then talk to anyone who has one.
 */
static int psk_refuse_cert(int preverify_ok, X509_STORE_CTX *store)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct mig_tls *t = ssl ? SSL_get_app_data(ssl) : NULL;

	(void)preverify_ok;
	if (t)
		t->cert_instead = true;
	return 0;
}

static int psk_find_session(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
	const struct mig_tls_ctx *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	struct mig_tls *t = SSL_get_app_data(ssl);

	*sess = NULL;
	t->psk_offered = true;
	for (unsigned int i = 0; i < c->nr_psk; i++)
		if (strlen(c->psk[i].id) == idlen && !memcmp(c->psk[i].id, id, idlen)) {
			*sess = psk_session(ssl, &c->psk[i]);
			return *sess != NULL;
		}
	t->unknown_identity = true;
	return 1; /* no session: the handshake fails */
}

/*
 * Kernel TLS: once the handshake is done, OpenSSL can hand the session's
 * keys to the kernel (setsockopt TCP_ULP "tls", then TLS_TX/TLS_RX), which
 * then seals the records itself as the socket sends: one copy fewer and
 * no record framing in user space.  Tried only when the kernel already
 * offers the tls ULP: asking for it otherwise would make a kernel that
 * has it as a module load it (a privileged process), and this agent loads
 * no module.  The reason when it is not tried, or NULL.
 */
static const char *probe_ktls(void)
{
#ifdef OPENSSL_NO_KTLS
	return "OpenSSL was built without kTLS";
#else
	char ulps[256] = "", *save = NULL;
	FILE *f;

	if (getenv("MIG_NO_KTLS"))
		return "disabled by MIG_NO_KTLS";
	f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "re");
	if (!f)
		return "the kernel does not list its TCP ULPs (no tcp_available_ulp)";
	if (!fgets(ulps, sizeof(ulps), f))
		ulps[0] = 0;
	fclose(f);
	for (char *w = strtok_r(ulps, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
		if (!strcmp(w, "tls"))
			return NULL;
	return "the kernel offers no tls ULP (not in tcp_available_ulp; no module is loaded)";
#endif
}

/* The context's protocol and I/O settings, the same for both kinds of credentials. */
static void set_protocol(struct mig_tls_ctx *c)
{
	SSL_CTX_set_app_data(c->ssl, c);
	SSL_CTX_set_min_proto_version(c->ssl, TLS1_3_VERSION);
	SSL_CTX_set_ciphersuites(c->ssl, TLS_SUITES);
	SSL_CTX_set_options(c->ssl, SSL_OP_CIPHER_SERVER_PREFERENCE); /* the destination decides */
	/*
	 * No SSL_MODE_ENABLE_PARTIAL_WRITE: with it SSL_write_ex() returns
	 * after every record, so a 256 KiB send took 16 calls (a lock, an
	 * error-queue reset and a return each); without it one call seals
	 * them all, and after WANT_WRITE the retry goes on where it stopped.
	 */
	SSL_CTX_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (!c->no_ktls)
		SSL_CTX_set_options(c->ssl, SSL_OP_ENABLE_KTLS);
	SSL_CTX_set_session_cache_mode(c->ssl, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(c->ssl, 0); /* every connection authenticates in full */
	/*
	 * Read what the socket has, not a record header then its body: half
	 * the receive system calls on the bulk channel (its records are full).
	 */
	SSL_CTX_set_read_ahead(c->ssl, 1);
	SSL_CTX_set_default_read_buffer_len(c->ssl, TLS_READ_BUF);
}

/* The x509 credentials or the PSK of o; 0 or -errno with err. */
static int load_creds(struct mig_tls_ctx *c, const struct mig_tls_opts *o, char *err, size_t errlen)
{
	int r;

	if (o->creds_dir) {
		snprintf(c->hostname, sizeof(c->hostname), "%s", o->hostname ? o->hostname : "");
		r = load_x509(c, o->creds_dir, err, errlen);
		if (!r && !c->server && !c->hostname[0]) {
			snprintf(err, errlen,
				 "x509: the client needs the server's name (--tls-hostname)");
			r = -EINVAL;
		}
		return r;
	}
	r = load_psk(c, o->psk_file, err, errlen);
	if (c->server) {
		SSL_CTX_set_psk_find_session_callback(c->ssl, psk_find_session);
	} else {
		SSL_CTX_set_psk_use_session_callback(c->ssl, psk_use_session);
		SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, psk_refuse_cert);
	}
	return r;
}

int mig_tls_ctx_new(const struct mig_tls_opts *o, bool server, struct mig_tls_ctx **out, char *err,
		    size_t errlen)
{
	struct mig_tls_ctx *c;
	int r;

	if (!o->creds_dir == !o->psk_file) {
		snprintf(err, errlen, "TLS needs x509 credentials or a PSK file (one of them)");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()))) {
		free(c);
		snprintf(err, errlen, "cannot create a TLS context");
		return -ENOMEM;
	}
	c->server = server;
	pthread_mutex_init(&c->ktls_lock, NULL);
	c->no_ktls = probe_ktls();
	set_protocol(c);
	r = load_creds(c, o, err, errlen);
	if (r < 0) {
		mig_tls_ctx_free(c);
		return r;
	}
	*out = c;
	return 0;
}

void mig_tls_ctx_free(struct mig_tls_ctx *c)
{
	if (!c)
		return;
	if (c->psk)
		OPENSSL_secure_clear_free(c->psk, PSK_MAX_ENTRIES * sizeof(*c->psk));
	SSL_CTX_free(c->ssl);
	pthread_mutex_destroy(&c->ktls_lock);
	free(c);
}

void mig_tls_ctx_get_ktls(struct mig_tls_ctx *c, struct mig_tls_ktls *out)
{
	mig_lock(&c->ktls_lock, MIG_RANK_TLS_KTLS);
	*out = c->ktls;
	if (!out->sessions)
		out->fallback = c->no_ktls ? c->no_ktls : "no session yet";
	mig_unlock(&c->ktls_lock);
}
