// SPDX-License-Identifier: GPL-2.0
/*
 * A QMP client over a unix socket (qmp-client.h): JSON through json-c's
 * incremental tokener, one message at a time.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "qmp-client.h"

/*
 * The listener must be our own VMM (or root's): a socket another user put
 * at the path would otherwise receive our request, TLS file paths and all.
 * SO_PEERCRED names the process that listens, whatever the path's owner.
 */
static int check_listener(int fd, const char *path, char *err, size_t errlen)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		snprintf(err, errlen, "%s: cannot read the VMM's credentials: %s", path,
			 strerror(errno));
		return -1;
	}
	if (cred.uid == geteuid() || cred.uid == 0)
		return 0;
	snprintf(err, errlen,
		 "%s is served by uid %u, not by you (uid %u) or root: not talking to it", path,
		 (unsigned)cred.uid, (unsigned)geteuid());
	return -1;
}

int qmpc_next(struct qmpc *c, int timeout_ms, struct json_object **msg)
{
	for (;;) {
		while (c->off < c->len && strchr(" \r\n\t", c->buf[c->off]))
			c->off++;
		if (c->off < c->len) {
			struct json_object *o =
			    json_tokener_parse_ex(c->tok, c->buf + c->off, (int)(c->len - c->off));
			enum json_tokener_error e = json_tokener_get_error(c->tok);

			if (e != json_tokener_continue && e != json_tokener_success)
				return -1;
			c->off += json_tokener_get_parse_end(c->tok);
			if (e == json_tokener_success) {
				json_tokener_reset(c->tok);
				*msg = o;
				return 1;
			}
		}
		c->len = c->off = 0;
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int n = poll(&p, 1, timeout_ms);
		if (n == 0)
			return 0;
		ssize_t k = n > 0 ? recv(c->fd, c->buf, sizeof(c->buf), 0) : -1;
		if (k <= 0)
			return -1;
		c->len = (size_t)k;
	}
}

static int send_command(struct qmpc *c, const char *cmd, struct json_object *args)
{
	struct json_object *o = json_object_new_object();
	const char *text;
	size_t len;
	int r = 0;

	json_object_object_add(o, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(o, "arguments", args);
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	len = strlen(text);
	if (send(c->fd, text, len, MSG_NOSIGNAL) != (ssize_t)len ||
	    send(c->fd, "\n", 1, MSG_NOSIGNAL) != 1)
		r = -1;
	json_object_put(o);
	return r;
}

/* The reply to the command in flight: 0 with *ret, or -1 with err. */
static int take_reply(struct json_object *m, struct json_object **ret, char *err, size_t errlen)
{
	struct json_object *v, *desc;

	if (json_object_object_get_ex(m, "return", &v)) {
		if (ret)
			*ret = json_object_get(v);
		return 0;
	}
	if (json_object_object_get_ex(m, "error", &v) &&
	    json_object_object_get_ex(v, "desc", &desc))
		snprintf(err, errlen, "%s", json_object_get_string(desc));
	else
		snprintf(err, errlen, "the VMM sent a reply that is neither return nor error");
	return -1;
}

int qmpc_execute(struct qmpc *c, const char *cmd, struct json_object *args, int timeout_ms,
		 void (*on_event)(void *arg, struct json_object *ev), void *arg,
		 struct json_object **ret, char *err, size_t errlen)
{
	if (send_command(c, cmd, args)) {
		snprintf(err, errlen, "cannot talk to the VMM: %s", strerror(errno));
		return -1;
	}
	for (;;) {
		struct json_object *m = NULL;
		int n = qmpc_next(c, timeout_ms, &m);

		if (n <= 0) {
			snprintf(err, errlen,
				 n == 0 ? "the VMM is silent (no answer to %s for %d ms)"
					: "the VMM closed the control connection (%s)",
				 cmd, timeout_ms);
			return -1;
		}
		if (json_object_object_get_ex(m, "event", NULL)) {
			if (on_event)
				on_event(arg, m);
			json_object_put(m);
			continue;
		}
		n = take_reply(m, ret, err, errlen);
		json_object_put(m);
		return n;
	}
}

static int connect_negotiate(struct qmpc *c, const char *path, int timeout_ms, char *err,
			     size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct json_object *greeting = NULL;

	*c = (struct qmpc){ .fd = -1 };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	c->tok = json_tokener_new();
	if (c->fd < 0 || !c->tok || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "cannot attach to the VMM at %s: %s", path, strerror(errno));
		return -1;
	}
	if (check_listener(c->fd, path, err, errlen))
		return -1;
	int n = qmpc_next(c, timeout_ms, &greeting);
	if (n <= 0 || !json_object_object_get_ex(greeting, "QMP", NULL)) {
		char e2[200] = "no QMP greeting";
		struct json_object *e, *d;

		if (n == 0)
			snprintf(e2, sizeof(e2), "silent (no QMP greeting for %d ms)", timeout_ms);
		else if (greeting && json_object_object_get_ex(greeting, "error", &e) &&
			 json_object_object_get_ex(e, "desc", &d))
			snprintf(e2, sizeof(e2), "%s", json_object_get_string(d));
		snprintf(err, errlen, "the VMM at %s: %s", path, e2);
		json_object_put(greeting);
		return -1;
	}
	json_object_put(greeting);
	return qmpc_execute(c, "qmp_capabilities", NULL, timeout_ms, NULL, NULL, NULL, err, errlen);
}

int qmpc_connect(struct qmpc *c, const char *path, int timeout_ms, char *err, size_t errlen)
{
	int r = connect_negotiate(c, path, timeout_ms, err, errlen);

	if (r)
		qmpc_close(c);
	return r;
}

void qmpc_close(struct qmpc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->tok)
		json_tokener_free(c->tok);
	c->fd = -1;
	c->tok = NULL;
}
