// SPDX-License-Identifier: GPL-2.0
/*
 * vmm-qmp-test: the VMM's QMP server (vmm/qmp.c) alone, without a VM, so
 * that its connection handling is tested where there is no KVM
 * (tests/host/vmm-qmp-server.sh).
 *
 *   vmm-qmp-test SOCKET
 *
 * Serves one command, x-echo (returns its arguments).  Reads lines on
 * stdin: "events N SIZE" sends N events X-TEST, numbered from 0 in
 * data.i, each with SIZE bytes of padding, then prints "emitted N" on
 * stdout; EOF closes the server and exits 0.  The server's log goes to
 * stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/qmp.h"

static void echo(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)ctx;
	reply->ret = args ? json_object_get(args) : NULL;
}

static const struct qmp_command cmds[] = {
	{ "x-echo", echo },
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

int main(int argc, char **argv)
{
	char err[400] = "", line[128];
	struct qmp_server *q;

	if (argc != 2) {
		fprintf(stderr, "usage: vmm-qmp-test SOCKET\n");
		return 2;
	}
	q = qmp_listen(argv[1], cmds, NULL, err, sizeof(err));
	if (!q) {
		fprintf(stderr, "vmm-qmp-test: %s\n", err);
		return 1;
	}
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long n, size;
		if (sscanf(line, "events %lu %lu", &n, &size) == 2)
			emit(q, n, size);
		else
			fprintf(stderr, "vmm-qmp-test: not understood: %s", line);
	}
	qmp_close(q);
	return 0;
}
