// SPDX-License-Identifier: GPL-2.0
/*
 * vmm run's migration flags (vmm/migrate.h lists them): parsed into
 * struct migrate_vmm_opts, checked together before anything starts, and
 * turned into the library's struct mig_opts.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/parse.h"
#include "glue.h"
#include "migrate/net.h"
#include "vmm/vm.h"

/* A number flag: 0, or -1 after a message naming the flag and its range. */
static int parse_num(const char *opt, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	if (!parse_u64(v, min, max, out))
		return 0;
	pr_vmm("%s: '%s' is not a number from %llu to %llu\n", opt, v, (unsigned long long)min,
	       (unsigned long long)max);
	return -1;
}

/* A flag of the tunables' table (migrate/params.h): 1, or -1 after a message. */
static int parse_param(int argc, char **argv, int *i, int p, struct migrate_vmm_opts *o)
{
	const char *a = argv[*i];
	char err[200];

	if (mig_param_defs[p].is_bool) {
		o->param[p] = 1;
		return 1;
	}
	if (*i + 1 >= argc) {
		pr_vmm("%s needs a value\n", a);
		return -1;
	}
	if (mig_param_parse(p, a, argv[++*i], &o->param[p], err, sizeof(err))) {
		pr_vmm("%s\n", err);
		return -1;
	}
	return 1;
}

/* Where a string flag's value goes; NULL if a is not one. */
static const char **string_flag(struct migrate_vmm_opts *o, const char *a)
{
	const struct {
		const char *flag;
		const char **value;
	} flags[] = {
		{ "--incoming", &o->incoming },		{ "--control", &o->control },
		{ "--migrate-to", &o->migrate_to },	{ "--migrate-metrics", &o->metrics },
		{ "--tls-creds", &o->tls_creds },	{ "--tls-psk", &o->tls_psk },
		{ "--tls-hostname", &o->tls_hostname },
	};

	for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++)
		if (!strcmp(a, flags[k].flag))
			return flags[k].value;
	return NULL;
}

void migrate_usage(FILE *f)
{
	fprintf(f, "  migration (docs/migration.md): [--incoming URI|defer] [--control SOCKET]\n"
		   "               [--migrate-to URI --migrate-after MS] [--migrate-metrics FILE]\n"
		   "               [--tls-creds DIR | --tls-psk FILE] [--tls-hostname NAME]\n"
		   "               URI: tcp:HOST:PORT, tcp:[IPV6]:PORT, tcp::PORT (any address,\n"
		   "               --incoming only) or unix:PATH; defer: QMP migrate-incoming\n");
	/* The tunables from their one table (migrate/params.h), three to a line. */
	for (int p = 0; p < MIG_P_NR; p++)
		fprintf(f, "%s[%s%s]%s", p % 3 ? " " : "               ", mig_param_defs[p].flag,
			mig_param_defs[p].is_bool ? "" : " N",
			p % 3 == 2 || p == MIG_P_NR - 1 ? "\n" : "");
}

int migrate_parse_opt(int argc, char **argv, int *i, struct migrate_vmm_opts *o)
{
	const char *a = argv[*i];
	const char **str = string_flag(o, a);
	int p = mig_param_by_flag(a);

	if (p >= 0)
		return parse_param(argc, argv, i, p, o);
	if (!str && strcmp(a, "--migrate-after"))
		return 0;
	if (*i + 1 >= argc) {
		pr_vmm("%s needs a value\n", a);
		return -1;
	}
	const char *v = argv[++*i];
	if (str) {
		*str = v;
	} else if (parse_num(a, v, 1, PARSE_AFTER_MS_MAX, &o->migrate_after_ms)) {
		return -1;
	}
	return 1;
}

int glue_check_tls_files(const struct migrate_vmm_opts *o)
{
	const struct mig_tls_opts t = { .creds_dir = o->tls_creds,
					.psk_file = o->tls_psk,
					.hostname = o->tls_hostname ? o->tls_hostname : "-" };
	struct mig_tls_ctx *ctx;
	char err[400];

	if (!o->tls_creds && !o->tls_psk)
		return 0;
	if (mig_tls_ctx_new(&t, o->incoming != NULL, &ctx, err, sizeof(err))) {
		pr_vmm("TLS: %s\n", err);
		return -EINVAL;
	}
	mig_tls_ctx_free(ctx);
	return 0;
}

int glue_check_uri(const char *uri, bool listen, char *err, size_t errlen)
{
	struct mig_addr a;

	if (mig_addr_parse(uri, &a, err, errlen))
		return -EINVAL;
	if (a.any && !listen) {
		snprintf(err, errlen, "'%.200s' names any address: only --incoming listens on one",
			 uri);
		return -EINVAL;
	}
	return 0;
}

int migrate_check_opts(const struct migrate_vmm_opts *o)
{
	char err[400];

	int defer = o->incoming && !strcmp(o->incoming, GLUE_INCOMING_DEFER);

	if ((o->incoming && !defer && glue_check_uri(o->incoming, true, err, sizeof(err))) ||
	    (o->migrate_to && glue_check_uri(o->migrate_to, false, err, sizeof(err)))) {
		pr_vmm("%s: %s\n", o->incoming ? "--incoming" : "--migrate-to", err);
		return -EINVAL;
	}
	if (o->incoming && o->migrate_to) {
		pr_vmm("--incoming cannot be combined with --migrate-to\n");
		return -EINVAL;
	}
	if (defer && !o->control) {
		pr_vmm("--incoming defer needs --control (migrate-incoming gives the URI)\n");
		return -EINVAL;
	}
	if (o->param[MIG_P_POSTCOPY_MANUAL] && !o->control) {
		pr_vmm("--postcopy-manual needs --control (migrate-start-postcopy ends precopy)\n");
		return -EINVAL;
	}
	if (!!o->migrate_to != !!o->migrate_after_ms) {
		pr_vmm("--migrate-to and --migrate-after go together\n");
		return -EINVAL;
	}
	if (o->tls_creds && o->tls_psk) {
		pr_vmm("--tls-creds and --tls-psk exclude each other: x509 or a PSK\n");
		return -EINVAL;
	}
	if (o->tls_hostname && !o->tls_creds) {
		pr_vmm("--tls-hostname needs --tls-creds\n");
		return -EINVAL;
	}
	if (o->control && strlen(o->control) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		pr_vmm("--control: a path of %zu bytes: a unix socket's holds at most %zu\n",
		       strlen(o->control), sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -EINVAL;
	}
	return 0;
}

struct mig_opts glue_lib_opts(const struct migrate_glue *gl, const char *addr)
{
	struct mig_opts m = {
		.addr = addr,
		.precopy_rounds = (int)gl->o->param[MIG_P_PRECOPY_ROUNDS],
		.compress = (int)gl->o->param[MIG_P_COMPRESS],
		.recover_ms = (int)gl->o->param[MIG_P_RECOVER_MS],
		.channels = (unsigned)gl->o->param[MIG_P_CHANNELS],
		.metrics = gl->o->metrics,
		.progress = isatty(2),
		.tls = { .creds_dir = gl->o->tls_creds,
			 .psk_file = gl->o->tls_psk,
			 .hostname = gl->o->tls_hostname },
	};
	return m;
}

unsigned glue_regions(struct vm *vm, struct mig_region *out)
{
	struct vm_ram_region r[VM_MAX_RAM_REGIONS];
	unsigned n = vm_ram_regions(vm, r);

	_Static_assert(VM_MAX_RAM_REGIONS <= MIG_MAX_REGIONS, "LAYOUT holds every region");
	for (unsigned i = 0; i < n; i++)
		out[i] = (struct mig_region){ .gpa = r[i].gpa, .size = r[i].size };
	return n;
}
