// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's MIGRATION events, as QEMU's incoming side sends them
 * (with the events capability set here): one per status of the incoming
 * migration, from the listen to completed or failed.  The library derives
 * that status from its own records, and a thread waits for it to change
 * (mig_dest_phase_wait(): woken by the library's own wake-ups, and at
 * least every LOOK_MS): an event is never out of order, mostly at once and
 * at worst LOOK_MS late, and a status that lasts less than that may be
 * skipped (libvirt waits for postcopy-active, postcopy-paused and
 * completed, which last far longer).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "glue.h"

#define LOOK_MS 50

static void send_status(struct migrate_glue *gl, enum mig_phase phase)
{
	struct json_object *data;
	int on;

	pthread_mutex_lock(&gl->lock);
	on = !!(gl->params.caps & GLUE_CAP_BIT(GLUE_CAP_EVENTS));
	pthread_mutex_unlock(&gl->lock);
	if (!on || !gl->qmp)
		return;
	data = json_object_new_object();
	json_object_object_add(data, "status", json_object_new_string(mig_phase_name(phase)));
	qmp_event(gl->qmp, "MIGRATION", data);
}

static void *events_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	enum mig_phase last = MIG_PHASE_NONE;

	for (;;) {
		enum mig_phase now = mig_dest_phase_wait(gl->dest, last, LOOK_MS);
		if (now != last)
			send_status(gl, now);
		last = now;
		if (now == MIG_PHASE_COMPLETED || now == MIG_PHASE_FAILED)
			return NULL;
		pthread_mutex_lock(&gl->lock);
		int stop = gl->dest_events_stop;
		pthread_mutex_unlock(&gl->lock);
		if (stop)
			return NULL;
	}
}

int glue_start_incoming_events(struct migrate_glue *gl)
{
	int r;

	if (!gl->qmp)
		return 0; /* no one to tell */
	r = pthread_create(&gl->dest_events, NULL, events_thread, gl);
	if (r) {
		pr_vmm("cannot start the destination's event thread: %s\n", strerror(r));
		return -r;
	}
	gl->dest_events_on = 1;
	return 0;
}

void glue_stop_incoming_events(struct migrate_glue *gl)
{
	if (!gl->dest_events_on)
		return;
	pthread_mutex_lock(&gl->lock);
	gl->dest_events_stop = 1;
	pthread_mutex_unlock(&gl->lock);
	pthread_join(gl->dest_events, NULL);
	gl->dest_events_on = 0;
}
