// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's own QMP commands (vmm/vm-control.h).  QEMU's runstates named
 * here are the VM's own (running, paused); the rest come from the hooks
 * of whoever migrates it.
 */
#include <errno.h>
#include <string.h>

#include "vmm/vm-control.h"
#include "vmm/vm.h"

bool vm_control_paused(const struct vm_control *vc)
{
	return vc->paused || vc->stopping;
}

bool vm_control_saving(const struct vm_control *vc)
{
	return vc->saving;
}

const char *vm_control_save_begin(struct vm_control *vc, char *buf, size_t len)
{
	const char *why;

	pthread_mutex_lock(vc->lock);
	why = vc->saving     ? "a snapshot is already being written"
	      : vc->stopping ? "a stop is in progress"
			     : vc->hooks->refuse_save(vc->arg, buf, len);
	if (!why)
		vc->saving = true;
	pthread_mutex_unlock(vc->lock);
	return why;
}

void vm_control_save_end(struct vm_control *vc, bool saved)
{
	pthread_mutex_lock(vc->lock);
	if (!saved && !vc->paused)
		vm_resume(vc->vm);
	vc->saving = false;
	pthread_mutex_unlock(vc->lock);
}

/* QEMU's RunState of the VM (*vc->lock held). */
static const char *run_state(struct vm_control *vc)
{
	const char *s = vc->hooks->state(vc->arg);

	return s ? s : vc->paused ? "paused" : "running";
}

static void query_status(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct vm_control *vc = ctx;
	struct json_object *o = json_object_new_object();
	const char *state;

	(void)args;
	pthread_mutex_lock(vc->lock);
	state = run_state(vc);
	pthread_mutex_unlock(vc->lock);
	json_object_object_add(o, "running", json_object_new_boolean(!strcmp(state, "running")));
	json_object_object_add(o, "singlestep", json_object_new_boolean(0));
	json_object_object_add(o, "status", json_object_new_string(state));
	reply->ret = o;
}

/*
 * The VM paused for stop, without the lock: a vCPU may be waiting in KVM
 * for a page of its incoming migration, which a paused postcopy brings
 * only after migrate-recover, a command that takes the lock (holding it
 * here deadlocked the destination's control socket).  vc->stopping keeps
 * cont, another stop, a migration's start and a snapshot out meanwhile.
 * *vc->lock held on entry and on return.
 */
static int pause_unlocked(struct vm_control *vc)
{
	int r;

	vc->stopping = true;
	pthread_mutex_unlock(vc->lock);
	r = vm_pause(vc->vm);
	pthread_mutex_lock(vc->lock);
	vc->stopping = false;
	return r;
}

/* stop and cont: the VM paused or resumed, STOP or RESUME to every client. */
static void stop_cont(struct vm_control *vc, bool stop, struct qmp_reply *reply)
{
	char buf[sizeof(reply->desc)];
	struct qmp_server *events;
	bool noop = false;
	const char *why;

	pthread_mutex_lock(vc->lock);
	events = vc->qmp;
	why = vc->saving     ? "the VM is being saved to a snapshot (--save-after)"
	      : vc->stopping ? "a stop is in progress: the vCPUs are leaving (one may wait for a "
			       "page of the incoming migration)"
			     : vc->hooks->refuse(vc->arg, stop, &noop, buf, sizeof(buf));
	if (why) {
		qmp_fail(reply, "%s", why);
	} else if (!noop && stop != vc->paused) {
		int r = stop ? pause_unlocked(vc) : vm_resume(vc->vm);

		if (r)
			qmp_fail(reply, "cannot %s the VM: %s", stop ? "stop" : "resume",
				 strerror(-r));
		else
			vc->paused = stop;
	}
	pthread_mutex_unlock(vc->lock);
	if (!reply->error_class && !noop &&
	    events) /* never with the lock held (the owner's rule) */
		qmp_event(events, stop ? "STOP" : "RESUME", NULL);
}

static void stop(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)args;
	stop_cont(ctx, true, reply);
}

static void cont(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)args;
	stop_cont(ctx, false, reply);
}

/*
 * QEMU's quit: the VMM ends, exit status 0 (a stop that is not the
 * guest's exit), or VMM_EXIT_ERROR when the VM was lost by a migration
 * that failed after the switch-over; a destination still waiting for its
 * address or its state stops waiting (the hook).  The reply is queued by
 * the client's own thread before it can see the server close, so it goes
 * out (vmm/qmp.c flushes a closing client's queue).
 */
static void quit(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct vm_control *vc = ctx;
	bool lost;

	(void)args;
	(void)reply;
	pthread_mutex_lock(vc->lock);
	lost = vc->hooks->lost(vc->arg);
	vc->hooks->quit(vc->arg);
	pthread_mutex_unlock(vc->lock);
	vm_stop(vc->vm, lost ? -EIO : -EINTR);
}

/* QEMU's answer for a VM without block devices, which is every VM of this VMM. */
static void query_block(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)ctx;
	(void)args;
	reply->ret = json_object_new_array();
}

const struct qmp_command vm_control_commands[] = {
	{ "stop", stop },
	{ "cont", cont },
	{ "query-status", query_status },
	{ "quit", quit },
	{ "query-block", query_block },
	{ NULL, NULL },
};
