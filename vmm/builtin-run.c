// SPDX-License-Identifier: GPL-2.0
/*
 * vmm run: boot the guest image in a fresh VM.
 *   init: options, back end, VM, image (into RAM, or into a staging buffer
 *         that serves lazy RAM) -> work: vCPUs until the guest exits ->
 *   exit: the guest's status.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "vmm/builtin.h"
#include "vmm/migrate.h"
#include "vmm/runner.h"
#include "vmm/util.h"
#include "vmm/vm.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: vmm run --image FILE [--mem SIZE] [--vcpus N] [--cmdline STR]\n"
		   "       vmm run --lazy-from SNAPSHOT   (= vmm restore SNAPSHOT --lazy)\n"
		   "               [--lazy [--ram-backend uffd|uffd-move|userfault|kvm-exit|auto]\n"
		   "                       [--busy-poll]]\n"
		   "               [--save-after MS FILE] [--trace-reports]\n");
	migrate_usage(f);
}

/* Migration options and hooks: vmm/include/vmm/migrate.h. */
static struct migrate_vmm_opts mig;

/* One of run's own options at argv[*i] (which has a value after it): 0, or -1 with the error said. */
static int parse_run_opt(char **argv, int *i, struct run_opts *o)
{
	const char *a = argv[*i];
	uint64_t n;

	if (!strcmp(a, "--image")) {
		o->image = argv[++*i];
	} else if (!strcmp(a, "--lazy-from")) {
		o->restore_path = argv[++*i];
	} else if (!strcmp(a, "--cmdline")) {
		o->cmdline = argv[++*i];
	} else if (!strcmp(a, "--mem")) {
		if (parse_size(argv[++*i], &o->mem_size) < 0 || o->mem_size % PAGE_SIZE ||
		    o->mem_size < (2 << 20) || o->mem_size > GUEST_MAX_MEM) {
			pr_err("--mem: '%s' is not a page-aligned size from 2M to %lluG", argv[*i],
			       (unsigned long long)(GUEST_MAX_MEM >> 30));
			return -1;
		}
	} else if (!strcmp(a, "--vcpus")) {
		if (parse_u64(argv[++*i], 1, GUEST_MAX_CPUS, &n) < 0) {
			pr_err("--vcpus: '%s' is not a number from 1 to %d", argv[*i],
			       GUEST_MAX_CPUS);
			return -1;
		}
		o->nr_vcpus = (unsigned int)n;
	} else {
		pr_err("unknown argument '%s'", a);
		return -1;
	}
	return 0;
}

/* The options that go together, once all are parsed: 0, or -1 with the error said. */
static int check_run_opts(struct run_opts *o)
{
	if (o->restore_path) {
		/* --lazy-from SNAPSHOT: the snapshot's guest, RAM faulted in from it. */
		if (o->image || migrate_is_incoming(&mig) || mig.control || mig.migrate_to) {
			pr_err("--lazy-from takes the guest from the snapshot: no --image, no "
			       "migration");
			return -1;
		}
		o->lazy = true;
		return 0;
	}
	if (migrate_is_incoming(&mig))
		o->lazy = true; /* RAM arrives from the source, page by page */
	else if (!o->image) {
		pr_err("--image is required");
		return -1;
	}
	return migrate_check_opts(&mig) ? -1 : 0;
}

/*
 * 0: options parsed; 1: --help or -h in an option's place (not an option's
 * value: `--cmdline -h` is the guest's), as getopt would see it; -1: error.
 */
static int parse(int argc, char **argv, struct run_opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int r;

		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return 1;
		r = runner_parse_common(argc, argv, &i, o);
		if (r < 0)
			return -1;
		if (r > 0)
			continue;
		r = migrate_parse_opt(argc, argv, &i, &mig);
		if (r < 0)
			return -1;
		if (r > 0)
			continue;
		if (i + 1 >= argc || strncmp(a, "--", 2)) {
			pr_err("unknown or incomplete argument '%s'", a);
			return -1;
		}
		if (parse_run_opt(argv, &i, o) < 0)
			return -1;
	}
	return check_run_opts(o);
}

/*
 * The image into the VM: straight into RAM, or with lazy RAM into a
 * staging buffer (*staging, the caller unmaps it) that serves the faults.
 * 0, or -1 with the error said.
 */
static int load_image(struct vm *vm, const struct run_opts *o, void **staging)
{
	struct ram_source *src = NULL;
	const char *why;
	int r;

	if (o->lazy) {
		*staging = mmap(NULL, o->mem_size, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (*staging == MAP_FAILED) {
			*staging = NULL;
			pr_err("cannot reserve the staging buffer: %s", strerror(ENOMEM));
			return -1;
		}
	}
	r = vm_boot_image(vm, o->image, o->cmdline, *staging, &why);
	if (r < 0) {
		pr_err("%s: %s: %s", o->image, why, strerror(-r));
		return -1;
	}
	if (!o->lazy)
		return 0;
	r = ram_source_buffer_create(*staging, o->mem_size, &src);
	if (!r)
		r = ram_start_faults(vm_ram(vm), src, o->busy_poll);
	if (r < 0) {
		/* Taken by the RAM, it is destroyed with it (vm_destroy()). */
		if (src && src->destroy && !ram_owns_source(vm_ram(vm), src))
			src->destroy(src);
		pr_err("cannot start the fault thread: %s", strerror(-r));
		return -1;
	}
	return 0;
}

/* The vCPUs and the migration, until the guest exits: its status. */
static int run_vm(struct vm *vm, const struct run_opts *o)
{
	int status, r = vm_start(vm);

	if (r < 0) {
		pr_err("cannot start the vCPUs: %s", strerror(-r));
		return VMM_EXIT_ERROR;
	}
	if (migrate_started(vm, &mig) < 0)
		vm_stop(vm, -EINVAL);
	status = runner_loop(vm, o, migrate_vm_control(&mig));
	if (migrate_finish(vm, &mig))
		status = VMM_EXIT_ERROR;
	return status;
}

int cmd_run(int argc, char **argv)
{
	struct run_opts o = {
		.mem_size = 32 << 20, .nr_vcpus = 1, .cmdline = "", .backend = "auto"
	};
	struct vm *vm = NULL;
	void *staging = NULL;
	int r, status = VMM_EXIT_ERROR;

	r = parse(argc, argv, &o);
	if (r > 0) {
		usage(stdout);
		return 0;
	}
	if (r < 0) {
		usage(stderr);
		return VMM_EXIT_USAGE;
	}
	if (o.restore_path)
		return runner_restore(&o);
	if (runner_create_vm(&o, &vm) < 0)
		return VMM_EXIT_ERROR;
	mig.busy_poll = o.busy_poll;
	/* An incoming VM has no image: state and RAM come from the source. */
	r = migrate_prepare(vm, &mig);
	if (r < 0 && mig.quit) /* QMP quit before the state arrived: as quit, exit 0 */
		status = migrate_finish(vm, &mig) ? VMM_EXIT_ERROR : 0;
	else if (r >= 0 && (migrate_is_incoming(&mig) || load_image(vm, &o, &staging) == 0))
		status = run_vm(vm, &o);
	vm_destroy(vm);
	if (staging)
		munmap(staging, o.mem_size);
	return status;
}
