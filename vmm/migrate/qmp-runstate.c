// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's run state as QEMU's RunState names it (query-status), and quit.
 * At the source, QEMU's runstate is finish-migrate from the pause of the
 * switch-over until the migration ends (its postcopy_start() stops the VM
 * into it and nothing changes it before completion), then postmigrate
 * until quit: the VMM stays, answering query-migrate with the figures of
 * the migration, while the VM runs at the destination.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "glue.h"
#include "vmm/vm.h"

int glue_postmigrate(struct migrate_glue *gl)
{
	return gl->mig_on &&
	       __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE) == MIG_PHASE_COMPLETED;
}

int glue_vm_lost(struct migrate_glue *gl)
{
	return gl->mig_on &&
	       __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE) == MIG_PHASE_FAILED &&
	       __atomic_load_n(&gl->ctl.vm_lost, __ATOMIC_RELAXED);
}

const char *glue_migrated_away(struct migrate_glue *gl)
{
	if (glue_vm_lost(gl))
		return "the VM was lost: its migration failed after the switch-over, its memory "
		       "is split between the two hosts and it cannot run";
	if (glue_postmigrate(gl))
		return "the VM has migrated away (postmigrate): it runs at the destination, "
		       "which holds its memory; it cannot run here again";
	return NULL;
}

/* QEMU's RunState for this VM (gl->lock held). */
static const char *run_state(struct migrate_glue *gl)
{
	int phase = __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE);

	if (gl->inmigrate)
		return "inmigrate";
	if (glue_postmigrate(gl))
		return "postmigrate";
	/*
	 * From the pause on, until the end: the VM does not run here; nor
	 * after a failure past the switch-over (QEMU's source, whose
	 * postcopy never fails for good, has no better name for it).
	 */
	if (glue_vm_lost(gl) ||
	    (gl->mig_on && phase >= MIG_PHASE_PRE_SWITCHOVER && phase < MIG_PHASE_COMPLETED))
		return "finish-migrate";
	return gl->user_paused ? "paused" : "running";
}

void glue_qmp_query_status(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *o = json_object_new_object();
	const char *state;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	state = run_state(gl);
	pthread_mutex_unlock(&gl->lock);
	json_object_object_add(o, "running", json_object_new_boolean(!strcmp(state, "running")));
	json_object_object_add(o, "singlestep", json_object_new_boolean(0));
	json_object_object_add(o, "status", json_object_new_string(state));
	reply->ret = o;
}

/*
 * QEMU's quit: the VMM ends, exit status 0 (a stop that is not the
 * guest's exit, as --save-after's), or VMM_EXIT_ERROR when the VM was lost
 * by a migration that failed after the switch-over.  The reply is queued by
 * the client's own thread before it can see the server close, so it goes out
 * (vmm/qmp.c flushes a closing client's queue).  A migration under way
 * is given up before the switch-over, as when the guest ends
 * (migrate_finish()).
 */
void glue_qmp_quit(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	int lost;

	(void)args;
	(void)reply;
	pthread_mutex_lock(&gl->lock);
	lost = glue_vm_lost(gl);
	pthread_mutex_unlock(&gl->lock);
	vm_stop(gl->vm, lost ? -EIO : -EINTR);
}
