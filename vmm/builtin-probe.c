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
#include "vmm/memfault.h"

/*
 * Back end NAME works here: the kernel's memory calls (ram_backend_find())
 * and, for kvm-exit, KVM's exit.  0, or -errno with the reason in *why.
 */
static int probe_backend(const char *name, const char **why)
{
	const struct ram_backend_ops *ops;
	int fd, r = ram_backend_find(name, &ops);

	*why = r ? strerror(-r) : "";
	if (r && ram_backend_named(name) && ram_backend_named(name)->needs)
		*why = ram_backend_named(name)->needs; /* the reason is what it lacks */
	if (r || !ops->own_thread_faults)
		return r;
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*why = "cannot open /dev/kvm";
		return -errno;
	}
	r = memfault_check_kvm(fd, ops, why);
	close(fd);
	return r;
}

int cmd_probe(int argc, char **argv)
{
	static const char *const names[] = { "uffd", "uffd-move", "userfault", "kvm-exit" };
	const struct ram_backend_ops *ops;
	const char *why;
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
		r = probe_backend(argv[1], &why);
		if (r == -EINVAL) {
			fprintf(stderr, "vmm: unknown RAM back end '%s'\n", argv[1]);
			return VMM_EXIT_USAGE;
		}
		printf("%s %s%s%s\n", argv[1], r ? "no" : "yes", r ? " " : "", why);
		return r ? 77 : 0;
	}
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	printf("kvm %s%s%s\n", fd < 0 ? "no" : "yes", fd < 0 ? " " : "",
	       fd < 0 ? strerror(errno) : "");
	if (fd >= 0)
		close(fd);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		r = probe_backend(names[i], &why);
		printf("%s %s%s%s\n", names[i], r ? "no" : "yes", r ? " " : "", why);
	}
	r = ram_backend_find("auto", &ops);
	printf("auto %s\n", r ? "none" : ops->name);
	return 0;
}
