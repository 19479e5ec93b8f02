// SPDX-License-Identifier: GPL-2.0
/*
 * The next migration's parameters (docs/migration.md, "The control API"):
 * the flags' values at first, changed by migrate-set-parameters (every
 * argument or none, never below the TLS the VMM was started with), read by
 * query-migrate-parameters, and frozen into the library's options when a
 * migration starts.  All under gl->lock.
 */
#include <errno.h>
#include <string.h>

#include "glue.h"

void glue_params_init(struct glue_params *p, const struct migrate_vmm_opts *o)
{
	*p = (struct glue_params){ .downtime_limit = GLUE_DOWNTIME_LIMIT_DEFAULT };
	memcpy(p->param, o->param, sizeof(p->param));
	/*
	 * QEMU's migrate runs precopy until migrate-start-postcopy; the flag
	 * --postcopy-manual is for --migrate-after's migration (the timer's).
	 */
	p->param[MIG_P_POSTCOPY_MANUAL] = 1;
	/* What a migration uses when none was given (query-migrate-parameters says so). */
	if (!p->param[MIG_P_CHANNELS])
		p->param[MIG_P_CHANNELS] = 1;
	glue_caps_init(p, o);
	snprintf(p->tls_creds, sizeof(p->tls_creds), "%s", o->tls_creds ? o->tls_creds : "");
	snprintf(p->tls_psk, sizeof(p->tls_psk), "%s", o->tls_psk ? o->tls_psk : "");
	snprintf(p->tls_hostname, sizeof(p->tls_hostname), "%s",
		 o->tls_hostname ? o->tls_hostname : "");
	glue_tls_from_paths(&p->tls, p->tls_creds, p->tls_psk); /* the flags' files */
	/* A migrated VM's --migrate-metrics is its arrival's report: not overwritten on leaving. */
	snprintf(p->metrics, sizeof(p->metrics), "%s",
		 o->metrics && !o->incoming ? o->metrics : "");
}

/*
 * TLS given to `vmm run` is a floor: the parameters may add TLS to a plain
 * VMM, or name the host of an x509 peer, never drop TLS or change its mode
 * or files (the old line protocol once ran a request naming only the host
 * in plain text).  0, or -1 with the reason in reply.
 */
static int check_tls_floor(const struct migrate_vmm_opts *o, const struct glue_params *p,
			   struct qmp_reply *reply)
{
	const char *creds = p->tls.creds_dir[0] ? p->tls.creds_dir : NULL;
	const char *psk = p->tls.psk_file[0] ? p->tls.psk_file : NULL;

	if (creds && psk) {
		qmp_fail(reply, "tls-creds and tls-psk exclude each other: x509 or a PSK");
		return -1;
	}
	if (p->tls_hostname[0] && !creds) {
		qmp_fail(reply, "tls-hostname needs tls-creds");
		return -1;
	}
	if ((o->tls_creds && (!creds || strcmp(creds, o->tls_creds))) ||
	    (o->tls_psk && (!psk || strcmp(psk, o->tls_psk)))) {
		qmp_fail(reply,
			 "this VMM was started with TLS (%s): a migration may not change "
			 "or drop it",
			 o->tls_creds ? "x509" : "PSK");
		return -1;
	}
	return 0;
}

/* One numeric parameter from QMP (a bool too for is_bool ones) into p: 0, or -1 with reply set. */
static int set_num_param(struct glue_params *p, int i, const char *key, struct json_object *v,
			 struct qmp_reply *reply)
{
	int64_t n;

	if (mig_param_defs[i].is_bool && json_object_is_type(v, json_type_boolean)) {
		p->param[i] = json_object_get_boolean(v);
		return 0;
	}
	errno = 0;
	n = json_object_get_int64(v);
	/*
	 * A bandwidth above the table's 1 TiB/s (libvirt's default is
	 * INT64_MAX, QEMU takes it) is no cap any link could reach: that cap.
	 */
	if (i == MIG_P_MAX_BANDWIDTH && json_object_is_type(v, json_type_int) && !errno && n > 0 &&
	    (uint64_t)n > mig_param_defs[i].max)
		n = (int64_t)mig_param_defs[i].max;
	if (!json_object_is_type(v, json_type_int) || errno || n < 0 ||
	    !mig_param_in_range(i, (uint64_t)n)) {
		qmp_fail(reply, "Parameter '%s' expects %s from %llu to %llu", key,
			 mig_param_defs[i].is_bool ? "a bool or an integer" : "an integer",
			 (unsigned long long)mig_param_defs[i].min,
			 (unsigned long long)mig_param_defs[i].max);
		return -1;
	}
	p->param[i] = (uint64_t)n;
	return 0;
}

/*
 * QEMU's parameters outside the tunables' table (no flag): 1 if key is
 * one (set in p, or -1 with reply set), 0 if not.
 */
static int set_qemu_param(struct glue_params *p, const char *key, struct json_object *v,
			  struct qmp_reply *reply)
{
	uint64_t *field, max;
	int64_t n;

	if (!strcmp(key, "downtime-limit")) {
		field = &p->downtime_limit;
		max = GLUE_DOWNTIME_LIMIT_MAX;
	} else if (!strcmp(key, "max-postcopy-bandwidth")) {
		field = &p->max_postcopy_bandwidth;
		max = mig_param_defs[MIG_P_MAX_BANDWIDTH].max;
	} else {
		return 0;
	}
	errno = 0;
	n = json_object_get_int64(v);
	if (!json_object_is_type(v, json_type_int) || errno || n < 0 || (uint64_t)n > max) {
		qmp_fail(reply, "Parameter '%s' expects an integer from 0 to %llu", key,
			 (unsigned long long)max);
		return -1;
	}
	*field = (uint64_t)n;
	return 1;
}

/* Every argument into p, or none: 0, or -1 with reply set. */
static int set_params(struct glue_params *p, struct json_object *args, struct qmp_reply *reply)
{
	static const char *const strings[] = { "tls-creds", "tls-psk", "tls-hostname",
					       "x-metrics-file" };
	char *const bufs[] = { p->tls_creds, p->tls_psk, p->tls_hostname, p->metrics };
	const size_t lens[] = { sizeof(p->tls_creds), sizeof(p->tls_psk), sizeof(p->tls_hostname),
				sizeof(p->metrics) };

	json_object_object_foreach(args, key, v)
	{
		int i = mig_param_by_key(key), known = i >= 0;

		if (known && set_num_param(p, i, key, v, reply))
			return -1;
		if (!known) {
			known = set_qemu_param(p, key, v, reply);
			if (known < 0)
				return -1;
		}
		for (size_t k = 0; !known && k < sizeof(strings) / sizeof(strings[0]); k++)
			if (!strcmp(key, strings[k])) {
				known = 1;
				if (glue_arg_str(args, key, bufs[k], lens[k], reply))
					return -1;
			}
		if (!known) {
			qmp_fail(reply, "Parameter '%.64s' is unexpected", key);
			return -1;
		}
	}
	return 0;
}

void glue_qmp_set_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct glue_params p;

	pthread_mutex_lock(&gl->lock);
	p = gl->params;
	if ((!args || !set_params(&p, args, reply)) && !glue_tls_resolve(gl, &p, reply) &&
	    !check_tls_floor(gl->o, &p, reply)) {
		gl->params = p;
		/* The caps also hold for a migration under way. */
		__atomic_store_n(&gl->ctl.max_bandwidth, p.param[MIG_P_MAX_BANDWIDTH],
				 __ATOMIC_RELAXED);
		__atomic_store_n(&gl->ctl.max_postcopy_bandwidth, p.max_postcopy_bandwidth,
				 __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&gl->lock);
}

void glue_qmp_query_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *o = json_object_new_object();
	struct glue_params p;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	p = gl->params;
	pthread_mutex_unlock(&gl->lock);
	for (int i = 0; i < MIG_P_NR; i++)
		json_object_object_add(o, mig_param_defs[i].key,
				       mig_param_defs[i].is_bool
					   ? json_object_new_boolean(p.param[i] != 0)
					   : json_object_new_uint64(p.param[i]));
	json_object_object_add(o, "downtime-limit", json_object_new_uint64(p.downtime_limit));
	json_object_object_add(o, "max-postcopy-bandwidth",
			       json_object_new_uint64(p.max_postcopy_bandwidth));
	json_object_object_add(o, "tls-creds", json_object_new_string(p.tls_creds));
	json_object_object_add(o, "tls-psk", json_object_new_string(p.tls_psk));
	json_object_object_add(o, "tls-hostname", json_object_new_string(p.tls_hostname));
	json_object_object_add(o, "x-metrics-file", json_object_new_string(p.metrics));
	reply->ret = o;
}

void glue_freeze_params(struct migrate_glue *gl, const struct glue_params *params)
{
	struct glue_params *p = &gl->run_params;

	*p = *params;
	gl->mig_opts = glue_lib_opts(gl, gl->uri);
	gl->mig_opts.precopy_rounds = (int)p->param[MIG_P_PRECOPY_ROUNDS];
	/*
	 * QEMU's migrate is precopy until migrate-start-postcopy, whatever
	 * else is set: with the manual switch, precopy runs without
	 * x-precopy-rounds too (its rounds go on until the command).  Before,
	 * such a migrate went straight to postcopy, and a client's
	 * migrate-start-postcopy after "active" (libvirt's) found none.
	 */
	if (p->param[MIG_P_POSTCOPY_MANUAL] && !gl->mig_opts.precopy_rounds)
		gl->mig_opts.precopy_rounds = 1;
	gl->mig_opts.compress = (int)p->param[MIG_P_COMPRESS];
	/* No deadline unless the operator set one: the VM waits for migrate resume. */
	gl->mig_opts.recover_ms =
	    p->param[MIG_P_RECOVER_MS] ? (int)p->param[MIG_P_RECOVER_MS] : MIG_RECOVER_BY_COMMAND;
	/* QEMU's multifd-channels count only with the multifd capability. */
	gl->mig_opts.channels =
	    p->caps & GLUE_CAP_BIT(GLUE_CAP_MULTIFD) ? (unsigned)p->param[MIG_P_CHANNELS] : 1;
	gl->mig_opts.metrics = p->metrics[0] ? p->metrics : NULL;
	gl->mig_opts.tls = (struct mig_tls_opts){
		.creds_dir = p->tls.creds_dir[0] ? p->tls.creds_dir : NULL,
		.psk_file = p->tls.psk_file[0] ? p->tls.psk_file : NULL,
		.hostname = p->tls_hostname[0] ? p->tls_hostname : NULL,
	};
	gl->mig_opts.ctl = &gl->ctl;
}
