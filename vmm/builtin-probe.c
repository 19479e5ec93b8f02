// SPDX-License-Identifier: GPL-2.0
/*
 * vmm probe: what this machine offers.  One line per item,
 * "NAME yes|no [reason]"; exit 0.  `vmm probe BACKEND` exits 0 if that
 * RAM back end works here, 77 if not (for test scripts).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ram/backend.h"
#include "ram/ram.h"
#include "vmm/builtin.h"

int cmd_probe(int argc, char **argv)
{
	static const char *const names[] = { "uffd", "uffd-move", "userfault" };
	const struct ram_backend_ops *ops;
	int fd, r;

	if (builtin_wants_help(argc, argv)) {
		printf("usage: vmm probe [BACKEND]\n");
		return 0;
	}
	if (argc > 2) {
		fprintf(stderr, "usage: vmm probe [BACKEND]\n");
		return VMM_EXIT_USAGE;
	}
	if (argc == 2) {
		r = ram_backend_find(argv[1], &ops);
		if (r == -EINVAL) {
			fprintf(stderr, "vmm: unknown RAM back end '%s'\n", argv[1]);
			return VMM_EXIT_USAGE;
		}
		printf("%s %s%s%s\n", argv[1], r ? "no" : "yes", r ? " " : "",
		       r ? strerror(-r) : "");
		return r ? 77 : 0;
	}
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	printf("kvm %s%s%s\n", fd < 0 ? "no" : "yes", fd < 0 ? " " : "",
	       fd < 0 ? strerror(errno) : "");
	if (fd >= 0)
		close(fd);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		r = ram_backend_find(names[i], &ops);
		printf("%s %s%s%s\n", names[i], r ? "no" : "yes", r ? " " : "",
		       r ? strerror(-r) : "");
	}
	r = ram_backend_find("auto", &ops);
	printf("auto %s\n", r ? "none" : ops->name);
	return 0;
}
