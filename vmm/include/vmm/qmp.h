/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A QMP server on a unix socket: QEMU's wire format (docs/migration.md,
 * "The control API"), so that any QMP client can drive the VMM.
 *
 *   server: {"QMP": {"version": (query-version's), "capabilities": []}}
 *   client: {"execute": "qmp_capabilities"}              -> {"return": {}}
 *   client: {"execute": CMD, "arguments": {...}, "id": X} -> {"return": ..., "id": X}
 *                                                         or {"error": {"class", "desc"}, "id": X}
 *   server, any time after negotiation: {"event": NAME, "data": {...},
 *                                        "timestamp": {"seconds", "microseconds"}}
 *
 * As QEMU:
 * - input that does not parse is answered ("JSON parse error, ...", no
 *   id) and the next message read (vmm/include/vmm/qmp-frame.h: how
 *   messages are cut, and the reset bytes);
 * - no event before the reply to qmp_capabilities, and a second
 *   qmp_capabilities is CommandNotFound;
 * - the server's own commands: qmp_capabilities, query-commands (every
 *   command dispatched) and query-version (the VERSION file's numbers,
 *   the build's git describe as "package"), whose object the greeting
 *   carries.
 *
 * Several clients at once (QMP_MAX_CLIENTS that negotiated, and
 * QMP_MAX_PENDING connections that have not yet), each on its own thread;
 * a client that goes away changes nothing.  Only the server's uid or root
 * may connect (SO_PEERCRED); the socket is created 0600 without a window.
 * A connection that has not negotiated within QMP_NEGOTIATE_MS is closed,
 * and the oldest such makes room for a newer one, so idle connections
 * never lock the owner out.  Replies and events go through each client's
 * own bounded queue: a client that does not read delays nobody, and is cut
 * (the reason logged) when its queue is full.  A connection the server
 * ends (a request over QMP_MAX_REQUEST: answered first) is closed at
 * once.  Handlers run on the client's thread and must not block for long.
 */
#ifndef VMM_QMP_H
#define VMM_QMP_H

#include <json-c/json.h>
#include <stddef.h>

#include "vmm/qmp-frame.h"

#define QMP_MAX_CLIENTS	  16		/* negotiated clients */
#define QMP_MAX_PENDING	  4		/* connections not negotiated yet */
#define QMP_NEGOTIATE_MS  10000		/* from connect to qmp_capabilities, at most */
#define QMP_MAX_REQUEST	  QMP_FRAME_MAX /* bytes of one JSON request */
#define QMP_ERROR_GENERIC "GenericError"
#define QMP_ERROR_NOCMD	  "CommandNotFound"

struct qmp_server;

/* A command's outcome: *ret (NULL: {}) or an error. */
struct qmp_reply {
	struct json_object *ret;
	const char *error_class; /* set: an error; QMP_ERROR_GENERIC unless said otherwise */
	char desc[400];
};

/* args: the "arguments" object, or NULL. */
typedef void (*qmp_handler)(void *ctx, struct json_object *args, struct qmp_reply *reply);

struct qmp_command {
	const char *name;
	qmp_handler run;
};

/* A table of commands (ended by a {NULL}) and the ctx its handlers get: one owner's. */
struct qmp_commands {
	const struct qmp_command *cmds;
	void *ctx;
};
#define QMP_MAX_OWNERS 4

/*
 * Listen at path, serving the n tables of sets (at most QMP_MAX_OWNERS:
 * the VM's commands, a migration's, ...; a name is looked up in that
 * order).  A stale socket at path is replaced; a live one or any other
 * file is an error.  NULL with a message in err.
 */
struct qmp_server *qmp_listen(const char *path, const struct qmp_commands *sets, size_t n,
			      char *err, size_t errlen);

/* Send an event to every negotiated client; takes data (may be NULL). */
void qmp_event(struct qmp_server *q, const char *name, struct json_object *data);

/* Stop serving: clients are cut, threads joined, the socket removed if still ours. */
void qmp_close(struct qmp_server *q);

/* An error reply: desc formatted, class QMP_ERROR_GENERIC. */
void qmp_fail(struct qmp_reply *reply, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* VMM_QMP_H */
