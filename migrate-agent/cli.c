// SPDX-License-Identifier: GPL-2.0
/*
 * migrate-agent: a thin client of the VMM's control API (QMP, see
 * docs/migration.md "The control API").  Migration itself runs inside the
 * VMM process (it must read guest RAM at the source and own it at the
 * destination, as in QEMU).
 *
 *   migrate-agent migrate --vmm SOCKET --to URI   (tcp:HOST:PORT, tcp:[IPV6]:PORT,
 *                                                 unix:PATH: migrate/net.h)
 *                 [--precopy-rounds N] [--compress] [--metrics FILE]
 *                 [--recover-ms MS] [--idle-ms MS] [--max-bandwidth BYTES/S]
 *                 [--channels N]
 *                 [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]
 *   migrate-agent status --vmm SOCKET     query-migrate, as JSON on stdout
 *   migrate-agent cancel --vmm SOCKET     migrate_cancel
 *
 * migrate: sets the parameters, starts the migration, follows it (a live
 * progress line on a terminal), prints the JSON summary on stdout (or
 * writes it to --metrics) and exits 0 once the destination has every page;
 * 1 with the VMM's reason otherwise (also when the VMM answers nothing for
 * --idle-ms, default 10000); 2 for bad usage.  The TLS files are read and
 * the metrics written by the VMM: their paths are made absolute here.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/parse.h"
#include "migrate/params.h"
#include "qmp-client.h"

struct request {
	const char *vmm, *to, *tls_hostname;
	char *tls_creds, *tls_psk; /* absolute paths (realpath), freed by the caller */
	char *metrics;		   /* absolute (the VMM writes it), freed by the caller */
	int idle_ms;
	uint64_t param[MIG_P_NR]; /* migrate/params.h; sent when given */
	bool given[MIG_P_NR];
};

#ifndef BUILD_VERSION
#define BUILD_VERSION "unknown" /* the Makefile passes git describe */
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: migrate-agent migrate --vmm SOCKET --to URI\n"
		"                     [--precopy-rounds N] [--compress] [--metrics FILE]\n"
		"                     [--recover-ms MS] [--idle-ms MS] [--max-bandwidth BYTES/S]\n"
		"                     [--postcopy-manual] [--channels N]\n"
		"                     [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]\n"
		"       migrate-agent status --vmm SOCKET          (query-migrate)\n"
		"       migrate-agent cancel --vmm SOCKET          (migrate_cancel)\n"
		"       migrate-agent start-postcopy --vmm SOCKET  (migrate-start-postcopy)\n"
		"URI: tcp:HOST:PORT (a name or an IPv4 address), tcp:[IPV6]:PORT or unix:PATH\n");
}

/* -h, --help: the usage on stdout, exit 0, from any option's place. */
static int is_help(const char *a)
{
	return !strcmp(a, "-h") || !strcmp(a, "--help");
}

/* parse_args()'s answer when help was asked for and given. */
#define HELP_GIVEN (-1)

/* A number from min to max, or -1 after a message. */
static int parse_int(const char *opt, const char *v, unsigned min, unsigned max)
{
	uint64_t n;
	if (parse_u64(v, min, max, &n)) {
		fprintf(stderr, "migrate-agent: %s: '%s' is not a number from %u to %u\n", opt, v,
			min, max);
		return -1;
	}
	return (int)n;
}

/* An existing file's absolute path (the VMM has another working directory), or NULL after a message. */
static char *tls_path(const char *opt, const char *v)
{
	char *p = realpath(v, NULL);
	if (!p)
		fprintf(stderr, "migrate-agent: %s %s: %s\n", opt, v, strerror(errno));
	else if (strpbrk(p, " \n")) {
		fprintf(stderr, "migrate-agent: %s %s: a path with blanks cannot be passed on\n",
			opt, p);
		free(p);
		p = NULL;
	}
	return p;
}

/*
 * --metrics FILE made absolute, the file need not exist yet: the VMM writes
 * it from its own working directory (a relative name landed there, or
 * failed there, while this command said nothing).  NULL after a message.
 */
static char *metrics_path(const char *v)
{
	char cwd[PATH_MAX], *p;

	if (v[0] == '/')
		return strdup(v);
	if (!getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "migrate-agent: --metrics %s: %s\n", v, strerror(errno));
		return NULL;
	}
	if (asprintf(&p, "%s/%s", cwd, v) < 0)
		return NULL;
	return p;
}

/* The TLS options of q make sense together: 0, or 2 after a message. */
static int check_tls(const struct request *q)
{
	if (q->tls_creds && q->tls_psk) {
		fprintf(stderr, "migrate-agent: --tls-creds and --tls-psk exclude each other: "
				"x509 or a PSK\n");
		return 2;
	}
	if (q->tls_hostname && !q->tls_creds) {
		fprintf(stderr, "migrate-agent: --tls-hostname needs --tls-creds\n");
		return 2;
	}
	if (q->tls_hostname && strpbrk(q->tls_hostname, " \n")) {
		fprintf(stderr, "migrate-agent: --tls-hostname: not a host name\n");
		return 2;
	}
	return 0;
}

/* A tunable of the table (migrate/params.h) at argv[*i]: 1 taken, 0 not one, -1 bad. */
static int param_arg(int argc, char **argv, int *i, struct request *q)
{
	int p = mig_param_by_flag(argv[*i]);
	char err[200];

	if (p < 0)
		return 0;
	q->given[p] = true;
	if (mig_param_defs[p].is_bool) {
		q->param[p] = 1;
		return 1;
	}
	if (*i + 1 >= argc) {
		fprintf(stderr, "migrate-agent: %s needs a value\n", argv[*i]);
		return -1;
	}
	if (mig_param_parse(p, argv[*i], argv[*i + 1], &q->param[p], err, sizeof(err))) {
		fprintf(stderr, "migrate-agent: %s\n", err);
		return -1;
	}
	++*i;
	return 1;
}

/* 0, 2 (usage) after a message, or HELP_GIVEN. */
static int parse_args(int argc, char **argv, struct request *q)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (is_help(a)) {
			usage(stdout);
			return HELP_GIVEN;
		}
		int taken = param_arg(argc, argv, &i, q);
		if (taken < 0)
			return 2;
		if (taken)
			continue;
		if (!v) {
			fprintf(stderr, "migrate-agent: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--vmm"))
			q->vmm = v;
		else if (!strcmp(a, "--to"))
			q->to = v;
		else if (!strcmp(a, "--metrics")) {
			free(q->metrics);
			if (!(q->metrics = metrics_path(v)))
				return 2;
		} else if (!strcmp(a, "--tls-hostname"))
			q->tls_hostname = v;
		else if (!strcmp(a, "--tls-creds") || !strcmp(a, "--tls-psk")) {
			char **slot = a[6] == 'c' ? &q->tls_creds : &q->tls_psk;
			free(*slot);
			if (!(*slot = tls_path(a, v)))
				return 2;
		} else if (!strcmp(a, "--idle-ms")) {
			if ((q->idle_ms = parse_int(a, v, 1, PARSE_RECOVER_MS_MAX)) < 0)
				return 2;
		} else {
			fprintf(stderr, "migrate-agent: unknown option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!q->vmm || !q->to) {
		usage(stderr);
		return 2;
	}
	return check_tls(q);
}

/*
 * After a completed migration: the metrics file is there, or a message
 * (the VMM could not write it, and said why only in its own log).
 */
static void check_metrics(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0 || (S_ISREG(st.st_mode) && !st.st_size))
		fprintf(stderr,
			"migrate-agent: the VMM wrote no metrics to %s (its log says why); the "
			"migration itself completed\n",
			path);
}

/* Copy the metrics file to stdout. */
static void cat_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[4096];
	size_t k;
	while (f && (k = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, k, stdout);
	if (f)
		fclose(f);
}

/* migrate-set-parameters' arguments for q, metrics to that file. */
static struct json_object *parameters(const struct request *q, const char *metrics)
{
	struct json_object *a = json_object_new_object();

	for (int i = 0; i < MIG_P_NR; i++)
		/*
		 * x-postcopy-manual always: the VMM's default is QEMU's (precopy
		 * until migrate-start-postcopy), this CLI's is to switch by itself.
		 */
		if (q->given[i] || i == MIG_P_POSTCOPY_MANUAL)
			json_object_object_add(a, mig_param_defs[i].key,
					       mig_param_defs[i].is_bool
						   ? json_object_new_boolean(q->param[i] != 0)
						   : json_object_new_int64((int64_t)q->param[i]));
	/*
	 * This CLI waits for the end and resumes nothing: the source re-dials
	 * by itself (the VMM's default is to wait for migrate resume).
	 */
	if (!q->given[MIG_P_RECOVER_MS])
		json_object_object_add(a, mig_param_defs[MIG_P_RECOVER_MS].key,
				       json_object_new_int64(10000));
	json_object_object_add(a, "x-metrics-file", json_object_new_string(metrics));
	if (q->tls_creds)
		json_object_object_add(a, "tls-creds", json_object_new_string(q->tls_creds));
	if (q->tls_psk)
		json_object_object_add(a, "tls-psk", json_object_new_string(q->tls_psk));
	if (q->tls_hostname)
		json_object_object_add(a, "tls-hostname", json_object_new_string(q->tls_hostname));
	return a;
}

/* A string member of obj, or "". */
static const char *member(struct json_object *obj, const char *key)
{
	struct json_object *v;
	return obj && json_object_object_get_ex(obj, key, &v) ? json_object_get_string(v) : "";
}

static uint64_t ram_member(struct json_object *st, const char *key)
{
	struct json_object *ram, *v;
	if (!json_object_object_get_ex(st, "ram", &ram) || !json_object_object_get_ex(ram, key, &v))
		return 0;
	return (uint64_t)json_object_get_int64(v);
}

/* One progress line on a terminal, from query-migrate's answer. */
static void show_progress(struct json_object *st)
{
	uint64_t total = ram_member(st, "total"), left = ram_member(st, "remaining");

	if (!isatty(2) || !total)
		return;
	fprintf(stderr, "\r\033[Kmigrate-agent: %-15s %3.0f%%  %llu MiB sent  %llu demand pages",
		member(st, "status"), 100.0 * (double)(total - left) / (double)total,
		(unsigned long long)(ram_member(st, "transferred") >> 20),
		(unsigned long long)ram_member(st, "postcopy-requests"));
}

static int final_status(const char *s)
{
	return !strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled");
}

/*
 * The last MIGRATION status the VMM announced: a VMM that went away (a
 * signal, or one that ended its guest) may have said nothing more.
 */
struct outcome {
	char status[32], error[400];
};

static void on_event(void *arg, struct json_object *ev)
{
	struct outcome *out = arg;
	struct json_object *data;

	if (strcmp(member(ev, "event"), "MIGRATION") ||
	    !json_object_object_get_ex(ev, "data", &data))
		return;
	snprintf(out->status, sizeof(out->status), "%s", member(data, "status"));
	snprintf(out->error, sizeof(out->error), "%s", member(data, "x-error-desc"));
}

/* Say how it ended: 0 when it completed, else 1 after a message. */
static int verdict(const char *status, const char *error)
{
	if (isatty(2))
		fputc('\n', stderr);
	if (!strcmp(status, "completed"))
		return 0;
	if (!strcmp(status, "failed"))
		fprintf(stderr, "migrate-agent: migration failed: %s\n", error);
	else
		fprintf(stderr,
			"migrate-agent: migration cancelled: the VM goes on at the source\n");
	return 1;
}

/* Ask query-migrate once: 1 with a final verdict in *r, 0 to go on, -1 on a broken link. */
static int poll_once(struct qmpc *c, const struct request *q, struct outcome *out, int *r,
		     char *err, size_t errlen)
{
	struct json_object *st = NULL;

	if (qmpc_execute(c, "query-migrate", NULL, q->idle_ms, on_event, out, &st, err, errlen))
		return -1;
	show_progress(st);
	if (final_status(member(st, "status"))) {
		*r = verdict(member(st, "status"), member(st, "error-desc"));
		json_object_put(st);
		return 1;
	}
	json_object_put(st);
	return 0;
}

/*
 * Follow the migration until a final status, asking query-migrate every
 * second (events may say it first; the answer proves the VMM is alive).
 * 0 when it completed; 1 after a message.
 */
static int follow(struct qmpc *c, const struct request *q)
{
	struct outcome out = { "", "" };
	char err[600];
	int r = 1;

	for (;;) {
		struct json_object *ev = NULL;
		int n = poll_once(c, q, &out, &r, err, sizeof(err));

		if (n > 0)
			return r;
		int k = n == 0 ? qmpc_next(c, 1000, &ev) : -1; /* an event, or a second's pause */

		if (k > 0) {
			on_event(&out, ev);
			json_object_put(ev);
		}
		if (k >= 0)
			continue;
		if (final_status(out.status)) /* the VMM went away after saying how it ended */
			return verdict(out.status, out.error);
		if (n < 0 && strstr(err, "silent"))
			fprintf(stderr,
				"\nmigrate-agent: the VMM at %s: %s: giving up; the "
				"migration's own deadlines decide its fate\n",
				q->vmm, err);
		else
			fprintf(stderr, "\nmigrate-agent: migration failed: the VMM closed the "
					"control connection without an answer\n");
		return 1;
	}
}

static void add_cap(struct json_object *list, const char *name, int state)
{
	struct json_object *e = json_object_new_object();

	json_object_object_add(e, "capability", json_object_new_string(name));
	json_object_object_add(e, "state", json_object_new_boolean(state));
	json_object_array_add(list, e);
}

/* QEMU's capabilities for a postcopy migration with events; multifd for --channels. */
static struct json_object *capabilities(const struct request *q)
{
	struct json_object *a = json_object_new_object(), *list = json_object_new_array();

	add_cap(list, "postcopy-ram", 1);
	add_cap(list, "events", 1);
	if (q->given[MIG_P_CHANNELS]) /* else the VMM's own (vmm run --channels) */
		add_cap(list, "multifd", 1);
	json_object_object_add(a, "capabilities", list);
	return a;
}

/* Set the capabilities and parameters and start: 0, or 1 after a message. */
static int start(struct qmpc *c, const struct request *q, const char *metrics)
{
	char err[600];
	struct json_object *args = json_object_new_object();

	json_object_object_add(args, "uri", json_object_new_string(q->to));
	if (qmpc_execute(c, "migrate-set-capabilities", capabilities(q), q->idle_ms, NULL, NULL,
			 NULL, err, sizeof(err)) ||
	    qmpc_execute(c, "migrate-set-parameters", parameters(q, metrics), q->idle_ms, NULL,
			 NULL, NULL, err, sizeof(err)) ||
	    qmpc_execute(c, "migrate", json_object_get(args), q->idle_ms, NULL, NULL, NULL, err,
			 sizeof(err))) {
		fprintf(stderr, "migrate-agent: migration failed: %s\n", err);
		json_object_put(args);
		return 1;
	}
	json_object_put(args);
	return 0;
}

/*
 * A completed migration leaves the source VMM in postmigrate, serving QMP
 * until quit (as QEMU's); the agent ends it, as libvirt ends its source
 * QEMU.  A VMM already gone (it ended by itself) is no error.
 */
static void quit_source(struct qmpc *c)
{
	char err[600];

	qmpc_execute(c, "quit", NULL, 10000, NULL, NULL, NULL, err, sizeof(err));
}

/*
 * A migration that failed after the switch-over leaves the source VMM
 * serving QMP with its VM lost (query-status finish-migrate once failed:
 * its memory is split, it cannot run here); nothing is left for this one-shot
 * command to recover, so it ends that VMM as after completed.  A VM that
 * runs on at the source (a failure before the switch-over) is left alone.
 */
static void quit_lost_source(struct qmpc *c)
{
	struct json_object *st = NULL;
	char err[600];

	if (qmpc_execute(c, "query-status", NULL, 10000, NULL, NULL, &st, err, sizeof(err)))
		return;
	if (!strcmp(member(st, "status"), "finish-migrate")) {
		fprintf(stderr, "migrate-agent: the VM is lost (its memory is split between the "
				"hosts): ending the source VMM\n");
		quit_source(c);
	}
	json_object_put(st);
}

static int cmd_migrate(int argc, char **argv)
{
	struct request q = { .idle_ms = 10000 };
	char tmp[] = "/tmp/migrate-agent.XXXXXX", err[600];
	struct qmpc c;
	int r = parse_args(argc, argv, &q);

	if (r == HELP_GIVEN) {
		free(q.tls_creds);
		free(q.tls_psk);
		free(q.metrics);
		return 0;
	}
	if (!r && !q.metrics) {
		int fd = mkstemp(tmp);
		if (fd < 0) {
			perror("migrate-agent: mkstemp");
			r = 1;
		} else {
			close(fd);
		}
	}
	if (!r && qmpc_connect(&c, q.vmm, q.idle_ms, err, sizeof(err))) {
		fprintf(stderr, "migrate-agent: %s\n", err);
		r = 1;
	} else if (!r) {
		r = start(&c, &q, q.metrics ? q.metrics : tmp);
		if (!r)
			r = follow(&c, &q);
		if (!r)
			quit_source(&c);
		else
			quit_lost_source(&c);
		qmpc_close(&c);
	}
	if (r == 0)
		check_metrics(q.metrics ? q.metrics : tmp);
	if (r == 0 && !q.metrics)
		cat_file(tmp);
	if (!q.metrics)
		unlink(tmp);
	if (r == 0)
		fprintf(stderr, "migrate-agent: migration to %s complete\n", q.to);
	free(q.tls_creds);
	free(q.tls_psk);
	free(q.metrics);
	return r;
}

/* status and cancel: one command on --vmm SOCKET. */
static int cmd_simple(int argc, char **argv, const char *qmp_cmd)
{
	struct json_object *ret = NULL;
	char err[600];
	struct qmpc c;
	int r;

	if (argc == 2 && is_help(argv[1])) {
		usage(stdout);
		return 0;
	}
	if (argc != 3 || strcmp(argv[1], "--vmm")) {
		usage(stderr);
		return 2;
	}
	if (qmpc_connect(&c, argv[2], 10000, err, sizeof(err)) ||
	    qmpc_execute(&c, qmp_cmd, NULL, 10000, NULL, NULL, &ret, err, sizeof(err))) {
		fprintf(stderr, "migrate-agent: %s: %s\n", argv[0], err);
		r = 1;
	} else {
		puts(json_object_to_json_string_ext(ret, JSON_C_TO_STRING_PRETTY));
		r = 0;
	}
	json_object_put(ret);
	qmpc_close(&c);
	return r;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "migrate"))
		return cmd_migrate(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "--version")) {
		printf("migrate-agent %s\n", BUILD_VERSION);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "status"))
		return cmd_simple(argc - 1, argv + 1, "query-migrate");
	if (argc >= 2 && !strcmp(argv[1], "cancel"))
		return cmd_simple(argc - 1, argv + 1, "migrate_cancel");
	if (argc >= 2 && !strcmp(argv[1], "start-postcopy"))
		return cmd_simple(argc - 1, argv + 1, "migrate-start-postcopy");
	if (argc >= 2 && (!strcmp(argv[1], "help") || is_help(argv[1]))) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
