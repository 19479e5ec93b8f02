// SPDX-License-Identifier: GPL-2.0
/*
 * The QMP server (vmm/include/vmm/qmp.h): the socket, one thread per
 * client, JSON in through json-c's incremental tokener (a request may
 * arrive in pieces, or several in one read), JSON out through json-c (every
 * string a peer gave is escaped on the way back).
 *
 * Locking: q->lock guards the client table; a client's wlock serialises
 * its writes (replies from its thread, events from any thread).  Order:
 * q->lock, then a client's wlock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "vmm/qmp.h"

#ifndef BUILD_VERSION
#define BUILD_VERSION "unknown" /* the Makefile passes git describe */
#endif

#define QMP_SEND_TIMEOUT_S 2 /* a client that does not read for this long is cut */

struct qmp_client {
	struct qmp_server *q;
	int fd, negotiated, done;
	pthread_t thread;
	pthread_mutex_t wlock;
};

struct qmp_server {
	const struct qmp_command *cmds;
	void *ctx;
	int fd;
	dev_t dev; /* the socket we bound: removed at the end only if still ours */
	ino_t ino;
	char *path;
	pthread_t accept_thread;
	pthread_mutex_t lock;
	int stopping;
	struct qmp_client *clients[QMP_MAX_CLIENTS];
};

void qmp_fail(struct qmp_reply *reply, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reply->desc, sizeof(reply->desc), fmt, ap);
	va_end(ap);
	reply->error_class = QMP_ERROR_GENERIC;
}

/* Write obj and a CRLF (as QEMU does) to the client; consumes obj.  -1 if the client is gone. */
static int client_send(struct qmp_client *c, struct json_object *obj)
{
	const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(text), off = 0;
	char *line = malloc(len + 2);
	int r = line ? 0 : -1;

	if (line) {
		memcpy(line, text, len);
		memcpy(line + len, "\r\n", 2);
		len += 2;
	}
	pthread_mutex_lock(&c->wlock);
	while (!r && off < len) {
		ssize_t k = send(c->fd, line + off, len - off, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			r = -1;
		else
			off += (size_t)k;
	}
	if (r) /* gone, or not reading: its thread sees the shutdown and ends */
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&c->wlock);
	free(line);
	json_object_put(obj);
	return r;
}

static struct json_object *error_object(const char *class, const char *desc)
{
	struct json_object *e = json_object_new_object(), *o = json_object_new_object();

	json_object_object_add(e, "class", json_object_new_string(class));
	json_object_object_add(e, "desc", json_object_new_string(desc));
	json_object_object_add(o, "error", e);
	return o;
}

static void greet(struct qmp_client *c)
{
	struct json_object *g = json_object_new_object(), *v = json_object_new_object();
	struct json_object *qemu = json_object_new_object(), *qmp = json_object_new_object();

	json_object_object_add(qemu, "major", json_object_new_int(0));
	json_object_object_add(qemu, "minor", json_object_new_int(0));
	json_object_object_add(qemu, "micro", json_object_new_int(0));
	json_object_object_add(v, "qemu", qemu);
	json_object_object_add(v, "package", json_object_new_string("postcopy-kvm " BUILD_VERSION));
	json_object_object_add(qmp, "version", v);
	json_object_object_add(qmp, "capabilities", json_object_new_array());
	json_object_object_add(g, "QMP", qmp);
	client_send(c, g);
}

static const struct qmp_command *find_command(struct qmp_server *q, const char *name)
{
	for (const struct qmp_command *cmd = q->cmds; cmd->name; cmd++)
		if (!strcmp(cmd->name, name))
			return cmd;
	return NULL;
}

/* The names every client may ask for: query-commands. */
static struct json_object *command_list(struct qmp_server *q)
{
	struct json_object *a = json_object_new_array();
	static const char *const own[] = { "qmp_capabilities", "query-commands" };

	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(own[i]));
		json_object_array_add(a, o);
	}
	for (const struct qmp_command *cmd = q->cmds; cmd->name; cmd++) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(cmd->name));
		json_object_array_add(a, o);
	}
	return a;
}

/* Run one command for the client into reply. */
static void dispatch(struct qmp_client *c, const char *name, struct json_object *args,
		     struct qmp_reply *reply)
{
	const struct qmp_command *cmd;

	if (!strcmp(name, "qmp_capabilities")) {
		if (c->negotiated)
			qmp_fail(reply, "Capabilities negotiation is already complete, command "
					"ignored");
		c->negotiated = 1;
		return;
	}
	if (!c->negotiated) {
		qmp_fail(reply, "Expecting capabilities negotiation with 'qmp_capabilities'");
		reply->error_class = QMP_ERROR_NOCMD;
		return;
	}
	if (!strcmp(name, "query-commands")) {
		reply->ret = command_list(c->q);
		return;
	}
	cmd = find_command(c->q, name);
	if (!cmd) {
		qmp_fail(reply, "The command %.64s has not been found", name);
		reply->error_class = QMP_ERROR_NOCMD;
		return;
	}
	cmd->run(c->q->ctx, args, reply);
}

/* One parsed request: checked, run, answered.  -1 when the client is gone. */
static int serve_request(struct qmp_client *c, struct json_object *req)
{
	struct json_object *exec = NULL, *args = NULL, *id = NULL, *out;
	struct qmp_reply reply = { 0 };

	if (!json_object_is_type(req, json_type_object) ||
	    !json_object_object_get_ex(req, "execute", &exec) ||
	    !json_object_is_type(exec, json_type_string))
		qmp_fail(&reply, "QMP input must be an object with a string \"execute\"");
	else if (json_object_object_get_ex(req, "arguments", &args) &&
		 !json_object_is_type(args, json_type_object))
		qmp_fail(&reply, "QMP input member 'arguments' must be an object");
	else
		dispatch(c, json_object_get_string(exec), args, &reply);
	if (reply.error_class) {
		json_object_put(reply.ret);
		out = error_object(reply.error_class, reply.desc);
	} else {
		out = json_object_new_object();
		json_object_object_add(out, "return",
				       reply.ret ? reply.ret : json_object_new_object());
	}
	if (json_object_is_type(req, json_type_object) && json_object_object_get_ex(req, "id", &id))
		json_object_object_add(out, "id", json_object_get(id));
	return client_send(c, out);
}

/*
 * Feed n bytes to the tokener, serving each complete request.  0 to go on;
 * -1 to drop the client (gone, or a malformed or over-long request, which
 * is answered first: nothing after it can be trusted to line up).
 */
static int feed(struct qmp_client *c, struct json_tokener *tok, const char *buf, size_t n,
		size_t *pending)
{
	while (n) {
		struct json_object *req;
		enum json_tokener_error e;
		size_t used;

		if (memchr(buf, 0, n)) {
			client_send(c, error_object(QMP_ERROR_GENERIC, "NUL byte in QMP input"));
			return -1;
		}
		req = json_tokener_parse_ex(tok, buf, (int)n);
		e = json_tokener_get_error(tok);
		used = json_tokener_get_parse_end(tok);
		if (e == json_tokener_continue) {
			*pending += n;
			if (*pending > QMP_MAX_REQUEST) {
				client_send(c, error_object(QMP_ERROR_GENERIC,
							    "QMP request over 65536 bytes"));
				return -1;
			}
			return 0;
		}
		if (e != json_tokener_success) {
			char desc[160];
			snprintf(desc, sizeof(desc), "JSON parse error: %s",
				 json_tokener_error_desc(e));
			client_send(c, error_object(QMP_ERROR_GENERIC, desc));
			return -1;
		}
		*pending = 0;
		json_tokener_reset(tok);
		int r = serve_request(c, req);
		json_object_put(req);
		if (r)
			return -1;
		buf += used;
		n -= used;
		while (n && (*buf == ' ' || *buf == '\n' || *buf == '\r' || *buf == '\t')) {
			buf++;
			n--;
		}
	}
	return 0;
}

static void *client_thread(void *arg)
{
	struct qmp_client *c = arg;
	struct json_tokener *tok = json_tokener_new();
	size_t pending = 0;
	char buf[4096];

	if (tok) {
		greet(c);
		for (;;) {
			ssize_t k = recv(c->fd, buf, sizeof(buf), 0);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0 || feed(c, tok, buf, (size_t)k, &pending))
				break;
		}
		json_tokener_free(tok);
	}
	pthread_mutex_lock(&c->q->lock);
	c->done = 1;
	pthread_mutex_unlock(&c->q->lock);
	return NULL;
}

/* Join and free clients whose threads ended; their slots are free again. */
static void reap_clients(struct qmp_server *q)
{
	for (int i = 0; i < QMP_MAX_CLIENTS; i++) {
		struct qmp_client *c;

		pthread_mutex_lock(&q->lock);
		c = q->clients[i];
		if (c && !c->done)
			c = NULL;
		if (c)
			q->clients[i] = NULL;
		pthread_mutex_unlock(&q->lock);
		if (!c)
			continue;
		pthread_join(c->thread, NULL);
		close(c->fd);
		pthread_mutex_destroy(&c->wlock);
		free(c);
	}
}

/* Only the server's own uid, or root: 1; else 0 after telling the client why. */
static int peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char desc[160];
	struct qmp_client tmp = { .fd = fd };

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return 0;
	if (cred.uid == geteuid() || cred.uid == 0)
		return 1;
	snprintf(desc, sizeof(desc), "refused: uid %u does not own this VMM (uid %u)",
		 (unsigned)cred.uid, (unsigned)geteuid());
	pthread_mutex_init(&tmp.wlock, NULL);
	client_send(&tmp, error_object(QMP_ERROR_GENERIC, desc));
	pthread_mutex_destroy(&tmp.wlock);
	fprintf(stderr, "vmm: control socket: %s\n", desc);
	return 0;
}

/* A new client in a free slot: 0, or -1 (table full, no memory, no thread). */
static int add_client(struct qmp_server *q, int fd)
{
	struct qmp_client *c = calloc(1, sizeof(*c));
	struct timeval tv = { .tv_sec = QMP_SEND_TIMEOUT_S };
	int slot = -1;

	if (!c)
		return -1;
	*c = (struct qmp_client){ .q = q, .fd = fd };
	pthread_mutex_init(&c->wlock, NULL);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_MAX_CLIENTS && slot < 0; i++)
		if (!q->clients[i])
			slot = i;
	if (slot >= 0 && pthread_create(&c->thread, NULL, client_thread, c) == 0)
		q->clients[slot] = c;
	else
		slot = -1;
	pthread_mutex_unlock(&q->lock);
	if (slot < 0) {
		client_send(c, error_object(QMP_ERROR_GENERIC, "too many QMP clients"));
		pthread_mutex_destroy(&c->wlock);
		free(c);
		return -1;
	}
	return 0;
}

static void *accept_thread(void *arg)
{
	struct qmp_server *q = arg;

	for (;;) {
		int fd = accept4(q->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		reap_clients(q);
		if (!peer_allowed(fd) || add_client(q, fd))
			close(fd);
	}
	return NULL;
}

void qmp_event(struct qmp_server *q, const char *name, struct json_object *data)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_MAX_CLIENTS; i++) {
		struct qmp_client *c = q->clients[i];
		struct json_object *ev, *ts;

		if (!c || c->done || !c->negotiated)
			continue;
		ev = json_object_new_object();
		ts = json_object_new_object();
		json_object_object_add(ev, "event", json_object_new_string(name));
		if (data)
			json_object_object_add(ev, "data", json_object_get(data));
		json_object_object_add(ts, "seconds", json_object_new_int64(tv.tv_sec));
		json_object_object_add(ts, "microseconds", json_object_new_int64(tv.tv_usec));
		json_object_object_add(ev, "timestamp", ts);
		client_send(c, ev);
	}
	pthread_mutex_unlock(&q->lock);
	json_object_put(data);
}

/*
 * The path may be left over from a VMM that died: removed only when it is a
 * socket nobody listens on.  Anything else there stays.  0 or -errno.
 */
static int clear_stale(const char *path, const struct sockaddr_un *sa, char *err, size_t errlen)
{
	struct stat st;
	int fd, r;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "%s: exists and is not a socket; not removed", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ? -errno : 0;
	close(fd);
	if (r == 0 || r != -ECONNREFUSED) {
		snprintf(err, errlen, "%s: %s", path,
			 r == 0 ? "another VMM is listening there" : strerror(-r));
		return r == 0 ? -EADDRINUSE : r;
	}
	return unlink(path) ? -errno : 0;
}

/*
 * The socket is born 0600: the umask is set around bind(), not a chmod()
 * by path after it (which another process could race or redirect).  The
 * umask is process-wide for that instant; nothing else of ours creates
 * files meanwhile.
 */
static int bind_private(struct qmp_server *q, const struct sockaddr_un *sa, char *err,
			size_t errlen)
{
	struct stat st;
	mode_t old;
	int r;

	q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return -errno;
	old = umask(0177);
	r = bind(q->fd, (const struct sockaddr *)sa, sizeof(*sa)) ? -errno : 0;
	umask(old);
	if (!r && stat(q->path, &st))
		r = -errno;
	if (!r) {
		q->dev = st.st_dev;
		q->ino = st.st_ino;
	}
	if (!r && listen(q->fd, 8))
		r = -errno;
	if (r)
		snprintf(err, errlen, "cannot open the control socket %s: %s", q->path,
			 strerror(-r));
	return r;
}

struct qmp_server *qmp_listen(const char *path, const struct qmp_command *cmds, void *ctx,
			      char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct qmp_server *q;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "control socket path too long: %s", path);
		return NULL;
	}
	strcpy(sa.sun_path, path);
	q = calloc(1, sizeof(*q));
	if (!q || !(q->path = strdup(path))) {
		free(q);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	q->cmds = cmds;
	q->ctx = ctx;
	q->fd = -1;
	pthread_mutex_init(&q->lock, NULL);
	if (clear_stale(path, &sa, err, errlen) || bind_private(q, &sa, err, errlen) ||
	    pthread_create(&q->accept_thread, NULL, accept_thread, q)) {
		if (!err[0])
			snprintf(err, errlen, "cannot start the control socket's thread");
		if (q->fd >= 0) {
			close(q->fd);
			q->fd = -1;
		}
		q->stopping = -1; /* no accept thread to join */
		qmp_close(q);
		return NULL;
	}
	return q;
}

void qmp_close(struct qmp_server *q)
{
	struct stat st;

	if (!q)
		return;
	if (q->fd >= 0) {
		shutdown(q->fd, SHUT_RDWR);
		if (q->stopping >= 0)
			pthread_join(q->accept_thread, NULL);
		close(q->fd);
	}
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_MAX_CLIENTS; i++)
		if (q->clients[i])
			shutdown(q->clients[i]->fd, SHUT_RDWR);
	pthread_mutex_unlock(&q->lock);
	for (int i = 0; i < QMP_MAX_CLIENTS; i++)
		if (q->clients[i]) {
			pthread_join(q->clients[i]->thread, NULL);
			close(q->clients[i]->fd);
			pthread_mutex_destroy(&q->clients[i]->wlock);
			free(q->clients[i]);
		}
	if (q->dev && !lstat(q->path, &st) && st.st_dev == q->dev && st.st_ino == q->ino)
		unlink(q->path);
	pthread_mutex_destroy(&q->lock);
	free(q->path);
	free(q);
}
