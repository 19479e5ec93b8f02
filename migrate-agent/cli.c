// SPDX-License-Identifier: GPL-2.0
/*
 * migrate-agent: the command that starts a migration of a running VMM.
 * Migration itself runs inside the VMM process (it must read guest RAM at
 * the source and own it at the destination, as in QEMU); this attaches to
 * the source VMM's control socket and tells it where to go.
 *
 *   migrate-agent migrate --vmm SOCKET --to tcp:HOST:PORT
 *                 [--precopy-rounds N] [--compress] [--metrics FILE]
 *                 [--recover-ms MS]
 *
 * The destination is a `vmm run --incoming tcp:HOST:PORT ...` already
 * listening.  Prints the JSON summary on stdout (or writes it to --metrics)
 * and exits 0 once the destination has every page; 1 with the VMM's error
 * message otherwise; 2 for bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr, "usage: migrate-agent migrate --vmm SOCKET --to tcp:HOST:PORT\n"
			"                     [--precopy-rounds N] [--compress] [--metrics FILE]\n"
			"                     [--recover-ms MS]\n");
}

static int cmd_migrate(int argc, char **argv)
{
	const char *vmm = NULL, *to = NULL, *metrics = NULL;
	int precopy = 0, compress = 0, recover = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--compress")) {
			compress = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "migrate-agent: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--vmm"))
			vmm = v;
		else if (!strcmp(a, "--to"))
			to = v;
		else if (!strcmp(a, "--metrics"))
			metrics = v;
		else if (!strcmp(a, "--precopy-rounds"))
			precopy = atoi(v);
		else if (!strcmp(a, "--recover-ms"))
			recover = atoi(v);
		else {
			fprintf(stderr, "migrate-agent: unknown option %s\n", a);
			usage();
			return 2;
		}
	}
	if (!vmm || !to || strchr(to, ' ') || (metrics && strchr(metrics, ' '))) {
		usage();
		return 2;
	}
	char tmp[] = "/tmp/migrate-agent.XXXXXX";
	if (!metrics) {
		int fd = mkstemp(tmp);
		if (fd < 0) {
			perror("migrate-agent: mkstemp");
			return 1;
		}
		close(fd);
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(vmm) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "migrate-agent: socket path too long\n");
		return 2;
	}
	strcpy(sa.sun_path, vmm);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "migrate-agent: cannot attach to the VMM at %s: %s\n", vmm,
			strerror(errno));
		if (!metrics)
			unlink(tmp);
		return 1;
	}
	char req[1400];
	int n = snprintf(req, sizeof(req), "migrate to=%s precopy=%d compress=%d metrics=%s", to,
			 precopy, compress, metrics ? metrics : tmp);
	if (recover)
		n += snprintf(req + n, sizeof(req) - n, " recover-ms=%d", recover);
	n += snprintf(req + n, sizeof(req) - n, "\n");
	if (write(fd, req, (size_t)n) != n) {
		fprintf(stderr, "migrate-agent: cannot talk to the VMM: %s\n", strerror(errno));
		return 1;
	}
	char reply[1024];
	size_t got = 0;
	for (;;) {
		ssize_t k = read(fd, reply + got, sizeof(reply) - 1 - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	reply[got] = 0;
	reply[strcspn(reply, "\n")] = 0;
	close(fd);
	int ok = !strcmp(reply, "ok");
	if (ok && !metrics) {
		FILE *f = fopen(tmp, "r");
		char buf[4096];
		size_t k;
		while (f && (k = fread(buf, 1, sizeof(buf), f)) > 0)
			fwrite(buf, 1, k, stdout);
		if (f)
			fclose(f);
	}
	if (!metrics)
		unlink(tmp);
	if (ok) {
		fprintf(stderr, "migrate-agent: migration to %s complete\n", to);
		return 0;
	}
	fprintf(stderr, "migrate-agent: migration failed: %s\n",
		got ? (strncmp(reply, "error ", 6) ? reply : reply + 6)
		    : "the VMM closed the control connection without an answer");
	return 1;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "migrate"))
		return cmd_migrate(argc - 1, argv + 1);
	if (argc >= 2 && (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help"))) {
		usage();
		return 0;
	}
	usage();
	return 2;
}
