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
	 * Why the VM cannot be saved to a snapshot now (--save-after: a
	 * constant, or buf written), else NULL.
	 */
	const char *(*refuse_save)(void *arg, char *buf, size_t len);
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
	bool stopping;		/* under *lock: a stop waits for the vCPUs, without the lock */
	bool saving;		/* under *lock: a snapshot is being written */
};

/* The commands, for qmp_listen() with a struct vm_control as their ctx. */
extern const struct qmp_command vm_control_commands[];

/* Whether stop paused the VM, or is pausing it (*lock held). */
bool vm_control_paused(const struct vm_control *vc);
/* Whether a snapshot is being written (*lock held): no migration starts then. */
bool vm_control_saving(const struct vm_control *vc);

/*
 * A snapshot of the VM (--save-after) is written between these two, without
 * the lock (a destination's save waits for pages that a recovery by QMP
 * command may have to bring), so stop and cont are refused meanwhile, and
 * the hooks' owner refuses to start a migration (vm_control_saving()).
 * vm_control_save_begin() takes the lock: NULL, or why the VM cannot be
 * saved now (the hooks' say: a migration has the VM, or it left).
 * vm_control_save_end(): saved, the VM has been stopped by the caller;
 * not saved, it runs on unless stop had paused it.
 */
const char *vm_control_save_begin(struct vm_control *vc, char *buf, size_t len);
void vm_control_save_end(struct vm_control *vc, bool saved);

#endif /* VMM_VM_CONTROL_H */
