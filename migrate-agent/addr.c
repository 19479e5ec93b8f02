// SPDX-License-Identifier: GPL-2.0
/*
 * Migration addresses in QEMU's URI forms (migrate/net.h): tcp:HOST:PORT
 * with a host name or an address, tcp:[IPV6]:PORT, tcp::PORT and
 * tcp:0:PORT (any address, to listen on), unix:PATH; and the sockets that
 * listen on them or connect to them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "migrate/net.h"

/*
 * The listen backlog.  Under a storm of strangers' connections a full
 * accept queue drops the real source's SYN, and its kernel retries only
 * after a second (TCP's initial RTO), then 3 s, 7 s: a recovery's whole
 * deadline.  The queue must rather hold a burst while the acceptor is
 * busy: the acceptor takes several thousand connections a second, so
 * 1024 queued wait well under the source's connect timeout, where 8 (the
 * old value) overflowed within 2 ms of a storm.  The kernel caps it at
 * net.core.somaxconn (4096 by default).
 */
#define MIG_LISTEN_BACKLOG 1024

static int parse_unix(const char *path, const char *spec, struct mig_addr *a, char *err,
		      size_t errlen)
{
	struct sockaddr_un *un = (struct sockaddr_un *)&a->sa[0];

	if (!path[0] || strlen(path) >= sizeof(un->sun_path)) {
		snprintf(err, errlen,
			 "bad address '%.200s': unix:PATH needs a path of 1 to %zu bytes", spec,
			 sizeof(un->sun_path) - 1);
		return -EINVAL;
	}
	un->sun_family = AF_UNIX;
	memcpy(un->sun_path, path, strlen(path) + 1);
	a->len[0] = sizeof(*un);
	a->n = 1;
	a->is_unix = true;
	return 0;
}

/* "HOST:PORT" or "[IPV6]:PORT" cut into host and port: 0, or -EINVAL. */
static int split_host_port(const char *p, char *host, size_t hlen, const char **port)
{
	const char *end;

	if (p[0] == '[') {
		end = strchr(p, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		p++;
	} else {
		end = strrchr(p, ':');
		if (!end || memchr(p, ':', (size_t)(end - p))) /* IPv6 goes in brackets */
			return -EINVAL;
	}
	if ((size_t)(end - p) >= hlen)
		return -EINVAL;
	memcpy(host, p, (size_t)(end - p));
	host[end - p] = 0;
	*port = end + (end[0] == ']' ? 2 : 1);
	return 0;
}

/* Every address host names (up to MIG_ADDR_MAX), in getaddrinfo's order. */
static int resolve(const char *host, const char *port, const char *spec, struct mig_addr *a,
		   char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV | (a->any ? AI_PASSIVE : 0) },
			*res, *r;
	int e = getaddrinfo(a->any ? NULL : host, port, &hints, &res);

	if (e) {
		snprintf(err, errlen, "bad address '%.200s': %s: %s", spec, host,
			 e == EAI_SYSTEM ? strerror(errno) : gai_strerror(e));
		return -EINVAL;
	}
	for (r = res; r && a->n < MIG_ADDR_MAX; r = r->ai_next) {
		if (r->ai_family != AF_INET && r->ai_family != AF_INET6)
			continue;
		memcpy(&a->sa[a->n], r->ai_addr, r->ai_addrlen);
		a->len[a->n++] = r->ai_addrlen;
	}
	freeaddrinfo(res);
	if (!a->n) {
		snprintf(err, errlen, "bad address '%.200s': no IPv4 or IPv6 address", spec);
		return -EINVAL;
	}
	return 0;
}

/* IPv6's any address first where there is one: one socket then takes IPv4 too. */
static void any_v6_first(struct mig_addr *a)
{
	for (unsigned i = 1; i < a->n; i++)
		if (a->sa[i].ss_family == AF_INET6 && a->sa[0].ss_family != AF_INET6) {
			struct sockaddr_storage t = a->sa[0];
			socklen_t l = a->len[0];

			a->sa[0] = a->sa[i];
			a->len[0] = a->len[i];
			a->sa[i] = t;
			a->len[i] = l;
		}
}

int mig_addr_parse(const char *spec, struct mig_addr *a, char *err, size_t errlen)
{
	const char *port;
	char *end;
	long pn;

	memset(a, 0, sizeof(*a));
	snprintf(a->text, sizeof(a->text), "%s", spec);
	if (!strncmp(spec, "unix:", 5))
		return parse_unix(spec + 5, spec, a, err, errlen);
	if (strncmp(spec, "tcp:", 4) ||
	    split_host_port(spec + 4, a->host, sizeof(a->host), &port)) {
		snprintf(err, errlen,
			 "bad address '%.200s' (expected tcp:HOST:PORT, tcp:[IPV6]:PORT, "
			 "tcp::PORT or unix:PATH)",
			 spec);
		return -EINVAL;
	}
	pn = strtol(port, &end, 10);
	if (!port[0] || *end || pn <= 0 || pn > 65535) {
		snprintf(err, errlen, "bad port in address '%.200s' (1 to 65535)", spec);
		return -EINVAL;
	}
	a->any = !a->host[0] || !strcmp(a->host, "0"); /* QEMU's tcp::P and tcp:0:P */
	if (resolve(a->host, port, spec, a, err, errlen))
		return -EINVAL;
	if (a->any)
		any_v6_first(a);
	return 0;
}

/*
 * A unix socket's stale file, as QEMU removes it: a socket nobody listens
 * on (its program died).  A live one (another VMM's control socket, a
 * destination waiting there) stays, and so does anything else: bind()
 * then fails with EADDRINUSE.  QEMU unlinks whatever socket is there,
 * which cut the other program off for good.
 */
static void unlink_stale(const struct sockaddr_un *un)
{
	struct stat st;
	int fd, r;

	if (lstat(un->sun_path, &st) || !S_ISSOCK(st.st_mode))
		return;
	/* Non-blocking: a live one with a full backlog is EAGAIN, not a wait. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	r = connect(fd, (const struct sockaddr *)un, sizeof(*un)) ? errno : 0;
	close(fd);
	if (r == ECONNREFUSED)
		unlink(un->sun_path);
}

static int listen_one(const struct mig_addr *a, unsigned i)
{
	int fd = socket(a->sa[i].ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;

	if (fd < 0)
		return -errno;
	if (a->is_unix)
		unlink_stale((const struct sockaddr_un *)&a->sa[i]);
	else
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (a->sa[i].ss_family == AF_INET6) /* IPv4 too on IPv6's any address */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, (const struct sockaddr *)&a->sa[i], a->len[i]) < 0 ||
	    listen(fd, MIG_LISTEN_BACKLOG) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

int mig_listen(const struct mig_addr *a, char *err, size_t errlen)
{
	int fd = -EINVAL;

	for (unsigned i = 0; i < a->n; i++) {
		fd = listen_one(a, i);
		if (fd >= 0)
			return fd;
	}
	snprintf(err, errlen, "cannot listen on %s: %s%s", a->text, strerror(-fd),
		 a->is_unix && fd == -EADDRINUSE
		     ? " (a live socket or another file is there: left alone)"
		     : "");
	return fd;
}

/* Connect to address i within timeout_ms: the socket, or -errno. */
static int connect_one(const struct mig_addr *a, unsigned i, int timeout_ms)
{
	int fd = socket(a->sa[i].ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&a->sa[i], a->len[i]) < 0) {
		e = errno;
		if (e == EINPROGRESS) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull, now;
			socklen_t sl = sizeof(e);
			int n;
			/* poll() ends with EINTR when the process was stopped and continued. */
			do {
				now = now_ns();
				n = poll(&pfd, 1,
					 now < end ? (int)((end - now + 999999) / 1000000) : 0);
			} while (n < 0 && errno == EINTR);
			if (n == 0)
				e = ETIMEDOUT;
			else if (n < 0)
				e = errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
				e = errno;
		}
	}
	if (e) {
		close(fd);
		return -e;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

int mig_connect(const struct mig_addr *a, int timeout_ms, char *err, size_t errlen)
{
	uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int fd = -EINVAL;

	if (a->any) {
		snprintf(err, errlen,
			 "cannot connect to %s: it names any address, which only a listener takes",
			 a->text);
		return -EINVAL;
	}
	/* Each address in turn, as getaddrinfo() ordered them, within the one timeout. */
	for (unsigned i = 0; i < a->n; i++) {
		uint64_t now = now_ns();

		fd = connect_one(a, i, now < end ? (int)((end - now) / 1000000) : 0);
		if (fd >= 0)
			return fd;
	}
	snprintf(err, errlen, "cannot connect to %s: %s", a->text, strerror(-fd));
	return fd;
}
