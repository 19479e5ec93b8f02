/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The VM's own QMP commands, as QEMU's: stop, cont, query-status, quit
 * and query-block (vmm/vm-control.c), for the --control socket
 * (vmm/qmp.h).  They are the VM's: its run state (running or paused by
 * stop) is kept here.  A migration has its say through hooks, under the
 * owner's lock (one lock, so that a stop and a migration's start cannot
 * cross): the run state it puts the VM in (QEMU's inmigrate,
 * finish-migrate, postmigrate), why stop or cont cannot run while it
 * does, and whether the VM was lost (quit's exit status).
 */
#ifndef VMM_VM_CONTROL_H
#define VMM_VM_CONTROL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "vmm/qmp.h"

struct vm;

/* A migration's say on the run state; each called with *lock held. */
struct vm_run_hooks {
	/* QEMU's RunState while the migration decides it, else NULL. */
	const char *(*state)(void *arg);
	/*
	 * Why stop (stop true) or cont cannot run now (a constant, or buf
	 * written), else NULL; *noop set: not refused, but there is nothing
	 * to do (no event either).
	 */
	const char *(*refuse)(void *arg, bool stop, bool *noop, char *buf, size_t len);
	/* The VM was lost by its migration: quit ends with VMM_EXIT_ERROR. */
	bool (*lost)(void *arg);
	/*
	 * quit came: end a wait of the migration's that holds the VMM before
	 * its VM runs (a destination's, for its address or its state).
	 * Called with *lock held, before the VM is stopped.
	 */
	void (*quit)(void *arg);
};

struct vm_control {
	struct vm *vm;
	pthread_mutex_t *lock; /* the owner's; the VM's own lock nests inside it */
	const struct vm_run_hooks *hooks;
	void *arg;		/* the hooks' */
	struct qmp_server *qmp; /* under *lock: STOP and RESUME go to its clients; NULL: none */
	bool paused;		/* under *lock: stopped by stop, until cont */
};

/* The commands, for qmp_listen() with a struct vm_control as their ctx. */
extern const struct qmp_command vm_control_commands[];

/* Whether stop paused the VM (*lock held). */
bool vm_control_paused(const struct vm_control *vc);

#endif /* VMM_VM_CONTROL_H */
