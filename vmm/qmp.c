// SPDX-License-Identifier: GPL-2.0
/*
 * The QMP server (vmm/include/vmm/qmp.h): the socket, one thread per
 * client; input cut into messages as QEMU cuts it (vmm/qmp-frame.c: a
 * request may arrive in pieces, or several in one read, and a bad one is
 * answered without losing the stream), each parsed by json-c; JSON out
 * through json-c (every string a peer gave is escaped on the way back).
 *
 * Output: every reply and event goes into the client's own queue, bounded
 * (QMP_QUEUE_MAX); only the client's thread writes its socket, never
 * blocking (the socket is non-blocking, the thread polls).  So a client
 * that stops reading delays nobody: its queue fills, and when it is full
 * the client is cut, the reason logged.
 *
 * Places: QMP_MAX_CLIENTS negotiated clients, and QMP_MAX_PENDING
 * connections that have not negotiated yet.  A connection must negotiate
 * within QMP_NEGOTIATE_MS; one more than QMP_MAX_PENDING pushes out the
 * oldest pending one.  So idle connections never keep the owner (whoever
 * the uid check lets in) from a place.
 *
 * Negotiation: a client gets events only in QMP_COMMANDS, and enters it
 * only after its thread has queued the {"return": {}} of qmp_capabilities
 * (QMP_ADMITTED in between: its place is taken, no event yet).  Events
 * are queued under q->lock to clients in QMP_COMMANDS only, so none can
 * be ahead of that reply in its queue: QEMU's own clients take anything
 * else first for a failed negotiation.
 *
 * Locking: q->lock guards the client table, each client's mode and done,
 * and the wake-up of its thread (its eventfd is closed only after done is
 * set under q->lock); a client's qlock guards its queue and cut.  Order:
 * q->lock, then a qlock.  No socket is written under either.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "vmm/qmp-frame.h"
#include "vmm/qmp.h"

#ifndef BUILD_VERSION
#define BUILD_VERSION "unknown" /* the Makefile passes git describe */
#endif
#if !defined(VERSION_MAJOR) || !defined(VERSION_MINOR) || !defined(VERSION_MICRO)
#error "the Makefile passes the numbers of the VERSION file"
#endif

#define QMP_QUEUE_MAX (1u << 20) /* bytes waiting for one client; over it, it is cut */
#define QMP_FLUSH_MS  2000	 /* a leaving client's last replies may take this long */

/* One line waiting to be written: a reply or an event, CRLF included. */
struct qmp_msg {
	struct qmp_msg *next;
	size_t len, off; /* off: bytes of it already written */
	char text[];
};

/* Where a client is in QMP's negotiation (see the top of this file). */
enum qmp_mode {
	QMP_GREETED,  /* only qmp_capabilities runs; no events */
	QMP_ADMITTED, /* qmp_capabilities accepted, its reply not queued yet */
	QMP_COMMANDS, /* every command, and events */
};

struct qmp_client {
	struct qmp_server *q;
	int fd, efd; /* the socket (non-blocking); an eventfd that wakes the thread */
	unsigned id; /* the n-th connection, for the log */
	enum qmp_mode mode;
	int done;
	uint64_t t_connect_ms;
	pthread_t thread;
	pthread_mutex_t qlock;
	struct qmp_msg *head, *tail;
	size_t queued;	 /* bytes in the queue */
	const char *cut; /* set: the server ends this client, for that reason */
};

#define QMP_SLOTS (QMP_MAX_CLIENTS + QMP_MAX_PENDING)

struct qmp_server {
	struct qmp_commands sets[QMP_MAX_OWNERS];
	size_t nsets;
	int fd;
	dev_t dev; /* the socket we bound: removed at the end only if still ours */
	ino_t ino;
	char *path;
	pthread_t accept_thread;
	pthread_mutex_t lock;
	int stopping;
	unsigned next_id;
	struct qmp_client *clients[QMP_SLOTS];
};

/* Ends of a connection that are not worth a line in the log. */
static const char LEFT[] = "left", STOPPING[] = "the VMM stops";

/* Wake c's thread (q->lock held: its eventfd is open while it is not done). */
static void wake(struct qmp_client *c)
{
	uint64_t one = 1;

	if (!c->done && write(c->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		fprintf(stderr, "vmm: control socket: cannot wake client %u: %s\n", c->id,
			strerror(errno));
}

/* Set why the server ends c (the first reason stays); q->lock held. */
static void cut_client(struct qmp_client *c, const char *why)
{
	pthread_mutex_lock(&c->qlock);
	if (!c->cut)
		c->cut = why;
	pthread_mutex_unlock(&c->qlock);
	wake(c);
}

void qmp_fail(struct qmp_reply *reply, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reply->desc, sizeof(reply->desc), fmt, ap);
	va_end(ap);
	reply->error_class = QMP_ERROR_GENERIC;
}

/* A line of text and its CRLF (as QEMU ends them), or NULL without memory. */
static struct qmp_msg *new_msg(const char *text, size_t len)
{
	struct qmp_msg *m = malloc(sizeof(*m) + len + 2);

	if (!m)
		return NULL;
	*m = (struct qmp_msg){ .len = len + 2 };
	memcpy(m->text, text, len);
	memcpy(m->text + len, "\r\n", 2);
	return m;
}

/*
 * m (taken) at the end of c's queue; past QMP_QUEUE_MAX the client is cut
 * instead.  Nothing is queued for a client cut for what it did (a full
 * queue, no memory); the server's own end (STOPPING) still takes it: the
 * reply to the command that ended the VMM (quit) may be queued after the
 * main thread has cut every client, and client_end() sends what it can.
 */
static void enqueue(struct qmp_client *c, struct qmp_msg *m)
{
	pthread_mutex_lock(&c->qlock);
	if (!m && !c->cut)
		c->cut = "cut: out of memory for its queue";
	else if (!c->cut && c->queued + m->len > QMP_QUEUE_MAX)
		c->cut = "cut: it does not read what it is sent (over 1 MiB of replies and events "
			 "waited for it)";
	if (!m || (c->cut && c->cut != STOPPING) || c->queued + m->len > QMP_QUEUE_MAX) {
		free(m);
	} else {
		if (c->tail)
			c->tail->next = m;
		else
			c->head = m;
		c->tail = m;
		c->queued += m->len;
	}
	pthread_mutex_unlock(&c->qlock);
}

/* obj (consumed) into the client's queue, from its own thread: written when it polls next. */
static void client_send(struct qmp_client *c, struct json_object *obj)
{
	const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);

	enqueue(c, new_msg(text, strlen(text)));
	json_object_put(obj);
}

static struct qmp_msg *queue_head(struct qmp_client *c)
{
	struct qmp_msg *m;

	pthread_mutex_lock(&c->qlock);
	m = c->head;
	pthread_mutex_unlock(&c->qlock);
	return m;
}

/*
 * Write from the queue until it is empty or the socket would block: 0, or
 * -1 if the client is gone.  Only the client's thread takes from the queue,
 * so the head it writes stays put; others only append.
 */
static int send_some(struct qmp_client *c)
{
	struct qmp_msg *m;

	while ((m = queue_head(c))) {
		ssize_t k =
		    send(c->fd, m->text + m->off, m->len - m->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0)
			return -1;
		m->off += (size_t)k;
		if (m->off < m->len)
			continue;
		pthread_mutex_lock(&c->qlock);
		c->head = m->next;
		if (!c->head)
			c->tail = NULL;
		c->queued -= m->len;
		pthread_mutex_unlock(&c->qlock);
		free(m);
	}
	return 0;
}

static struct json_object *error_object(const char *class, const char *desc)
{
	struct json_object *e = json_object_new_object(), *o = json_object_new_object();

	json_object_object_add(e, "class", json_object_new_string(class));
	json_object_object_add(e, "desc", json_object_new_string(desc));
	json_object_object_add(o, "error", e);
	return o;
}

/*
 * The project's version in query-version's shape, which the greeting
 * carries too (QMP spec): the numbers of the VERSION file and the build's
 * git describe, both passed by the Makefile.
 */
static struct json_object *version_object(void)
{
	struct json_object *v = json_object_new_object(), *qemu = json_object_new_object();

	json_object_object_add(qemu, "major", json_object_new_int(VERSION_MAJOR));
	json_object_object_add(qemu, "minor", json_object_new_int(VERSION_MINOR));
	json_object_object_add(qemu, "micro", json_object_new_int(VERSION_MICRO));
	json_object_object_add(v, "qemu", qemu);
	json_object_object_add(v, "package", json_object_new_string("postcopy-kvm " BUILD_VERSION));
	return v;
}

static void greet(struct qmp_client *c)
{
	struct json_object *g = json_object_new_object(), *qmp = json_object_new_object();

	json_object_object_add(qmp, "version", version_object());
	json_object_object_add(qmp, "capabilities", json_object_new_array());
	json_object_object_add(g, "QMP", qmp);
	client_send(c, g);
}

/*
 * qmp_capabilities: the client takes one of the QMP_MAX_CLIENTS places of
 * negotiated clients, or is refused and cut.  It enters QMP_COMMANDS
 * (events) only once this reply is queued: serve_request().
 */
static void cmd_capabilities(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct qmp_client *c = ctx;
	struct qmp_server *q = c->q;
	int n = 0;

	(void)args;
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_SLOTS; i++)
		n += q->clients[i] && !q->clients[i]->done && q->clients[i]->mode != QMP_GREETED;
	if (c->mode != QMP_GREETED) {
		qmp_fail(reply, "Capabilities negotiation is already complete, command ignored");
		reply->error_class = QMP_ERROR_NOCMD; /* as QEMU: it is not a command any more */
	} else if (n >= QMP_MAX_CLIENTS) {
		qmp_fail(reply, "too many QMP clients: %d have negotiated; closing", n);
		cut_client(c, "cut: too many negotiated clients");
	} else {
		c->mode = QMP_ADMITTED;
	}
	pthread_mutex_unlock(&q->lock);
}

static void cmd_query_commands(void *ctx, struct json_object *args, struct qmp_reply *reply);

static void cmd_query_version(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)ctx;
	(void)args;
	reply->ret = version_object();
}

/* The server's own commands; their ctx is the client. */
static const struct qmp_command builtins[] = {
	{ "qmp_capabilities", cmd_capabilities },
	{ "query-commands", cmd_query_commands },
	{ "query-version", cmd_query_version },
	{ NULL, NULL },
};

/*
 * The i-th command dispatched: the built-ins, then each table given to
 * qmp_listen() in order; NULL past the end.  *ctx: what its handler gets
 * (the client, for a built-in).  The one list that both dispatch() and
 * query-commands read.
 */
static const struct qmp_command *command_at(struct qmp_client *c, size_t i, void **ctx)
{
	size_t n = sizeof(builtins) / sizeof(builtins[0]) - 1;

	*ctx = c;
	if (i < n)
		return &builtins[i];
	i -= n;
	for (size_t k = 0; k < c->q->nsets; k++) {
		*ctx = c->q->sets[k].ctx;
		for (const struct qmp_command *cmd = c->q->sets[k].cmds; cmd->name; cmd++)
			if (!i--)
				return cmd;
	}
	return NULL;
}

static void cmd_query_commands(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct qmp_client *c = ctx;
	struct json_object *a = json_object_new_array();
	const struct qmp_command *cmd;
	void *owner;

	(void)args;
	for (size_t i = 0; (cmd = command_at(c, i, &owner)); i++) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(cmd->name));
		json_object_array_add(a, o);
	}
	reply->ret = a;
}

/* Run one command for the client into reply. */
static void dispatch(struct qmp_client *c, const char *name, struct json_object *args,
		     struct qmp_reply *reply)
{
	const struct qmp_command *cmd;
	void *owner = NULL;

	if (c->mode == QMP_GREETED && strcmp(name, "qmp_capabilities")) {
		qmp_fail(reply, "Expecting capabilities negotiation with 'qmp_capabilities'");
		reply->error_class = QMP_ERROR_NOCMD;
		return;
	}
	for (size_t i = 0; (cmd = command_at(c, i, &owner)); i++)
		if (!strcmp(cmd->name, name))
			break;
	if (!cmd) {
		qmp_fail(reply, "The command %.64s has not been found", name);
		reply->error_class = QMP_ERROR_NOCMD;
		return;
	}
	cmd->run(owner, args, reply);
}

/* Events from now on: the reply that admitted the client is queued. */
static void enter_command_mode(struct qmp_client *c)
{
	pthread_mutex_lock(&c->q->lock);
	c->mode = QMP_COMMANDS;
	pthread_mutex_unlock(&c->q->lock);
}

/* One parsed request: checked, run, its answer queued. */
static void serve_request(struct qmp_client *c, struct json_object *req)
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
	client_send(c, out);
	if (c->mode == QMP_ADMITTED) /* only this thread changes it from there */
		enter_command_mode(c);
}

/* A client's input: the message being cut, and the parser of whole ones. */
struct qmp_input {
	struct json_tokener *tok;
	struct qmp_frame frame;
};

/*
 * A whole message (text NUL-terminated): parsed, served.  A syntax error
 * is answered as QEMU answers it ("JSON parse error, ..."; no id: it
 * could not be read), and the stream goes on after it.
 */
static void serve_message(struct qmp_client *c, struct qmp_input *in)
{
	struct qmp_frame *f = &in->frame;
	struct json_object *req;
	enum json_tokener_error e;
	char desc[160];

	json_tokener_reset(in->tok);
	/* len + 1: the NUL says the input ends there (a number at the end is whole) */
	req = json_tokener_parse_ex(in->tok, f->text, (int)f->len + 1);
	e = json_tokener_get_error(in->tok);
	if (e == json_tokener_success && json_tokener_get_parse_end(in->tok) >= f->len) {
		serve_request(c, req);
	} else {
		snprintf(desc, sizeof(desc), "JSON parse error, %s",
			 e == json_tokener_success ? "unexpected characters after a value"
						   : json_tokener_error_desc(e));
		client_send(c, error_object(QMP_ERROR_GENERIC, desc));
	}
	json_object_put(req);
}

/*
 * Feed n bytes, serving each whole message.  0 to go on; -1 to end the
 * connection after a request over QMP_MAX_REQUEST (answered first): its
 * end cannot be found without keeping it, nor anything after it trusted.
 */
static int feed(struct qmp_client *c, struct qmp_input *in, const char *buf, size_t n)
{
	while (n) {
		unsigned char stray;
		char desc[64];

		switch (qmp_frame_feed(&in->frame, &buf, &n, &stray)) {
		case QMP_FRAME_MORE:
			return 0;
		case QMP_FRAME_MESSAGE:
			serve_message(c, in);
			qmp_frame_reset(&in->frame);
			break;
		case QMP_FRAME_STRAY: /* QEMU's words for a lexical error */
			snprintf(desc, sizeof(desc), "JSON parse error, stray '\\x%02x'", stray);
			client_send(c, error_object(QMP_ERROR_GENERIC, desc));
			break;
		case QMP_FRAME_TOO_LONG:
			client_send(
			    c, error_object(QMP_ERROR_GENERIC, "QMP request over 65536 bytes"));
			return -1;
		}
	}
	return 0;
}

/* The one cut whose client has not been told why yet. */
static const char PUSHED_OUT[] = "cut: pushed out by a newer connection (too many had not "
				 "negotiated)";

/* An error line to a cut client, past its queue's limit: why it is closed. */
static void last_words(struct qmp_client *c, const char *desc)
{
	struct json_object *e = error_object(QMP_ERROR_GENERIC, desc);
	const char *text = json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN);
	struct qmp_msg *m = new_msg(text, strlen(text));

	pthread_mutex_lock(&c->qlock);
	if (m && c->tail)
		c->tail->next = m;
	else if (m)
		c->head = m;
	c->tail = m ? m : c->tail;
	c->queued += m ? m->len : 0;
	pthread_mutex_unlock(&c->qlock);
	json_object_put(e);
}

static const char *cut_reason(struct qmp_client *c)
{
	const char *why;

	pthread_mutex_lock(&c->qlock);
	why = c->cut;
	pthread_mutex_unlock(&c->qlock);
	return why;
}

static int is_negotiated(struct qmp_client *c)
{
	int n;

	pthread_mutex_lock(&c->q->lock);
	n = c->mode != QMP_GREETED;
	pthread_mutex_unlock(&c->q->lock);
	return n;
}

static void drain_wakeups(struct qmp_client *c)
{
	uint64_t n;

	if (read(c->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		fprintf(stderr, "vmm: control socket: client %u: eventfd: %s\n", c->id,
			strerror(errno));
}

/* The poll timeout: until the negotiation deadline (-1: none, negotiated). */
static int negotiate_timeout(struct qmp_client *c)
{
	uint64_t end = c->t_connect_ms + QMP_NEGOTIATE_MS, now = now_ms();

	if (is_negotiated(c))
		return -1;
	return end > now ? (int)(end - now) : 0;
}

/* Read what the client sent and serve it: NULL to go on, or why the connection ends. */
static const char *client_read(struct qmp_client *c, struct qmp_input *in, int *flush_ms)
{
	char buf[4096];
	ssize_t k = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return NULL;
	if (k <= 0) { /* the replies to what it sent before its EOF still go */
		*flush_ms = k == 0 ? QMP_FLUSH_MS : 0;
		return LEFT;
	}
	if (feed(c, in, buf, (size_t)k)) {
		*flush_ms = QMP_FLUSH_MS;
		return "closed after a request it could not use (answered)";
	}
	return NULL;
}

/*
 * One round of the client's thread: wait for its input, room in its
 * socket, a wake-up (queued events, a cut) or the negotiation deadline.
 * NULL to go on, or why the connection ends (*flush_ms: how long its
 * queue may still take to go out).
 */
static const char *client_step(struct qmp_client *c, struct qmp_input *in, int *flush_ms)
{
	struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN },
			       { .fd = c->efd, .events = POLLIN } };
	int timeout = negotiate_timeout(c);
	const char *why;

	if (queue_head(c))
		p[0].events |= POLLOUT;
	if (timeout != 0 && poll(p, 2, timeout) < 0 && errno != EINTR)
		return "cut: poll failed";
	if (p[1].revents & POLLIN)
		drain_wakeups(c);
	why = cut_reason(c);
	if (why)
		return why;
	if (timeout >= 0 && negotiate_timeout(c) == 0) {
		client_send(c,
			    error_object(QMP_ERROR_GENERIC,
					 "no qmp_capabilities within the time allowed; closing"));
		return "cut: it did not negotiate (qmp_capabilities) in time";
	}
	if ((p[0].revents & POLLOUT) && send_some(c))
		return LEFT;
	if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
		why = client_read(c, in, flush_ms);
	return why ? why : cut_reason(c);
}

static int server_stopping(struct qmp_server *q)
{
	int s;

	pthread_mutex_lock(&q->lock);
	s = q->stopping > 0;
	pthread_mutex_unlock(&q->lock);
	return s;
}

/*
 * What is queued goes out for at most ms (0: what the socket takes now;
 * a cut or the server's end stops a longer wait).
 */
static void flush_queue(struct qmp_client *c, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (!send_some(c) && queue_head(c)) {
		struct pollfd p[2] = { { .fd = c->fd, .events = POLLOUT },
				       { .fd = c->efd, .events = POLLIN } };
		uint64_t now = now_ms();

		if (now >= end || server_stopping(c->q) || (ms && cut_reason(c)))
			return;
		if (poll(p, 2, (int)(end - now)) < 0 && errno != EINTR)
			return;
		if (p[1].revents & POLLIN)
			drain_wakeups(c);
	}
}

/*
 * Input left unread when a unix socket is closed makes the peer's next read
 * fail with ECONNRESET, losing the answer it has not read yet (say, why an
 * over-long request was refused): drop what has arrived first.
 */
static void discard_input(struct qmp_client *c)
{
	char buf[4096];

	for (int i = 0; i < 256 && recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
		;
}

/*
 * The connection ends, at once: its last replies out (within flush_ms),
 * the reason logged, then done (under q->lock: nobody wakes it after that)
 * and its descriptors closed.  Its slot is reaped at the next connection.
 */
static void client_end(struct qmp_client *c, const char *why, int flush_ms)
{
	flush_queue(c, flush_ms);
	discard_input(c);
	if (why != LEFT && why != STOPPING)
		fprintf(stderr, "vmm: control socket: client %u %s\n", c->id, why);
	pthread_mutex_lock(&c->q->lock);
	c->done = 1;
	pthread_mutex_unlock(&c->q->lock);
	close(c->fd);
	close(c->efd);
}

static void *client_thread(void *arg)
{
	struct qmp_client *c = arg;
	struct qmp_input *in = malloc(sizeof(*in));
	const char *why = NULL;
	int flush_ms = 0;

	if (!in || !(in->tok = json_tokener_new()))
		why = "cut: out of memory";
	else
		qmp_frame_reset(&in->frame);
#ifdef JSON_TOKENER_VALIDATE_UTF8
	if (!why) /* the QMP spec: input is UTF-8 */
		json_tokener_set_flags(in->tok, JSON_TOKENER_VALIDATE_UTF8);
#endif
	greet(c);
	while (!why)
		why = client_step(c, in, &flush_ms);
	/* Here, not in client_step(): the cut may come after its first look */
	if (why == PUSHED_OUT)
		last_words(c, "closing: too many connections had not negotiated; this was the "
			      "oldest");
	if (in && in->tok)
		json_tokener_free(in->tok);
	free(in);
	client_end(c, why, flush_ms);
	return NULL;
}

/* After its thread was joined. */
static void free_client(struct qmp_client *c)
{
	struct qmp_msg *m = c->head;

	while (m) {
		struct qmp_msg *next = m->next;
		free(m);
		m = next;
	}
	pthread_mutex_destroy(&c->qlock);
	free(c);
}

/* Join and free the client of slot i, taken out of the table; q->lock not held. */
static void remove_client(struct qmp_server *q, int i)
{
	struct qmp_client *c;

	pthread_mutex_lock(&q->lock);
	c = q->clients[i];
	q->clients[i] = NULL;
	pthread_mutex_unlock(&q->lock);
	if (c) {
		pthread_join(c->thread, NULL);
		free_client(c);
	}
}

/*
 * A place for a new connection: ended clients reaped, and when
 * QMP_MAX_PENDING connections wait for negotiation, the oldest of them cut
 * (it ends without blocking: pending clients run no command).  The slot,
 * or -1.
 */
static int free_slot(struct qmp_server *q)
{
	int slot = -1, oldest = -1, pending = 0;

	for (int i = 0; i < QMP_SLOTS; i++) {
		pthread_mutex_lock(&q->lock);
		int ended = q->clients[i] && q->clients[i]->done;
		pthread_mutex_unlock(&q->lock);
		if (ended)
			remove_client(q, i);
	}
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_SLOTS; i++) {
		struct qmp_client *c = q->clients[i];
		if (!c) {
			slot = slot < 0 ? i : slot;
		} else if (c->mode == QMP_GREETED) {
			pending++;
			if (oldest < 0 || c->id < q->clients[oldest]->id)
				oldest = i;
		}
	}
	if (pending >= QMP_MAX_PENDING)
		cut_client(q->clients[oldest], PUSHED_OUT);
	else
		oldest = -1;
	pthread_mutex_unlock(&q->lock);
	if (oldest >= 0) {
		remove_client(q, oldest);
		slot = slot < 0 ? oldest : slot;
	}
	return slot;
}

/* A refusal to a connection that gets no client thread; never blocks. */
static void refuse(int fd, const char *desc)
{
	struct json_object *e = error_object(QMP_ERROR_GENERIC, desc);
	const char *text = json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN);
	struct msghdr mh = { .msg_iov =
				 (struct iovec[]){ { (void *)text, strlen(text) }, { "\r\n", 2 } },
			     .msg_iovlen = 2 };

	if (sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		fprintf(stderr, "vmm: control socket: cannot send a refusal: %s\n",
			strerror(errno));
	json_object_put(e);
}

/* Only the server's own uid, or root: 1; else 0 after telling the client why. */
static int peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char desc[160];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return 0;
	if (cred.uid == geteuid() || cred.uid == 0)
		return 1;
	snprintf(desc, sizeof(desc), "refused: uid %u does not own this VMM (uid %u)",
		 (unsigned)cred.uid, (unsigned)geteuid());
	refuse(fd, desc);
	fprintf(stderr, "vmm: control socket: %s\n", desc);
	return 0;
}

/* A new client in slot: 0, or -1 (no memory, no eventfd, no thread). */
static int add_client(struct qmp_server *q, int fd, int slot)
{
	struct qmp_client *c = calloc(1, sizeof(*c));
	int r = -1;

	if (!c)
		return -1;
	*c = (struct qmp_client){ .q = q, .fd = fd, .t_connect_ms = now_ms() };
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		free(c);
		return -1;
	}
	pthread_mutex_init(&c->qlock, NULL);
	pthread_mutex_lock(&q->lock);
	c->id = ++q->next_id;
	if (pthread_create(&c->thread, NULL, client_thread, c) == 0) {
		q->clients[slot] = c;
		r = 0;
	}
	pthread_mutex_unlock(&q->lock);
	if (r) {
		close(c->efd);
		free_client(c);
	}
	return r;
}

static void *accept_thread(void *arg)
{
	struct qmp_server *q = arg;

	for (;;) {
		int fd = accept4(q->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot;
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		if (!peer_allowed(fd)) {
			close(fd);
			continue;
		}
		slot = free_slot(q);
		if (slot < 0 || add_client(q, fd, slot)) {
			refuse(fd, "too many QMP clients");
			close(fd);
		}
	}
	return NULL;
}

void qmp_event(struct qmp_server *q, const char *name, struct json_object *data)
{
	struct json_object *ev = json_object_new_object(), *ts = json_object_new_object();
	struct timeval tv;
	const char *text;
	size_t len;

	gettimeofday(&tv, NULL);
	json_object_object_add(ev, "event", json_object_new_string(name));
	if (data)
		json_object_object_add(ev, "data", data);
	json_object_object_add(ts, "seconds", json_object_new_int64(tv.tv_sec));
	json_object_object_add(ts, "microseconds", json_object_new_int64(tv.tv_usec));
	json_object_object_add(ev, "timestamp", ts);
	text = json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN);
	len = strlen(text);
	pthread_mutex_lock(&q->lock);
	for (int i = 0; i < QMP_SLOTS; i++) {
		struct qmp_client *c = q->clients[i];

		if (!c || c->done || c->mode != QMP_COMMANDS)
			continue;
		enqueue(c, new_msg(text, len));
		wake(c);
	}
	pthread_mutex_unlock(&q->lock);
	json_object_put(ev);
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

struct qmp_server *qmp_listen(const char *path, const struct qmp_commands *sets, size_t n,
			      char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct qmp_server *q;

	if (n > QMP_MAX_OWNERS) {
		snprintf(err, errlen, "%zu command tables: at most %d", n, QMP_MAX_OWNERS);
		return NULL;
	}
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
	memcpy(q->sets, sets, n * sizeof(*sets));
	q->nsets = n;
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
	q->stopping = 1; /* a last flush stops too */
	for (int i = 0; i < QMP_SLOTS; i++)
		if (q->clients[i] && !q->clients[i]->done)
			cut_client(q->clients[i], STOPPING);
	pthread_mutex_unlock(&q->lock);
	for (int i = 0; i < QMP_SLOTS; i++)
		remove_client(q, i);
	if (q->dev && !lstat(q->path, &st) && st.st_dev == q->dev && st.st_ino == q->ino)
		unlink(q->path);
	pthread_mutex_destroy(&q->lock);
	free(q->path);
	free(q);
}
