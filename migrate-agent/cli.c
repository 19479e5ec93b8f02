// SPDX-License-Identifier: GPL-2.0
/*
 * migrate-agent: the command that starts a migration of a running VMM.
 * Migration itself runs inside the VMM process (it must read guest RAM at
 * the source and own it at the destination, as in QEMU); this attaches to
 * the source VMM's control socket and tells it where to go.
 *
 *   migrate-agent migrate --vmm SOCKET --to tcp:HOST:PORT
 *                 [--precopy-rounds N] [--compress] [--metrics FILE]
 *                 [--recover-ms MS] [--idle-ms MS]
 *                 [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]
 *
 * The destination is a `vmm run --incoming tcp:HOST:PORT ...` already
 * listening.  Prints the JSON summary on stdout (or writes it to --metrics)
 * and exits 0 once the destination has every page; 1 with the VMM's error
 * message otherwise (also when the VMM says nothing, not even its
 * once-a-second "progress", for --idle-ms: default 10000); 2 for bad usage.
 * The TLS files are read by the VMM: their paths are made absolute here.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/parse.h"

struct request {
	const char *vmm, *to, *metrics, *tls_hostname;
	char *tls_creds, *tls_psk; /* absolute paths (realpath), freed by the caller */
	int precopy, compress, recover_ms, idle_ms;
};

#ifndef BUILD_VERSION
#define BUILD_VERSION "unknown" /* the Makefile passes git describe */
#endif

static void usage(void)
{
	fprintf(stderr,
		"usage: migrate-agent migrate --vmm SOCKET --to tcp:HOST:PORT\n"
		"                     [--precopy-rounds N] [--compress] [--metrics FILE]\n"
		"                     [--recover-ms MS] [--idle-ms MS]\n"
		"                     [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]\n");
}

/* A number from min to max, or -1 after a message. */
static int parse_int(const char *opt, const char *v, unsigned min, unsigned max)
{
	uint64_t n;
	if (parse_u64(v, min, max, &n)) {
		fprintf(stderr, "migrate-agent: %s: '%s' is not a number from %u to %u\n", opt, v,
			min, max);
		return -1;
	}
	return (int)n;
}

/* An existing file's absolute path (the VMM has another working directory), or NULL after a message. */
static char *tls_path(const char *opt, const char *v)
{
	char *p = realpath(v, NULL);
	if (!p)
		fprintf(stderr, "migrate-agent: %s %s: %s\n", opt, v, strerror(errno));
	else if (strpbrk(p, " \n")) {
		fprintf(stderr, "migrate-agent: %s %s: a path with blanks cannot be passed on\n",
			opt, p);
		free(p);
		p = NULL;
	}
	return p;
}

/* The TLS options of q make sense together: 0, or 2 after a message. */
static int check_tls(const struct request *q)
{
	if (q->tls_creds && q->tls_psk) {
		fprintf(stderr, "migrate-agent: --tls-creds and --tls-psk exclude each other: "
				"x509 or a PSK\n");
		return 2;
	}
	if (q->tls_hostname && !q->tls_creds) {
		fprintf(stderr, "migrate-agent: --tls-hostname needs --tls-creds\n");
		return 2;
	}
	if (q->tls_hostname && strpbrk(q->tls_hostname, " \n")) {
		fprintf(stderr, "migrate-agent: --tls-hostname: not a host name\n");
		return 2;
	}
	return 0;
}

/* 0, or 2 (usage) after a message. */
static int parse_args(int argc, char **argv, struct request *q)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--compress")) {
			q->compress = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "migrate-agent: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--vmm"))
			q->vmm = v;
		else if (!strcmp(a, "--to"))
			q->to = v;
		else if (!strcmp(a, "--metrics"))
			q->metrics = v;
		else if (!strcmp(a, "--precopy-rounds")) {
			if ((q->precopy = parse_int(a, v, 0, PARSE_PRECOPY_MAX)) < 0)
				return 2;
		} else if (!strcmp(a, "--tls-hostname"))
			q->tls_hostname = v;
		else if (!strcmp(a, "--tls-creds") || !strcmp(a, "--tls-psk")) {
			char **slot = a[6] == 'c' ? &q->tls_creds : &q->tls_psk;
			free(*slot);
			if (!(*slot = tls_path(a, v)))
				return 2;
		} else if (!strcmp(a, "--recover-ms") &&
			   (q->recover_ms = parse_int(a, v, 1, PARSE_RECOVER_MS_MAX)) < 0)
			return 2;
		else if (!strcmp(a, "--idle-ms") &&
			 (q->idle_ms = parse_int(a, v, 1, PARSE_RECOVER_MS_MAX)) < 0)
			return 2;
		else if (strcmp(a, "--recover-ms") && strcmp(a, "--idle-ms")) {
			fprintf(stderr, "migrate-agent: unknown option %s\n", a);
			usage();
			return 2;
		}
	}
	/* The request is one space-separated line. */
	if (!q->vmm || !q->to || strpbrk(q->to, " \n") ||
	    (q->metrics && strpbrk(q->metrics, " \n"))) {
		usage();
		return 2;
	}
	return check_tls(q);
}

/*
 * The listener must be our own VMM (or root's): a socket another user put
 * at the path would otherwise receive our request, TLS file paths and all.
 * SO_PEERCRED names the process that listens, whatever the path's owner.
 */
static int check_listener(int fd, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		fprintf(stderr, "migrate-agent: %s: cannot read the VMM's credentials: %s\n", path,
			strerror(errno));
		return -1;
	}
	if (cred.uid == geteuid() || cred.uid == 0)
		return 0;
	fprintf(stderr,
		"migrate-agent: %s is served by uid %u, not by you (uid %u) or root: not "
		"talking to it\n",
		path, (unsigned)cred.uid, (unsigned)geteuid());
	return -1;
}

/* A connected control socket, or -1 after a message. */
static int attach(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "migrate-agent: socket path too long\n");
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "migrate-agent: cannot attach to the VMM at %s: %s\n", path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (check_listener(fd, path)) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * The VMM's final line into reply[len] ("ok" or "error ..."), skipping its
 * "progress" lines.  0; -ETIMEDOUT when it said nothing for idle_ms; -EPIPE
 * when it closed without an answer.
 */
static int read_reply(int fd, int idle_ms, char *reply, size_t len)
{
	size_t got = 0;
	for (;;) {
		char *nl = memchr(reply, '\n', got);
		if (nl) {
			*nl = 0;
			if (strcmp(reply, "progress")) {
				return 0;
			}
			got -= (size_t)(nl + 1 - reply);
			memmove(reply, nl + 1, got);
			continue;
		}
		if (got == len - 1)
			got = 0; /* an overlong line: keep the tail */
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, idle_ms);
		if (n == 0)
			return -ETIMEDOUT;
		ssize_t k = n > 0 ? read(fd, reply + got, len - 1 - got) : -1;
		if (k <= 0)
			return -EPIPE;
		got += (size_t)k;
	}
}

/* Copy the metrics file to stdout. */
static void cat_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[4096];
	size_t k;
	while (f && (k = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, k, stdout);
	if (f)
		fclose(f);
}

/* printf at *n in buf; *n counts what did not fit too (then *n >= len). */
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + (*n < len ? *n : len), *n < len ? len - *n : 0, fmt, ap);
	va_end(ap);
	*n += k > 0 ? (size_t)k : 0;
}

/* Send the request and wait for the verdict: 0 (migrated) or 1 after a message. */
static int run_request(int fd, const struct request *q, const char *metrics)
{
	char req[4096], reply[1024];
	size_t n = 0;
	append(req, sizeof(req), &n, "migrate to=%s precopy=%d compress=%d metrics=%s", q->to,
	       q->precopy, q->compress, metrics);
	if (q->recover_ms)
		append(req, sizeof(req), &n, " recover-ms=%d", q->recover_ms);
	if (q->tls_creds)
		append(req, sizeof(req), &n, " tls-creds=%s", q->tls_creds);
	if (q->tls_psk)
		append(req, sizeof(req), &n, " tls-psk=%s", q->tls_psk);
	if (q->tls_hostname)
		append(req, sizeof(req), &n, " tls-hostname=%s", q->tls_hostname);
	append(req, sizeof(req), &n, "\n");
	if (n >= sizeof(req)) {
		fprintf(stderr, "migrate-agent: the request is too long\n");
		return 1;
	}
	/* A VMM that refuses us answers before it reads: its answer is still read. */
	int sent = send(fd, req, n, MSG_NOSIGNAL) == (ssize_t)n, e = errno;
	int r = read_reply(fd, q->idle_ms, reply, sizeof(reply));
	if (!sent && r) {
		fprintf(stderr, "migrate-agent: cannot talk to the VMM: %s\n", strerror(e));
		return 1;
	}
	if (r == -ETIMEDOUT) {
		fprintf(stderr,
			"migrate-agent: the VMM at %s is silent (no word for %d ms): giving up; "
			"the migration's own deadlines decide its fate\n",
			q->vmm, q->idle_ms);
		return 1;
	}
	if (r) {
		fprintf(stderr, "migrate-agent: migration failed: the VMM closed the control "
				"connection without an answer\n");
		return 1;
	}
	if (!strcmp(reply, "ok"))
		return 0;
	/* The VMM's own message (its peer's text was escaped by the library). */
	fprintf(stderr, "migrate-agent: migration failed: %s\n",
		strncmp(reply, "error ", 6) ? reply : reply + 6);
	return 1;
}

static int cmd_migrate(int argc, char **argv)
{
	struct request q = { .idle_ms = 10000 };
	int r = parse_args(argc, argv, &q);
	if (r) {
		free(q.tls_creds);
		free(q.tls_psk);
		return r;
	}
	char tmp[] = "/tmp/migrate-agent.XXXXXX";
	if (!q.metrics) {
		int fd = mkstemp(tmp);
		if (fd < 0) {
			perror("migrate-agent: mkstemp");
			return 1;
		}
		close(fd);
	}
	int fd = attach(q.vmm);
	r = fd < 0 ? 1 : run_request(fd, &q, q.metrics ? q.metrics : tmp);
	if (fd >= 0)
		close(fd);
	if (r == 0 && !q.metrics)
		cat_file(tmp);
	if (!q.metrics)
		unlink(tmp);
	if (r == 0)
		fprintf(stderr, "migrate-agent: migration to %s complete\n", q.to);
	free(q.tls_creds);
	free(q.tls_psk);
	return r;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "migrate"))
		return cmd_migrate(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "--version")) {
		printf("migrate-agent %s\n", BUILD_VERSION);
		return 0;
	}
	if (argc >= 2 && (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help"))) {
		usage();
		return 0;
	}
	usage();
	return 2;
}
