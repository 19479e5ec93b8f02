// SPDX-License-Identifier: GPL-2.0
/*
 * The migration library bound to the VMM through the public calls of
 * vmm/include/vmm/vm.h and ram.h: the hooks `vmm run` calls
 * (vmm/include/vmm/migrate.h says when), each handing over to the file of
 * its side (glue.h lists them).  The source side reads guest RAM and
 * pauses/saves the VM; the destination side is the lazy RAM's page
 * source, installs pages through the RAM back end and loads the state.
 * Also the control socket `migrate-agent migrate` talks to.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "glue.h"
#include "vmm/vm.h"

int migrate_prepare(struct vm *vm, struct migrate_vmm_opts *o)
{
	if (glue_check_tls_files(o))
		return -EINVAL;
	struct migrate_glue *gl = calloc(1, sizeof(*gl));
	if (!gl)
		return -ENOMEM;
	*gl = (struct migrate_glue){ .vm = vm, .o = o };
	gl->vmc =
	    (struct vm_control){ .vm = vm, .lock = &gl->lock, .hooks = &glue_run_hooks, .arg = gl };
	pthread_mutex_init(&gl->lock, NULL);
	pthread_cond_init(&gl->cond, NULL);
	glue_params_init(&gl->params, o);
	o->glue = gl;
	if (!o->incoming)
		return 0;
	/*
	 * QEMU's destination is a QMP object from the start: its VM is
	 * "inmigrate" until the state is loaded, and a deferred one takes its
	 * address by migrate-incoming.
	 */
	gl->inmigrate = 1;
	if (o->control) {
		int r = glue_start_control(gl);
		if (r)
			return r;
	}
	int r = glue_prepare_incoming(gl);
	if (r) {
		pthread_mutex_lock(&gl->lock);
		o->quit = gl->incoming_quit;
		pthread_mutex_unlock(&gl->lock);
	}
	return r;
}

int migrate_started(struct vm *vm, struct migrate_vmm_opts *o)
{
	struct migrate_glue *gl = o->glue;
	if (o->incoming)
		return glue_incoming_started(gl);
	if (o->control) {
		int r = glue_start_control(gl);
		if (r)
			return r;
	}
	if (o->migrate_to) {
		int r = pthread_create(&gl->timer, NULL, glue_timer_thread, gl);
		if (r) {
			pr_vmm("cannot start the --migrate-after timer: %s\n", strerror(r));
			return -r;
		}
		gl->timer_on = 1;
	}
	return 0;
}

struct vm_control *migrate_vm_control(struct migrate_vmm_opts *o)
{
	return o->glue ? &o->glue->vmc : NULL;
}

int migrate_finish(struct vm *vm, struct migrate_vmm_opts *o)
{
	struct migrate_glue *gl = o->glue;
	if (!gl)
		return 0;
	pthread_mutex_lock(&gl->lock);
	gl->finishing = 1;
	pthread_cond_broadcast(&gl->cond);
	pthread_mutex_unlock(&gl->lock);
	if (gl->timer_on)
		pthread_join(gl->timer, NULL);
	if (gl->mig_on) {
		/* The VM ended during a migration: give it up if not switched over yet. */
		mig_ctl_cancel(&gl->ctl);
		pthread_join(gl->mig_thread, NULL);
	}
	/* Before the server goes: both threads send events (qmp_close() frees it). */
	glue_stop_incoming_events(gl);
	qmp_close(gl->qmp); /* after the migration thread: it sends events */
	gl->qmp = NULL;
	glue_incoming_finish(gl);
	o->glue = NULL;
	free(gl);
	return 0;
}
