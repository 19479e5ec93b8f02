// SPDX-License-Identifier: GPL-2.0
/*
 * What a migration says of the VM's run state (the hooks of
 * vmm/vm-control.h, whose commands stop, cont, query-status and quit
 * ask them), and the two facts behind them.  At the source, QEMU's
 * runstate is finish-migrate from the pause of the switch-over until the
 * migration ends (its postcopy_start() stops the VM into it and nothing
 * changes it before completion), then postmigrate until quit: the VMM stays, answering query-migrate with the figures of
 * the migration, while the VM runs at the destination.
 */
#include <stdio.h>

#include "glue.h"
#include "vmm/vm-control.h"

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

/* A migration thread was started and its phase is not final (gl->lock held). */
int glue_mig_active(struct migrate_glue *gl)
{
	int phase = __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE);
	return gl->mig_on && phase < MIG_PHASE_COMPLETED;
}

/* QEMU's RunState while a migration decides it, else NULL: the VM's own (gl->lock held). */
static const char *run_state(void *arg)
{
	struct migrate_glue *gl = arg;
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
	return NULL;
}

/* Why stop or cont cannot run while a migration has the VM (gl->lock held). */
static const char *refuse(void *arg, bool stop, bool *noop, char *buf, size_t len)
{
	struct migrate_glue *gl = arg;
	const char *away = glue_migrated_away(gl);

	if (glue_mig_active(gl))
		return "a migration is in progress: it stops and resumes the VM itself";
	if (away) {
		/* QEMU's stop there changes nothing; its cont would run stale RAM. */
		*noop = stop;
		if (stop)
			return NULL;
		snprintf(buf, len, "%s ('quit' ends this VMM)", away);
		return buf;
	}
	/*
	 * QEMU's cont at an inmigrate destination sets autostart and
	 * succeeds; this destination always starts the VM when its state has
	 * arrived, so cont changes nothing (no event: RESUME comes then).
	 * libvirt sends it when it sees that RESUME, which is sent once
	 * inmigrate has ended (glue_incoming_started()), but a client may
	 * send it before: refusing it made a race.  A stop there (QEMU: no
	 * autostart) is refused: this destination has no VM that stays
	 * paused after its migration.
	 */
	if (gl->inmigrate) {
		*noop = !stop;
		return stop ? "the VM is waiting for its incoming migration (inmigrate): it runs "
			      "when its state has arrived (stop it then)"
			    : NULL;
	}
	return NULL;
}

/*
 * Why the VM cannot be saved (--save-after) now (gl->lock held): a
 * snapshot taken while a migration moves the VM out, or after it left (or
 * was lost), would be a second copy of a VM that runs, or is to run, at the
 * destination.  A destination still receiving pages may save: the save
 * ensures each missing page first.
 */
static const char *refuse_save(void *arg, char *buf, size_t len)
{
	struct migrate_glue *gl = arg;
	const char *away = glue_migrated_away(gl);

	if (glue_mig_active(gl))
		return "a migration is in progress: the VM is moving to its destination";
	if (!away)
		return NULL;
	snprintf(buf, len, "%s; a snapshot here would be a stale copy of it", away);
	return buf;
}

/*
 * quit of a lost VM ends with VMM_EXIT_ERROR (gl->lock held).  A
 * migration under way is given up before the switch-over when the VM
 * stops, as when the guest ends (migrate_finish()).
 */
static bool lost(void *arg)
{
	return glue_vm_lost(arg);
}

/*
 * quit while the destination waits (inmigrate), for migrate-incoming or
 * for its source and state: the wait ends as a signal ends it
 * (signals.c), the incoming migration given up (gl->lock held).
 */
static void quit_incoming(void *arg)
{
	struct migrate_glue *gl = arg;

	if (!gl->inmigrate)
		return;
	gl->incoming_quit = 1;
	pthread_cond_broadcast(&gl->cond); /* the wait for migrate-incoming */
	if (gl->dest)			   /* the wait for a source and its state */
		mig_dest_abort(gl->dest, "the destination VMM was told to quit");
}

const struct vm_run_hooks glue_run_hooks = {
	.state = run_state,
	.refuse = refuse,
	.refuse_save = refuse_save,
	.lost = lost,
	.quit = quit_incoming,
};
