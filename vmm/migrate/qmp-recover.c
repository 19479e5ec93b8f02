// SPDX-License-Identifier: GPL-2.0
/*
 * Recovery by command, as QEMU's: a postcopy whose link broke waits in
 * postcopy-paused at both ends, with no deadline unless x-recover-ms (or
 * --recover-ms) set one, until the operator gives the destination a new
 * address (migrate-recover) and the source the same (migrate {resume:
 * true}).  migrate-pause breaks a healthy link on purpose.  The library
 * does the work (mig_ctl_pause(), mig_ctl_resume(), mig_dest_pause(),
 * mig_dest_listen_more()); here are the commands and their refusals, in
 * QEMU's words where QEMU has them.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "glue.h"

/* The incoming migration's library object, or NULL (under gl->lock). */
static struct mig_dest *incoming(struct migrate_glue *gl)
{
	return gl->o->incoming ? gl->dest : NULL;
}

void glue_qmp_migrate_pause(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct mig_dest *dest;
	int r;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	dest = incoming(gl);
	if (dest)
		r = mig_dest_pause(dest);
	else
		r = gl->mig_on ? mig_ctl_pause(&gl->ctl) : -EINVAL;
	pthread_mutex_unlock(&gl->lock);
	if (r)
		qmp_fail(reply, "migrate-pause is currently only supported during postcopy-active "
				"or postcopy-recover state");
}

void glue_qmp_migrate_recover(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	char uri[sizeof(gl->incoming_uri)], err[sizeof(reply->desc)];
	struct mig_dest *dest;

	if (glue_arg_listen_uri(args, uri, sizeof(uri), reply))
		return;
	pthread_mutex_lock(&gl->lock);
	dest = incoming(gl);
	if (!dest)
		qmp_fail(reply, "Migrate recover can only be run when postcopy is paused.");
	else if (mig_dest_listen_more(dest, uri, err, sizeof(err)))
		qmp_fail(reply, "%s", err);
	pthread_mutex_unlock(&gl->lock);
}

/*
 * migrate {uri, resume: true} at the source (qmp_migrate() checked the
 * arguments and the URI's form).  Under gl->lock.
 */
void glue_resume(struct migrate_glue *gl, const char *uri, struct qmp_reply *reply)
{
	int r = gl->mig_on ? mig_ctl_resume(&gl->ctl, uri) : -EINVAL;

	if (r == -EBUSY)
		qmp_fail(reply, "Cannot resume if there is no paused migration: a resume is "
				"already connecting; wait for postcopy-paused or postcopy-active");
	else if (r)
		qmp_fail(reply, "Cannot resume if there is no paused migration");
}

/* query-migrate at the destination: its status, as QEMU's incoming side reports it. */
void glue_incoming_status(struct migrate_glue *gl, struct json_object *o)
{
	struct mig_dest *dest = incoming(gl);

	if (!dest)
		return;
	json_object_object_add(o, "status",
			       json_object_new_string(mig_phase_name(mig_dest_phase(dest))));
	glue_incoming_blocktime(gl, o);
}
