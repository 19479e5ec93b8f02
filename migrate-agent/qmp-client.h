/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The client end of QMP, as migrate-agent speaks it to a VMM's control
 * socket (vmm/include/vmm/qmp.h is the server).  Replies are matched by
 * order: one command in flight at a time; events may come in between.
 */
#ifndef MIGRATE_QMP_CLIENT_H
#define MIGRATE_QMP_CLIENT_H

#include <json-c/json.h>
#include <stddef.h>

struct qmpc {
	int fd;
	struct json_tokener *tok;
	char buf[8192];
	size_t len, off;
};

/*
 * Connect to path, make sure our own uid or root serves it, read the
 * greeting and negotiate.  0, or -1 with a message in err.
 */
int qmpc_connect(struct qmpc *c, const char *path, int timeout_ms, char *err, size_t errlen);

/*
 * The next message within timeout_ms into *msg (the caller puts it): 1;
 * 0 on timeout; -1 when the server closed or sent something unreadable.
 */
int qmpc_next(struct qmpc *c, int timeout_ms, struct json_object **msg);

/*
 * Run cmd with args (consumed; NULL for none) and wait for its reply,
 * handing any event on the way to on_event (may be NULL).  0 with *ret
 * (the "return" member, the caller puts it; ret may be NULL), or -1 with
 * the server's error description, or why there was none, in err.
 */
int qmpc_execute(struct qmpc *c, const char *cmd, struct json_object *args, int timeout_ms,
		 void (*on_event)(void *arg, struct json_object *ev), void *arg,
		 struct json_object **ret, char *err, size_t errlen);

void qmpc_close(struct qmpc *c);

#endif /* MIGRATE_QMP_CLIENT_H */
