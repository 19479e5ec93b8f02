/* SPDX-License-Identifier: GPL-2.0 */
/* What `vmm run` and `vmm restore` share: options, the wait loop, the summary. */
#ifndef VMM_RUNNER_H
#define VMM_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/vm.h"

struct vm_control;

struct run_opts {
	uint64_t mem_size;
	unsigned int nr_vcpus;
	const char *image, *cmdline;
	bool lazy, busy_poll, trace_reports;
	const char *backend; /* "auto" unless forced */
	uint64_t save_after_ms;
	const char *save_path;
	const char *restore_path;
};

/*
 * Parses one option at argv[*i] shared by run and restore; returns 1 if
 * taken (advancing *i past its value), 0 if not ours, -1 after printing a
 * message about a bad value.
 */
int runner_parse_common(int argc, char **argv, int *i, struct run_opts *o);
/*
 * Creates the VM that o describes, its lazy RAM with the back end o asks
 * for; blocks SIGINT and SIGTERM first, for every thread of the VM.  Prints
 * a message on failure.
 */
int runner_create_vm(const struct run_opts *o, struct vm **vm);
/*
 * Runs until the guest exits, a signal (SIGINT/SIGTERM), or the
 * --save-after deadline; prints the summary line; returns the process
 * exit status.  vc: the VM's run state, which a migration has its say on
 * (the save asks it), or NULL for a VM that never migrates.
 */
int runner_loop(struct vm *vm, const struct run_opts *o, struct vm_control *vc);
/* Continues the snapshot o->restore_path (vmm restore, vmm run --lazy-from). */
int runner_restore(struct run_opts *o);

#endif /* VMM_RUNNER_H */
