// SPDX-License-Identifier: GPL-2.0
/*
 * vmm-qmp-test: the VMM's QMP server (vmm/qmp.c) alone, without a VM, so
 * that its connection handling is tested where there is no KVM
 * (tests/host/vmm-qmp-server.sh).
 *
 *   vmm-qmp-test SOCKET
 *
 * Serves two tables, as the VMM serves the VM's commands and the
 * migration's: x-echo (returns its arguments) and x-owner (returns the
 * name of its table's owner, "second": each table's handlers get their
 * own ctx) in the second, and x-quit, which ends the server
 * as the VMM's quit does: another thread closes it (qmp_close(), as the
 * VMM's main thread does once the VM stopped) while the command is still
 * being answered, which waits 500 ms after the close began so that its
 * reply comes after the server cut its clients.  Reads lines on
 * stdin: "events N SIZE" sends N events X-TEST, numbered from 0 in
 * data.i, each with SIZE bytes of padding, then prints "emitted N" on
 * stdout; "storm start" starts a thread that sends events X-STORM back to
 * back until "storm stop", which prints "storm N" (how many it sent); EOF
 * closes the server (unless x-quit did) and exits 0.  The server's log
 * goes to stderr.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmm/qmp.h"

static void echo(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)ctx;
	reply->ret = args ? json_object_get(args) : NULL;
}

/* x-quit's state: the server, and the thread that closes it. */
struct closer {
	struct qmp_server *q;
	pthread_t thread;
	int started, closing;
};

static void *close_server(void *arg)
{
	struct closer *cl = arg;

	__atomic_store_n(&cl->closing, 1, __ATOMIC_RELEASE);
	qmp_close(cl->q);
	return NULL;
}

static void quit(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct closer *cl = ctx;

	(void)args;
	if (cl->started) {
		qmp_fail(reply, "already quitting");
		return;
	}
	if (pthread_create(&cl->thread, NULL, close_server, cl)) {
		qmp_fail(reply, "cannot start the closing thread");
		return;
	}
	cl->started = 1;
	while (!__atomic_load_n(&cl->closing, __ATOMIC_ACQUIRE))
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	nanosleep(&(struct timespec){ .tv_nsec = 500000000 }, NULL);
}

/* ctx: the owner's name, a string. */
static void owner(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)args;
	reply->ret = json_object_new_object();
	json_object_object_add(reply->ret, "owner", json_object_new_string(ctx));
}

static const struct qmp_command cmds[] = {
	{ "x-quit", quit },
	{ NULL, NULL },
};

static const struct qmp_command second_cmds[] = {
	{ "x-echo", echo },
	{ "x-owner", owner },
	{ NULL, NULL },
};

static void emit(struct qmp_server *q, unsigned long n, unsigned long size)
{
	char *pad = malloc(size + 1);

	if (!pad) {
		fprintf(stderr, "vmm-qmp-test: out of memory\n");
		exit(1);
	}
	memset(pad, 'x', size);
	pad[size] = 0;
	for (unsigned long i = 0; i < n; i++) {
		struct json_object *d = json_object_new_object();
		json_object_object_add(d, "i", json_object_new_uint64(i));
		json_object_object_add(d, "pad", json_object_new_string(pad));
		qmp_event(q, "X-TEST", d);
	}
	free(pad);
	printf("emitted %lu\n", n);
	fflush(stdout);
}

struct storm {
	struct qmp_server *q;
	pthread_t thread;
	int on, stop; /* stop: written by main, read by the thread */
	unsigned long sent;
};

/* Events as fast as the server takes them: to race whatever else it does. */
static void *storm_thread(void *arg)
{
	struct storm *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		struct json_object *d = json_object_new_object();
		json_object_object_add(d, "i", json_object_new_uint64(s->sent++));
		qmp_event(s->q, "X-STORM", d);
	}
	return NULL;
}

static void storm(struct storm *s, int start)
{
	if (start && !s->on) {
		s->stop = 0;
		s->sent = 0;
		if (pthread_create(&s->thread, NULL, storm_thread, s)) {
			fprintf(stderr, "vmm-qmp-test: cannot start the storm thread\n");
			exit(1);
		}
		s->on = 1;
	} else if (!start && s->on) {
		__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
		pthread_join(s->thread, NULL);
		s->on = 0;
		printf("storm %lu\n", s->sent);
		fflush(stdout);
	}
}

int main(int argc, char **argv)
{
	char err[400] = "", line[128];
	struct qmp_server *q;
	struct storm st = { 0 };
	struct closer cl = { 0 };

	if (argc != 2) {
		fprintf(stderr, "usage: vmm-qmp-test SOCKET\n");
		return 2;
	}
	const struct qmp_commands sets[] = { { cmds, &cl }, { second_cmds, "second" } };
	q = qmp_listen(argv[1], sets, 2, err, sizeof(err));
	if (!q) {
		fprintf(stderr, "vmm-qmp-test: %s\n", err);
		return 1;
	}
	st.q = q;
	cl.q = q; /* before any client: x-quit comes after a connection's greeting */
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long n, size;
		if (sscanf(line, "events %lu %lu", &n, &size) == 2)
			emit(q, n, size);
		else if (!strcmp(line, "storm start\n"))
			storm(&st, 1);
		else if (!strcmp(line, "storm stop\n"))
			storm(&st, 0);
		else
			fprintf(stderr, "vmm-qmp-test: not understood: %s", line);
	}
	storm(&st, 0);
	if (cl.started)
		pthread_join(cl.thread, NULL);
	else
		qmp_close(q);
	return 0;
}
