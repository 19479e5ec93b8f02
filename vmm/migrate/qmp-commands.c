// SPDX-License-Identifier: GPL-2.0
/*
 * The control API: QMP commands on the --control socket (vmm/qmp.h,
 * docs/migration.md "The control API").  The VM's one migration, started
 * by `migrate` or by --migrate-after's timer (glue_start_migration()),
 * runs on its own thread (outgoing.c); gl->ctl is the live link to it
 * (requests in, progress and the phase out), gl->params the options of the
 * next one (qmp-params.c).  The VM's own commands (stop, cont,
 * query-status, quit) are vmm/vm-control.c's, with the migration's say on
 * the run state from qmp-runstate.c; query-migrate is in qmp-figures.c.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "glue.h"
#include "vmm/vm-control.h"

/* The arguments a command knows; anything else is refused, as QEMU does. */
static int args_known(struct json_object *args, const char *const *known, struct qmp_reply *reply)
{
	json_object_object_foreach(args, key, val)
	{
		int ok = 0;
		(void)val;
		for (const char *const *k = known; *k; k++)
			ok |= !strcmp(key, *k);
		if (!ok) {
			qmp_fail(reply, "Parameter '%.64s' is unexpected", key);
			return -1;
		}
	}
	return 0;
}

/*
 * migrate's optional booleans, as QEMU takes them: detach (always so
 * here, as in QEMU, where it is ignored) and resume (a paused postcopy
 * resumed: qmp-recover.c), into *resume.  0, or -1 with reply set.
 */
static int migrate_flags(struct json_object *args, bool *resume, struct qmp_reply *reply)
{
	static const char *const keys[] = { "detach", "resume" };
	struct json_object *v;

	for (size_t k = 0; k < 2; k++)
		if (json_object_object_get_ex(args, keys[k], &v) &&
		    !json_object_is_type(v, json_type_boolean)) {
			qmp_fail(reply, "Parameter '%s' expects a boolean", keys[k]);
			return -1;
		}
	*resume = json_object_object_get_ex(args, "resume", &v) && json_object_get_boolean(v);
	return 0;
}

static void qmp_migrate(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	static const char *const known[] = { "uri", "detach", "resume", NULL };
	struct migrate_glue *gl = ctx;
	char uri[sizeof(gl->uri)] = "", err[sizeof(reply->desc)];
	bool resume;

	if (!args || args_known(args, known, reply) ||
	    glue_arg_str(args, "uri", uri, sizeof(uri), reply) ||
	    migrate_flags(args, &resume, reply))
		goto out;
	if (!uri[0]) {
		qmp_fail(reply, "Parameter 'uri' is missing");
		goto out;
	}
	/*
	 * A VM that arrived by migration leaves again once all of its pages
	 * are here; before, its memory is still split with its source.
	 */
	pthread_mutex_lock(&gl->lock);
	/* The library's word (what query-migrate there says), not the watch's later one. */
	int arriving = gl->o->incoming && !(gl->dest && mig_dest_status(gl->dest) == 1);
	pthread_mutex_unlock(&gl->lock);
	if (arriving) {
		qmp_fail(reply, "this VM's incoming migration has not completed: it can migrate on "
				"once every page has arrived");
		return;
	}
	/* A bad URI is an error now, not a failed migration later (as QEMU's). */
	if (glue_check_uri(uri, false, err, sizeof(err))) {
		qmp_fail(reply, "%s", err);
		return;
	}
	pthread_mutex_lock(&gl->lock);
	/*
	 * Without postcopy-ram QEMU migrates by precopy to the end, which this
	 * VMM does not do: a client that did not ask for postcopy gets none.
	 * One under way is said first, as QEMU says it.
	 */
	if (resume)
		glue_resume(gl, uri, reply);
	else if (!glue_mig_active(gl) && !(gl->params.caps & GLUE_CAP_BIT(GLUE_CAP_POSTCOPY_RAM)))
		qmp_fail(reply, "this VMM migrates only by postcopy: set the capability "
				"postcopy-ram (migrate then runs precopy until "
				"migrate-start-postcopy, as QEMU's)");
	else if (glue_start_migration(gl, uri, &gl->params, err, sizeof(err)))
		qmp_fail(reply, "%s", err);
	pthread_mutex_unlock(&gl->lock);
	return;
out:
	if (!reply->error_class)
		qmp_fail(reply, "Parameter 'uri' is missing");
}

static void qmp_cancel(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	if (glue_mig_active(gl) && mig_ctl_cancel(&gl->ctl))
		qmp_fail(reply, "the switch-over has happened: the VM's memory is split between "
				"the two hosts, so a postcopy migration cannot be cancelled; it "
				"completes or fails");
	pthread_mutex_unlock(&gl->lock);
}

static void qmp_start_postcopy(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	int phase;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	phase = __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE);
	if (!glue_mig_active(gl) || phase > MIG_PHASE_PRECOPY)
		qmp_fail(reply, "no migration in precopy (status: %s)",
			 gl->mig_on ? mig_phase_name(phase) : "none");
	else
		mig_ctl_start_postcopy(&gl->ctl);
	pthread_mutex_unlock(&gl->lock);
}

/* QEMU's migrate-continue {state}: leave pre-switchover (pause-before-switchover). */
static void qmp_continue(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	static const char *const known[] = { "state", NULL };
	struct migrate_glue *gl = ctx;
	char state[32] = "";
	int phase;

	if (!args || args_known(args, known, reply) ||
	    glue_arg_str(args, "state", state, sizeof(state), reply))
		return;
	if (!state[0]) {
		qmp_fail(reply, "Parameter 'state' is missing");
		return;
	}
	pthread_mutex_lock(&gl->lock);
	phase = __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE);
	if (!gl->mig_on || strcmp(state, mig_phase_name(phase)) || mig_ctl_continue(&gl->ctl))
		qmp_fail(reply, "Migration not in expected state: %s",
			 gl->mig_on ? mig_phase_name(phase) : "none");
	pthread_mutex_unlock(&gl->lock);
}

static const struct qmp_command qmp_commands[] = {
	{ "migrate", qmp_migrate },
	{ "query-migrate", glue_qmp_query_migrate },
	{ "migrate_cancel", qmp_cancel },
	{ "migrate-set-parameters", glue_qmp_set_parameters },
	{ "query-migrate-parameters", glue_qmp_query_parameters },
	{ "migrate-start-postcopy", qmp_start_postcopy },
	{ "migrate-set-capabilities", glue_qmp_set_capabilities },
	{ "query-migrate-capabilities", glue_qmp_query_capabilities },
	{ "migrate-continue", qmp_continue },
	{ "migrate-incoming", glue_qmp_migrate_incoming },
	{ "migrate-pause", glue_qmp_migrate_pause },
	{ "migrate-recover", glue_qmp_migrate_recover },
	{ "object-add", glue_qmp_object_add },
	{ "object-del", glue_qmp_object_del },
	{ NULL, NULL },
};

/*
 * The control socket: the VM's own commands (vmm/vm-control.h, with this
 * glue's say on the run state: qmp-runstate.c) and the migration's.
 */
int glue_start_control(struct migrate_glue *gl)
{
	char err[400] = "";

	const struct qmp_commands sets[] = {
		{ vm_control_commands, &gl->vmc },
		{ qmp_commands, gl },
	};
	gl->qmp = qmp_listen(gl->o->control, sets, 2, err, sizeof(err));
	if (!gl->qmp) {
		pr_vmm("--control: %s\n", err);
		return -EINVAL;
	}
	pthread_mutex_lock(&gl->lock);
	gl->vmc.qmp = gl->qmp;
	pthread_mutex_unlock(&gl->lock);
	return 0;
}
