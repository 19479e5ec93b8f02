// SPDX-License-Identifier: GPL-2.0
/*
 * mig-secrets-check: do the secrets of a handshake stay in memory after it?
 *
 *   mig-secrets-check plain|psk|x509 DIR
 *
 * Runs what the two ends of a migration do on their first two connections
 * (migrate-agent/session.c, as source-session.c and dest-accept.c call
 * it), each end in a thread of its own over a socketpair: TLS when asked
 * (psk: this program writes DIR/keys.psk with a fresh key; x509: DIR holds
 * scripts/make-tls-creds.sh's files), HELLO, the session's secret on the
 * urgent connection, the proofs both ways on a bulk one.  Then it reads
 * its own memory (every readable mapping of /proc/self/maps, through
 * /proc/self/mem: heap, thread stacks, the main stack, anonymous maps,
 * OpenSSL's allocations) looking for the secrets' bytes:
 *
 *   1. right after each connection's handshake, its two threads parked
 *      (their stacks below the stack pointer as the handshake left them),
 *      connections and TLS contexts open (the migration runs): the
 *      session secret only where the two sessions keep it, the TLS
 *      exporter value of the bulk connection (the proofs' binding)
 *      nowhere;
 *   2. all closed and freed, the sessions' secrets wiped (as source.c and
 *      dest.c do at the end): none of the session secret, the exporter
 *      value, the PSK (its bytes and the hex text of the file), the
 *      private keys' PEM text.
 *
 * Prints "ok: ..." per check, or "FAIL: WHAT found at ADDR in MAPPING" per
 * copy found; exits 0 only when no copy was found (1: one was, or a
 * handshake failed; 2: a bad argument or set-up).  The secrets it looks
 * for are kept in one static block (needles) that the scan leaves out, and
 * the scan's own buffer is a mapping of its own, also left out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../session.h"
#include "migrate/auth.h"
#include "migrate/tls.h"

#define RAM_SIZE   (16ull << 20)
#define SESSION_ID 0x5ec7e75ull
#define DEADLINE_S 20
#define SCAN_CHUNK (1u << 20)
#define SCAN_MAX   (1ull << 30) /* larger mappings: ASan's shadow, reserved, never data */
#define MAX_NEEDLE 64

/* What is looked for; left out of the scan (it is the one copy we keep on purpose). */
static struct needle {
	const char *what;
	uint8_t bytes[MAX_NEEDLE];
	size_t len;
} needles[6];
static unsigned int nr_needles;

static struct needle *add_needle(const char *what, size_t len)
{
	struct needle *n = &needles[nr_needles++];

	n->what = what;
	n->len = len;
	return n;
}

/* ---- The scan ---- */

struct scan {
	int mem;		/* /proc/self/mem */
	uint8_t *buf;		/* SCAN_CHUNK + MAX_NEEDLE, between two PROT_NONE pages */
	const void *allowed[2]; /* where the session secret may be (check 1) */
	unsigned int only;	/* look for needles[0 .. only) (0: all) */
	unsigned int found, skipped;
};

static bool allowed(const struct scan *s, const struct needle *n, uintptr_t at)
{
	if (at >= (uintptr_t)needles && at < (uintptr_t)(needles + nr_needles))
		return true; /* the needle itself */
	if (n != &needles[0])
		return false;
	for (int k = 0; k < 2; k++)
		if (s->allowed[k] && at == (uintptr_t)s->allowed[k])
			return true;
	return false;
}

/* Every needle in buf[0..len) starting before `upto`, which was read from address base. */
static void match(struct scan *s, uintptr_t base, size_t len, size_t upto, const char *map)
{
	unsigned int nr = s->only ? s->only : nr_needles;

	for (unsigned int k = 0; k < nr; k++) {
		const struct needle *n = &needles[k];
		const uint8_t *p = s->buf, *end = s->buf + len;

		if (!n->len)
			continue; /* not known yet */

		while ((p = memmem(p, (size_t)(end - p), n->bytes, n->len)) &&
		       (size_t)(p - s->buf) < upto) {
			uintptr_t at = base + (uintptr_t)(p - s->buf);

			if (!allowed(s, n, at)) {
				printf("FAIL: %s found at 0x%" PRIxPTR " in %s\n", n->what, at,
				       map);
				s->found++;
			}
			p++;
		}
	}
}

static void scan_range(struct scan *s, uintptr_t lo, uintptr_t hi, const char *map)
{
	for (uintptr_t at = lo; at < hi; at += SCAN_CHUNK) {
		size_t want = hi - at < SCAN_CHUNK + MAX_NEEDLE ? hi - at : SCAN_CHUNK + MAX_NEEDLE;
		ssize_t got = pread(s->mem, s->buf, want, (off_t)at);

		if (got <= 0) { /* an unreadable page: the next chunk */
			s->skipped++;
			continue;
		}
		match(s, at, (size_t)got, SCAN_CHUNK, map);
		OPENSSL_cleanse(s->buf, (size_t)got); /* it held what it looked at */
	}
}

/* Every readable mapping but the needles', the scan buffer's and the kernel's. */
static int scan_memory(struct scan *s)
{
	char line[512];
	FILE *maps = fopen("/proc/self/maps", "re");

	if (!maps)
		return -errno;
	s->found = s->skipped = 0;
	while (fgets(line, sizeof(line), maps)) {
		uintptr_t lo, hi;
		char perms[8], map[256] = "";

		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %*s %255[^\n]", &lo, &hi,
			   perms, map) < 3 ||
		    perms[0] != 'r' || !strcmp(map, "[vvar]") || !strcmp(map, "[vsyscall]") ||
		    lo == (uintptr_t)s->buf) /* alone between its guards: not merged */
			continue;
		if (hi - lo > SCAN_MAX) {
			s->skipped++;
			continue;
		}
		if (!map[0])
			snprintf(map, sizeof(map), "an anonymous mapping (%s)", perms);
		scan_range(s, lo, hi, map);
	}
	fclose(maps);
	return 0;
}

/* ---- The two ends ---- */

struct end {
	struct mig_conn c;
	struct mig_hs hs;
	uint8_t *secret; /* where this end keeps the session's */
	struct mig_tls_ctx *tls;
	bool give; /* destination: give the secret (else prove) */
	int r;
	char err[300];
};

static int source_steps(struct end *e)
{
	struct mig_hello back;
	struct mig_auth a;
	int r = mig_hs_send_hello(&e->hs, 0, RAM_SIZE, 0, 1, e->err, sizeof(e->err));

	if (!r)
		r = mig_hs_recv_hello(&e->hs, &back, e->err, sizeof(e->err));
	if (r || e->hs.channel != MIG_CHAN_URGENT)
		return r ? r : mig_hs_mutual(&e->hs, e->err, sizeof(e->err));
	r = mig_hs_recv_auth(&e->hs, MIG_AUTH_SECRET, &a, e->err, sizeof(e->err));
	if (!r)
		memcpy(e->secret, a.data, MIG_SECRET_LEN); /* as source-session.c */
	mig_auth_wipe(&a, sizeof(a));
	return r;
}

static int dest_steps(struct end *e)
{
	struct mig_hello m;
	int r = mig_hs_recv_hello(&e->hs, &m, e->err, sizeof(e->err));

	if (r)
		return r;
	e->hs.channel = m.channel;
	e->hs.session = m.session_id;
	e->hs.nr_bulk = m.nr_bulk;
	e->hs.bulk_index = m.bulk_index;
	r = mig_hs_send_hello(&e->hs, m.flags, RAM_SIZE, 0, m.attempt, e->err, sizeof(e->err));
	if (!r)
		r = e->give ? mig_hs_send_secret(&e->hs, e->err, sizeof(e->err))
			    : mig_hs_mutual(&e->hs, e->err, sizeof(e->err));
	return r;
}

/*
 * Both ends' threads and main meet here twice: once the handshake is done
 * (main then scans, while the threads are parked: what their handshake
 * left below their stack pointers is still there, not yet overwritten by
 * their exit), and once the scan is done.
 */
static pthread_barrier_t parked;

static void *run_end(void *arg)
{
	struct end *e = arg;

	e->r = mig_tls_secure(e->tls, &e->c, DEADLINE_S * 1000, e->err, sizeof(e->err));
	if (!e->r)
		e->r = e->hs.role == MIG_ROLE_SOURCE ? source_steps(e) : dest_steps(e);
	pthread_barrier_wait(&parked);
	pthread_barrier_wait(&parked);
	mig_auth_thread_cleanup();
	mig_wire_thread_cleanup();
	return NULL;
}

static void end_init(struct end *e, int fd, int role, uint16_t channel, uint8_t *secret,
		     struct mig_tls_ctx *tls)
{
	bool src = role == MIG_ROLE_SOURCE;
	const char *name = !src ? "incoming" : channel == MIG_CHAN_URGENT ? "urgent" : "bulk";

	mig_conn_init(&e->c, fd, name, src ? MIG_ROLE_DEST : MIG_ROLE_SOURCE, 0);
	e->c.wire.ram_size = RAM_SIZE;
	e->c.wire.frame_limit = MIG_HANDSHAKE_FRAME_LIMIT;
	mig_conn_set_deadline(&e->c, now_ns() + DEADLINE_S * 1000000000ull);
	e->secret = secret;
	e->tls = tls;
	e->give = channel == MIG_CHAN_URGENT;
	e->hs =
	    (struct mig_hs){ .c = &e->c, .role = role, .nr_bulk = 1, .secret = secret, .tag = "" };
	if (src) {
		e->hs.channel = channel;
		e->hs.session = SESSION_ID;
	}
}

/* ---- Credentials, and what to look for ---- */

static void hex(uint8_t *out, const uint8_t *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = (uint8_t)digits[in[i] >> 4];
		out[2 * i + 1] = (uint8_t)digits[in[i] & 15];
	}
}

/* DIR/keys.psk with a fresh 32-byte key; the key and its hex text are needles. */
static int write_psk(const char *dir, char *path, size_t len)
{
	struct needle *key = add_needle("the PSK", 32);
	/* Not from the line's start: free() writes its list pointers over a buffer's first bytes. */
	struct needle *text = add_needle("the PSK file's hex text", 48);
	uint8_t line[5 + 64 + 1];
	int fd, r = 0;

	if (RAND_bytes(key->bytes, 32) != 1)
		return -EIO;
	hex(line + 5, key->bytes, 32);
	memcpy(text->bytes, line + 5 + 16, 48);
	memcpy(line, "qemu:", 5);
	line[69] = '\n';
	snprintf(path, len, "%s/keys.psk", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, line, sizeof(line)) != (ssize_t)sizeof(line))
		r = -errno;
	if (fd >= 0)
		close(fd);
	OPENSSL_cleanse(line, sizeof(line));
	return r;
}

/* The second base64 line of DIR/NAME (the first is the same in every P-256 key). */
static int pem_needle(const char *dir, const char *name, const char *what)
{
	struct needle *n = add_needle(what, 0);
	char path[4096], buf[8192];
	ssize_t got;
	int fd, r = -EINVAL;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got > 0) {
		char *l2 = buf, *end;

		buf[got] = 0;
		for (int k = 0; k < 2 && l2; k++)
			l2 = strchr(l2, '\n') ? strchr(l2, '\n') + 1 : NULL;
		end = l2 ? strchr(l2, '\n') : NULL;
		if (end && end - l2 >= 32) {
			n->len = (size_t)(end - l2) < MAX_NEEDLE ? (size_t)(end - l2) : MAX_NEEDLE;
			memcpy(n->bytes, l2, n->len);
			r = 0;
		}
	}
	OPENSSL_cleanse(buf, sizeof(buf));
	return r;
}

/* The two ends' TLS contexts (ctx[0] the source's), and the needles of their keys. */
static int load_creds(const char *mode, const char *dir, struct mig_tls_ctx *ctx[2])
{
	char err[400] = "", psk[4096];
	struct mig_tls_opts o = { .hostname = "localhost" };
	int r;

	if (!strcmp(mode, "plain"))
		return 0;
	if (!strcmp(mode, "psk")) {
		r = write_psk(dir, psk, sizeof(psk));
		o.psk_file = psk;
	} else {
		r = pem_needle(dir, "server-key.pem", "the server's key (PEM text)");
		if (!r)
			r = pem_needle(dir, "client-key.pem", "the client's key (PEM text)");
		o.creds_dir = dir;
	}
	if (r) {
		fprintf(stderr, "mig-secrets-check: %s: %s\n", dir, strerror(-r));
		return r;
	}
	r = mig_tls_ctx_new(&o, false, &ctx[0], err, sizeof(err));
	if (!r)
		r = mig_tls_ctx_new(&o, true, &ctx[1], err, sizeof(err));
	if (r)
		fprintf(stderr, "mig-secrets-check: %s\n", err);
	return r;
}

static void close_all(struct end *ends, int n, struct mig_tls_ctx *ctx[2])
{
	for (int k = 0; k < n; k++)
		mig_conn_close(&ends[k].c);
	mig_tls_ctx_free(ctx[0]);
	mig_tls_ctx_free(ctx[1]);
}

static int scan_init(struct scan *s)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (SCAN_CHUNK + MAX_NEEDLE + page - 1) / page * page;
	uint8_t *m = mmap(NULL, len + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED || mprotect(m + page, len, PROT_READ | PROT_WRITE))
		return -errno;
	s->buf = m + page;
	s->mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	return s->mem < 0 ? -errno : 0;
}

/* A scan, and its verdict: 0 when nothing was found. */
static int check(struct scan *s, const char *when)
{
	int r = scan_memory(s);

	if (r) {
		printf("FAIL: %s: cannot read /proc/self/maps: %s\n", when, strerror(-r));
		return 1;
	}
	if (!s->found)
		printf("ok: %s (%u unreadable chunks or huge mappings left out)\n", when,
		       s->skipped);
	return s->found ? 1 : 0;
}

static uint8_t src_secret[MIG_SECRET_LEN], dst_secret[MIG_SECRET_LEN];

/*
 * One connection's handshake, each end in its own thread (as the agent's),
 * and check 1 while both threads are parked after it: 0, 1 when a secret
 * was found, -errno when the handshake failed.
 */
static int connect_ends(struct end *e, uint16_t channel, struct mig_tls_ctx *ctx[2],
			struct scan *sc)
{
	const char *name = channel == MIG_CHAN_URGENT ? "urgent" : "bulk";
	char when[160];
	pthread_t ts, td;
	int sv[2], r = 0;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	end_init(&e[0], sv[0], MIG_ROLE_SOURCE, channel, src_secret, ctx[0]);
	end_init(&e[1], sv[1], MIG_ROLE_DEST, channel, dst_secret, ctx[1]);
	if (pthread_create(&td, NULL, run_end, &e[1]) || pthread_create(&ts, NULL, run_end, &e[0]))
		return -EAGAIN;
	pthread_barrier_wait(&parked);
	if (e[0].r || e[1].r) {
		printf("FAIL: %s handshake: source %s, destination %s\n", name, e[0].err, e[1].err);
		r = -EPROTO;
	} else if (channel == MIG_CHAN_BULK && ctx[0]) {
		r = mig_conn_binding(&e[0].c, needles[1].bytes);
		needles[1].len = MIG_SECRET_LEN;
	}
	snprintf(when, sizeof(when),
		 "%s channel, its two threads parked after the handshake: the session secret "
		 "only where the sessions keep it%s",
		 name, needles[1].len ? ", the exporter value nowhere" : "");
	if (!r)
		r = check(sc, when);
	pthread_barrier_wait(&parked);
	pthread_join(ts, NULL);
	pthread_join(td, NULL);
	return r;
}

int main(int argc, char **argv)
{
	static struct end ends[4]; /* urgent source, destination; bulk source, destination */
	struct mig_tls_ctx *ctx[2] = { NULL, NULL };
	struct scan s = { .allowed = { src_secret, dst_secret } };
	char err[200];
	int failed = 0;

	if (argc != 3 ||
	    (strcmp(argv[1], "plain") && strcmp(argv[1], "psk") && strcmp(argv[1], "x509"))) {
		fprintf(stderr, "usage: mig-secrets-check plain|psk|x509 DIR\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	add_needle("the session secret", MIG_SECRET_LEN);
	if (strcmp(argv[1], "plain")) /* its value once the bulk connection has one */
		add_needle("the TLS exporter value (the proofs' binding)", 0);
	s.only = nr_needles;
	if (scan_init(&s) || load_creds(argv[1], argv[2], ctx) ||
	    mig_random_bytes(dst_secret, sizeof(dst_secret), err, sizeof(err)) ||
	    pthread_barrier_init(&parked, NULL, 3))
		return 2;
	memcpy(needles[0].bytes, dst_secret, MIG_SECRET_LEN);
	for (int k = 0; k < 2; k++) {
		int r = connect_ends(&ends[2 * k], k ? MIG_CHAN_BULK : MIG_CHAN_URGENT, ctx, &s);

		if (r < 0)
			return 1;
		failed += r;
	}
	close_all(ends, 4, ctx);
	mig_auth_wipe(src_secret, sizeof(src_secret));
	mig_auth_wipe(dst_secret, sizeof(dst_secret));
	s.only = 0;
	s.allowed[0] = s.allowed[1] = NULL; /* wiped: found there, they were not */
	failed += check(&s, "after closing, no secret left in memory");
	return failed ? 1 : 0;
}
