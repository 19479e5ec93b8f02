// SPDX-License-Identifier: GPL-2.0
/*
 * vmm restore FILE: continue a VM saved by `--save-after MS FILE`.  With
 * --lazy, guest RAM is not read up front: the fault thread serves each
 * page from FILE when the guest first touches it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/builtin.h"
#include "vmm/runner.h"
#include "vmm/snapshot.h"
#include "vmm/util.h"
#include "vmm/vm.h"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: vmm restore FILE [--lazy [--ram-backend "
	       "uffd|uffd-move|userfault|kvm-exit|auto]\n"
	       "                        [--busy-poll]] [--save-after MS FILE] [--trace-reports]\n");
}

static int load_ram(struct vm *vm, int fd, const struct snapshot_header *h)
{
	return pread_full(fd, ram_host(vm_ram(vm)), h->ram_size, h->ram_offset);
}

int cmd_restore(int argc, char **argv)
{
	struct run_opts o = { .backend = "auto" };

	if (builtin_wants_help(argc, argv)) {
		usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		int r = runner_parse_common(argc, argv, &i, &o);

		if (r < 0 || (r == 0 && (argv[i][0] == '-' || o.restore_path))) {
			if (r == 0)
				pr_err("unknown argument '%s'", argv[i]);
			usage(stderr);
			return VMM_EXIT_USAGE;
		}
		if (r == 0)
			o.restore_path = argv[i];
	}
	if (!o.restore_path) {
		usage(stderr);
		return VMM_EXIT_USAGE;
	}
	return runner_restore(&o);
}

int runner_restore(struct run_opts *opts)
{
	struct run_opts o = *opts;
	struct snapshot_header h;
	struct ram_source *src = NULL;
	struct vm *vm = NULL;
	void *blob = NULL;
	char why[256] = "";
	int fd, r, status = VMM_EXIT_ERROR;

	/* One open: the file checked is the file whose RAM is read or served. */
	fd = open(o.restore_path, O_RDONLY | O_CLOEXEC);
	r = fd < 0 ? -errno : snapshot_read(fd, &h, &blob);
	if (r < 0) {
		pr_err("%s: %s", o.restore_path,
		       r == -EBADMSG ? "not a valid snapshot (bad header, size or checksum)"
				     : strerror(-r));
		if (fd >= 0)
			close(fd);
		return VMM_EXIT_ERROR;
	}
	vm_state_peek(blob, h.state_size, &o.mem_size, &o.nr_vcpus);
	if (runner_create_vm(&o, &vm) < 0)
		goto out;
	r = vm_state_load(vm, blob, h.state_size, why, sizeof(why));
	if (r < 0) {
		pr_err("%s: cannot load the VM state: %s", o.restore_path, why);
		goto out;
	}
	if (o.lazy) {
		r = ram_source_file_create(fd, h.ram_offset, h.ram_size, &src);
		if (!r)
			r = ram_start_faults(vm_ram(vm), src, o.busy_poll);
		if (r < 0) {
			/* Taken by the RAM, it is destroyed with it (vm_destroy()). */
			if (src && src->destroy && !ram_owns_source(vm_ram(vm), src))
				src->destroy(src);
			pr_err("cannot start the fault thread: %s", strerror(-r));
			goto out;
		}
	} else {
		r = load_ram(vm, fd, &h);
		if (r < 0) {
			pr_err("%s: cannot read guest RAM: %s", o.restore_path, strerror(-r));
			goto out;
		}
	}
	r = vm_start(vm);
	if (r < 0) {
		pr_err("cannot start the vCPUs: %s", strerror(-r));
		goto out;
	}
	status = runner_loop(vm, &o, NULL);
out:
	vm_destroy(vm);
	close(fd);
	free(blob);
	return status;
}
