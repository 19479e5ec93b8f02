// SPDX-License-Identifier: GPL-2.0
/*
 * QEMU's TLS credentials objects: object-add of a tls-creds-x509 or a
 * tls-creds-psk (a directory of QEMU's file names: ca-cert.pem,
 * server-cert.pem, ... or keys.psk), object-del, and the parameter
 * tls-creds naming one, as libvirt sets up a TLS migration at both ends.
 * A tls-creds that names no object is a directory (this VMM's own form,
 * as --tls-creds: a value with a '/', or a directory of that name).  The
 * names are resolved when the parameter is set: a later object-del changes
 * nothing the parameters hold, and an object the parameters name cannot be
 * deleted.  All under gl->lock.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "glue.h"

static struct glue_tls_obj *find_obj(struct migrate_glue *gl, const char *id)
{
	for (int i = 0; i < GLUE_TLS_OBJS; i++)
		if (gl->tls_objs[i].id[0] && !strcmp(gl->tls_objs[i].id, id))
			return &gl->tls_objs[i];
	return NULL;
}

/* Properties QEMU's objects have that this VMM does not take, with why. */
static int refused_prop(const char *type, const char *key, struct qmp_reply *reply)
{
	if (!strcmp(key, "verify-peer")) /* only false comes here */
		qmp_fail(reply,
			 "%s: verify-peer false is not supported: this VMM always "
			 "verifies its peer",
			 type);
	else if (!strcmp(key, "username"))
		qmp_fail(reply,
			 "%s: username is not supported: the first identity of "
			 "keys.psk is used",
			 type);
	else if (!strcmp(key, "priority") || !strcmp(key, "sanity-check") ||
		 !strcmp(key, "passwordid") || !strcmp(key, "loaded"))
		qmp_fail(reply, "%s: property '%s' is not supported here", type, key);
	else
		qmp_fail(reply, "Property '%s.%.64s' not found", type, key);
	return -1;
}

/* object-add's properties into o: dir, endpoint, verify-peer. 0, or -1 with reply set. */
static int obj_props(struct json_object *args, const char *type, struct glue_tls_obj *o,
		     struct qmp_reply *reply)
{
	char endpoint[16] = "client";

	json_object_object_foreach(args, key, v)
	{
		if (!strcmp(key, "qom-type") || !strcmp(key, "id") || !strcmp(key, "dir") ||
		    !strcmp(key, "endpoint"))
			continue;
		if (!strcmp(key, "verify-peer") && json_object_is_type(v, json_type_boolean) &&
		    json_object_get_boolean(v))
			continue;
		return refused_prop(type, key, reply);
	}
	if (glue_arg_str(args, "dir", o->dir, sizeof(o->dir), reply) ||
	    glue_arg_str(args, "endpoint", endpoint, sizeof(endpoint), reply))
		return -1;
	if (!o->dir[0]) {
		qmp_fail(reply, "%s: parameter 'dir' is missing", type);
		return -1;
	}
	if (strcmp(endpoint, "client") && strcmp(endpoint, "server")) {
		qmp_fail(reply, "Parameter 'endpoint' does not accept value '%s'", endpoint);
		return -1;
	}
	o->server = !strcmp(endpoint, "server");
	return 0;
}

/* The files the object's endpoint needs are readable, as QEMU loads them at object-add. */
static int obj_files(const struct glue_tls_obj *o, struct qmp_reply *reply)
{
	const char *x509[] = { "ca-cert.pem", o->server ? "server-cert.pem" : "client-cert.pem",
			       o->server ? "server-key.pem" : "client-key.pem" };
	const char *psk[] = { "keys.psk" };
	const char **files = o->psk ? psk : x509;
	size_t n = o->psk ? 1 : 3;
	char path[600];

	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", o->dir, files[i]);
		if (access(path, R_OK)) {
			qmp_fail(reply, "Unable to access credentials %s: %s", path,
				 strerror(errno));
			return -1;
		}
	}
	return 0;
}

void glue_qmp_object_add(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct glue_tls_obj o = { 0 };
	char type[32] = "";
	int slot = -1;

	if (glue_arg_str(args, "qom-type", type, sizeof(type), reply) ||
	    glue_arg_str(args, "id", o.id, sizeof(o.id), reply))
		return;
	if (!type[0]) {
		qmp_fail(reply, "Parameter 'qom-type' is missing");
		return;
	}
	if (strcmp(type, "tls-creds-x509") && strcmp(type, "tls-creds-psk")) {
		qmp_fail(reply, "invalid object type: %s", type);
		return;
	}
	o.psk = !strcmp(type, "tls-creds-psk");
	if (!o.id[0]) {
		qmp_fail(reply, "Parameter 'id' is missing");
		return;
	}
	if (obj_props(args, type, &o, reply) || obj_files(&o, reply))
		return;
	pthread_mutex_lock(&gl->lock);
	for (int i = GLUE_TLS_OBJS - 1; i >= 0; i--)
		if (!gl->tls_objs[i].id[0])
			slot = i;
	if (find_obj(gl, o.id))
		qmp_fail(reply, "an object with id '%s' already exists", o.id);
	else if (slot < 0)
		qmp_fail(reply, "no room for another object (at most %d)", GLUE_TLS_OBJS);
	else
		gl->tls_objs[slot] = o;
	pthread_mutex_unlock(&gl->lock);
}

void glue_qmp_object_del(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct glue_tls_obj *o;
	char id[64] = "";

	if (glue_arg_str(args, "id", id, sizeof(id), reply))
		return;
	pthread_mutex_lock(&gl->lock);
	o = find_obj(gl, id);
	if (!o)
		qmp_fail(reply, "object '%s' not found", id);
	else if (!strcmp(gl->params.tls_creds, id))
		qmp_fail(reply, "object '%s' is in use, can not be deleted", id);
	else
		memset(o, 0, sizeof(*o));
	pthread_mutex_unlock(&gl->lock);
}

/*
 * Whether path is a directory: a tls-creds without a '/' may still be one
 * (vmm run --tls-creds creds, relative to the VMM's directory).
 */
static bool is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

void glue_tls_from_paths(struct glue_tls *t, const char *creds_dir, const char *psk_file)
{
	*t = (struct glue_tls){ .endpoint = GLUE_TLS_ANY };
	snprintf(t->creds_dir, sizeof(t->creds_dir), "%s", creds_dir);
	snprintf(t->psk_file, sizeof(t->psk_file), "%s", psk_file);
}

int glue_tls_resolve(struct migrate_glue *gl, struct glue_params *p, struct qmp_reply *reply)
{
	struct glue_tls *t = &p->tls;
	struct glue_tls_obj *o = p->tls_creds[0] ? find_obj(gl, p->tls_creds) : NULL;

	if (!o) { /* a directory, or nothing */
		if (p->tls_creds[0] && !strchr(p->tls_creds, '/') && !is_dir(p->tls_creds)) {
			qmp_fail(reply, "No TLS credentials with id '%s'", p->tls_creds);
			return -1;
		}
		glue_tls_from_paths(t, p->tls_creds, p->tls_psk);
		return 0;
	}
	glue_tls_from_paths(t, "", p->tls_psk);
	t->endpoint = o->server ? GLUE_TLS_SERVER : GLUE_TLS_CLIENT;
	if (o->psk && p->tls_psk[0]) {
		qmp_fail(reply, "tls-creds names a tls-creds-psk and tls-psk is set: one PSK");
		return -1;
	}
	if (o->psk)
		snprintf(t->psk_file, sizeof(t->psk_file), "%s/keys.psk", o->dir);
	else
		snprintf(t->creds_dir, sizeof(t->creds_dir), "%s", o->dir);
	return 0;
}

int glue_tls_endpoint(const struct glue_tls *t, bool server, char *err, size_t errlen)
{
	if (t->endpoint == GLUE_TLS_ANY ||
	    t->endpoint == (server ? GLUE_TLS_SERVER : GLUE_TLS_CLIENT))
		return 0;
	snprintf(err, errlen, "Expected TLS credentials for a %s endpoint",
		 server ? "server" : "client");
	return -1;
}
