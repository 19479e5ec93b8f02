// SPDX-License-Identifier: GPL-2.0
/*
 * The source: the VM's callbacks the library calls (pause, resume, save,
 * the dirty log, guest RAM read in place), one migration out on its own
 * thread, started through glue_start_migration() by QMP migrate or by
 * --migrate-after's timer.  Its phases go to the QMP clients as MIGRATION
 * events.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "glue.h"
#include "ram/ram.h"
#include "vmm/vm.h"

/*
 * The switch-over's pause, and the resume after a migration that failed
 * before it: QEMU's STOP and RESUME (sent whatever the events capability,
 * as QEMU's run state events are).
 */
static int s_pause(void *ctx)
{
	struct migrate_glue *gl = ctx;
	int r = vm_pause(gl->vm);

	if (!r && gl->qmp)
		qmp_event(gl->qmp, "STOP", NULL);
	return r;
}

static int s_resume(void *ctx)
{
	struct migrate_glue *gl = ctx;
	int r = vm_resume(gl->vm);

	if (!r && gl->qmp)
		qmp_event(gl->qmp, "RESUME", NULL);
	return r;
}

static int s_save(void *ctx, void **blob, size_t *len)
{
	struct migrate_glue *gl = ctx;
	ssize_t n = vm_state_size(gl->vm);
	if (n < 0)
		return (int)n;
	void *b = malloc((size_t)n);
	if (!b)
		return -ENOMEM;
	ssize_t w = vm_state_save(gl->vm, b, (size_t)n);
	if (w < 0) {
		free(b);
		return (int)w;
	}
	*blob = b;
	*len = (size_t)w;
	return 0;
}

static int s_stopped(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_is_stopped(gl->vm);
}

static int s_dirty_start(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_set(gl->vm, true);
}

static int s_dirty_stop(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_set(gl->vm, false);
}

static int s_dirty_fetch(void *ctx, uint64_t *bitmap)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_fetch(gl->vm, bitmap);
}

int glue_migrate_out(struct migrate_glue *gl, const char *to, const struct mig_opts *m, char *err,
		     size_t errlen)
{
	struct ram *ram = vm_ram(gl->vm);
	struct mig_source_vm svm = {
		.ctx = gl,
		.ram = ram_host(ram),
		.ram_size = ram_bytes(ram),
		.pause = s_pause,
		.resume = s_resume,
		.save_state = s_save,
		.dirty_start = s_dirty_start,
		.dirty_fetch = s_dirty_fetch,
		.dirty_stop = s_dirty_stop,
		.stopped = s_stopped,
	};
	int switched;
	svm.nr_regions = glue_regions(gl->vm, svm.regions);
	pr_vmm("migrating to %s%s\n", to, m->precopy_rounds ? " (precopy, then postcopy)" : "");
	int r = mig_source_run(&svm, m, &switched, err, errlen);
	if (r == 0) {
		pr_vmm("migration to %s complete: the VM runs there now\n", to);
		/*
		 * QEMU's postmigrate: with a control socket the VMM stays, its
		 * vCPUs paused, answering QMP until quit; a tool polling
		 * query-migrate reads "completed", not EOF.
		 */
		if (gl->qmp)
			pr_vmm("postmigrate: waiting for 'quit' on the control socket\n");
		else
			vm_stop(gl->vm, -EINTR);
		return 0;
	}
	if (switched) {
		pr_vmm("migration failed after the switch-over: %s; the VM cannot run here "
		       "either (its memory is split)\n",
		       err);
		/*
		 * With a control socket the VMM stays, as a QEMU source does,
		 * so that the operator reads query-migrate's failed and its
		 * error-desc; quit then ends it with the failure's status
		 * (glue_vm_lost()).
		 */
		if (gl->qmp)
			pr_vmm("the VM is lost: waiting for 'quit' on the control socket\n");
		else
			vm_stop(gl->vm, -EIO);
	} else {
		pr_vmm("migration failed, the VM goes on here: %s\n", err);
	}
	return r;
}

void glue_phase_changed(void *arg, enum mig_phase phase)
{
	struct migrate_glue *gl = arg;
	struct json_object *data = json_object_new_object();

	/* As QEMU's, MIGRATION events only with the events capability (frozen at the start). */
	if (!(gl->run_params.caps & GLUE_CAP_BIT(GLUE_CAP_EVENTS))) {
		json_object_put(data);
		return;
	}
	json_object_object_add(data, "status", json_object_new_string(mig_phase_name(phase)));
	if (phase == MIG_PHASE_FAILED) /* QEMU's event has none: a VMM that exits can't be asked */
		json_object_object_add(data, "x-error-desc", json_object_new_string(gl->ctl.error));
	if (gl->qmp)
		qmp_event(gl->qmp, "MIGRATION", data);
	else
		json_object_put(data);
}

/* A fresh control block for the migration about to start, from gl->run_params (gl->lock held). */
static void new_ctl(struct migrate_glue *gl)
{
	const struct glue_params *p = &gl->run_params;

	gl->ctl = (struct mig_ctl){
		.max_bandwidth = p->param[MIG_P_MAX_BANDWIDTH],
		.max_postcopy_bandwidth = p->max_postcopy_bandwidth,
		.manual_postcopy = (int)p->param[MIG_P_POSTCOPY_MANUAL],
		.pause_before_switchover =
		    !!(p->caps & GLUE_CAP_BIT(GLUE_CAP_PAUSE_BEFORE_SWITCHOVER)),
		.phase = MIG_PHASE_SETUP,
		.phase_changed = glue_phase_changed,
		.pass_started = glue_pass_started,
		.arg = gl,
	};
}

/*
 * The VM's one migration, whoever starts it (QMP migrate, --migrate-after):
 * one object, gl->ctl and gl->mig_thread, that query-migrate,
 * migrate_cancel and migrate-start-postcopy act on, so a second start is
 * refused while it runs.  gl->lock held.  0, or -1 with why in err.
 */
int glue_start_migration(struct migrate_glue *gl, const char *uri, const struct glue_params *p,
			 char *err, size_t errlen)
{
	const char *away = glue_migrated_away(gl);
	bool paused = vm_control_paused(&gl->vmc);

	bool saving = vm_control_saving(&gl->vmc);
	bool ending = gl->finishing || vm_is_stopped(gl->vm);

	if (glue_mig_active(gl) || paused || saving || ending || away) {
		snprintf(err, errlen, "%s",
			 paused	  ? "the VM is stopped: 'cont' it first"
			 : saving ? "the VM is being saved to a snapshot (--save-after)"
			 : ending ? "the VM is ending"
			 : away	  ? away
				  : "There's a migration process in progress");
		return -1;
	}
	if (glue_tls_endpoint(&p->tls, false, err, errlen))
		return -1;
	if (gl->mig_on) /* the previous one ended: its thread is done */
		pthread_join(gl->mig_thread, NULL);
	gl->mig_on = 0;
	snprintf(gl->uri, sizeof(gl->uri), "%s", uri);
	glue_freeze_params(gl, p);
	new_ctl(gl);
	if (pthread_create(&gl->mig_thread, NULL, glue_migration_thread, gl)) {
		snprintf(err, errlen, "cannot start the migration thread");
		return -1;
	}
	gl->mig_on = 1;
	return 0;
}

void *glue_migration_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	char err[400] = "";

	glue_migrate_out(gl, gl->uri, &gl->mig_opts, err, sizeof(err));
	return NULL;
}

void *glue_timer_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + gl->o->migrate_after_ms * 1000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	char err[400];
	pthread_mutex_lock(&gl->lock);
	int r = 0;
	while (!gl->finishing && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&gl->cond, &gl->lock, &ts);
	/*
	 * The flags' migration, not a QMP client's: postcopy by --postcopy-manual
	 * or by itself after --precopy-rounds, its events on for whoever watches.
	 */
	struct glue_params p = gl->params;
	p.param[MIG_P_POSTCOPY_MANUAL] = gl->o->param[MIG_P_POSTCOPY_MANUAL];
	p.caps |= GLUE_CAP_BIT(GLUE_CAP_POSTCOPY_RAM) | GLUE_CAP_BIT(GLUE_CAP_EVENTS);
	/* No operator to resume it: the source re-dials by itself (10 s by default). */
	if (!p.param[MIG_P_RECOVER_MS])
		p.param[MIG_P_RECOVER_MS] = 10000;
	if (!gl->finishing && glue_start_migration(gl, gl->o->migrate_to, &p, err, sizeof(err)))
		pr_vmm("--migrate-after: no migration started: %s\n", err);
	pthread_mutex_unlock(&gl->lock);
	return arg;
}
