// SPDX-License-Identifier: GPL-2.0
/*
 * QMP arguments as the glue's commands read them: a string, the listen
 * URI of migrate-incoming and migrate-recover.  Below every command file.
 */
#include <string.h>

#include "glue.h"

int glue_arg_str(struct json_object *args, const char *key, char *buf, size_t len,
		 struct qmp_reply *reply)
{
	struct json_object *v;

	if (!args || !json_object_object_get_ex(args, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_string) ||
	    (size_t)json_object_get_string_len(v) >= len ||
	    strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v)) {
		qmp_fail(reply, "Parameter '%s' expects a string of under %zu bytes", key, len);
		return -1;
	}
	memcpy(buf, json_object_get_string(v), (size_t)json_object_get_string_len(v) + 1);
	return 0;
}

int glue_arg_listen_uri(struct json_object *args, char *uri, size_t len, struct qmp_reply *reply)
{
	char err[sizeof(reply->desc)];

	uri[0] = '\0';
	if (glue_arg_str(args, "uri", uri, len, reply))
		return -1;
	if (!uri[0]) {
		qmp_fail(reply, "Parameter 'uri' is missing");
		return -1;
	}
	if (glue_check_uri(uri, true, err, sizeof(err))) {
		qmp_fail(reply, "%s", err);
		return -1;
	}
	return 0;
}
