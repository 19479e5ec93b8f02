// SPDX-License-Identifier: GPL-2.0
/*
 * QEMU's migration capabilities (migrate-set-capabilities,
 * query-migrate-capabilities) with QEMU's names and shape, mapped onto
 * what this project does (docs/migration.md, "Capabilities").  They live
 * in gl->params with the parameters, under gl->lock, and are frozen with
 * them when a migration starts.
 */
#include <string.h>

#include "glue.h"

/* Why a capability cannot be set true here; NULL where it can. */
struct glue_cap_def {
	const char *name;
	const char *refuse_true;
};

static const struct glue_cap_def cap_defs[GLUE_CAP_NR] = {
	[GLUE_CAP_POSTCOPY_RAM] = { "postcopy-ram", NULL },
	[GLUE_CAP_POSTCOPY_PREEMPT] = { "postcopy-preempt", NULL },
	[GLUE_CAP_RETURN_PATH] = { "return-path", NULL },
	[GLUE_CAP_EVENTS] = { "events", NULL },
	[GLUE_CAP_MULTIFD] = { "multifd", NULL },
	[GLUE_CAP_POSTCOPY_BLOCKTIME] = { "postcopy-blocktime", NULL },
	[GLUE_CAP_PAUSE_BEFORE_SWITCHOVER] = { "pause-before-switchover", NULL },
	[GLUE_CAP_ZERO_COPY_SEND] = { "zero-copy-send", "zero-copy-send is not supported here: the "
							"push copies every page into its "
							"frame before it is sent" },
};

void glue_caps_init(struct glue_params *p, const struct migrate_vmm_opts *o)
{
	/* vmm run --channels N (N > 1) is multifd with N channels, as QEMU names it. */
	p->caps = o->param[MIG_P_CHANNELS] > 1 ? GLUE_CAP_BIT(GLUE_CAP_MULTIFD) : 0;
}

static int cap_by_name(const char *name)
{
	for (int i = 0; i < GLUE_CAP_NR; i++)
		if (!strcmp(cap_defs[i].name, name))
			return i;
	return -1;
}

/* One {"capability": NAME, "state": BOOL} into *caps: 0, or -1 with reply set. */
static int set_one(uint32_t *caps, struct json_object *e, struct qmp_reply *reply)
{
	struct json_object *name, *state;
	int i;

	if (!json_object_is_type(e, json_type_object) ||
	    !json_object_object_get_ex(e, "capability", &name) ||
	    !json_object_object_get_ex(e, "state", &state) ||
	    !json_object_is_type(name, json_type_string) ||
	    !json_object_is_type(state, json_type_boolean) || json_object_object_length(e) != 2) {
		qmp_fail(reply, "Parameter 'capabilities' expects a list of "
				"{\"capability\": NAME, \"state\": BOOL}");
		return -1;
	}
	i = cap_by_name(json_object_get_string(name));
	if (i < 0) {
		qmp_fail(reply, "Parameter 'capability' does not accept value '%.64s'",
			 json_object_get_string(name));
		return -1;
	}
	if (json_object_get_boolean(state) && cap_defs[i].refuse_true) {
		qmp_fail(reply, "%s", cap_defs[i].refuse_true);
		return -1;
	}
	if (json_object_get_boolean(state))
		*caps |= GLUE_CAP_BIT(i);
	else
		*caps &= ~GLUE_CAP_BIT(i);
	return 0;
}

/* The whole list into *caps, checked together as QEMU checks it: 0, or -1 with reply set. */
static int set_caps(uint32_t *caps, struct json_object *args, struct qmp_reply *reply)
{
	struct json_object *list;

	if (!args || !json_object_object_get_ex(args, "capabilities", &list)) {
		qmp_fail(reply, "Parameter 'capabilities' is missing");
		return -1;
	}
	if (json_object_object_length(args) != 1) {
		qmp_fail(reply, "migrate-set-capabilities takes only 'capabilities'");
		return -1;
	}
	if (!json_object_is_type(list, json_type_array)) {
		qmp_fail(reply, "Parameter 'capabilities' expects an array");
		return -1;
	}
	for (size_t k = 0; k < json_object_array_length(list); k++)
		if (set_one(caps, json_object_array_get_idx(list, k), reply))
			return -1;
	if ((*caps & GLUE_CAP_BIT(GLUE_CAP_POSTCOPY_PREEMPT)) &&
	    !(*caps & GLUE_CAP_BIT(GLUE_CAP_POSTCOPY_RAM))) {
		qmp_fail(reply, "Postcopy preempt requires postcopy-ram");
		return -1;
	}
	return 0;
}

void glue_qmp_set_capabilities(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	uint32_t caps;

	pthread_mutex_lock(&gl->lock);
	caps = gl->params.caps;
	if (glue_mig_active(gl))
		qmp_fail(reply, "There's a migration process in progress");
	else if (!set_caps(&caps, args, reply))
		gl->params.caps = caps; /* all or nothing */
	pthread_mutex_unlock(&gl->lock);
}

void glue_qmp_query_capabilities(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *list = json_object_new_array();
	uint32_t caps;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	caps = gl->params.caps;
	pthread_mutex_unlock(&gl->lock);
	for (int i = 0; i < GLUE_CAP_NR; i++) {
		struct json_object *e = json_object_new_object();

		json_object_object_add(e, "capability", json_object_new_string(cap_defs[i].name));
		json_object_object_add(e, "state",
				       json_object_new_boolean(!!(caps & GLUE_CAP_BIT(i))));
		json_object_array_add(list, e);
	}
	reply->ret = list;
}
