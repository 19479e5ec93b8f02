// SPDX-License-Identifier: GPL-2.0
/*
 * qemu-postcopy: the QEMU baseline of the benchmark.  Drives QEMU's own
 * postcopy-ram migration of the project's guest program between two
 * libvirtd instances on this host, through libvirt's C API:
 *
 *   1. create a transient domain (KVM with qboot and -cpu qemu64, or TCG:
 *      --accel) on the source daemon that boots the
 *      guest through its multiboot header (<os><kernel>), serial to a file;
 *   2. once the guest printed the --start-text line (default: its start line)
 *      and --start-after-ms passed,
 *      virDomainMigrateToURI3(VIR_MIGRATE_LIVE | PEER2PEER | POSTCOPY) to
 *      the destination daemon over tcp://127.0.0.1:PORT (in a thread);
 *   3. after --precopy-ms of precopy, virDomainMigrateStartPostCopy();
 *   4. collect the source's completed-job statistics (the JOB_COMPLETED
 *      event), the destination's query-migrate (through
 *      virDomainQemuMonitorCommand, while its domain still runs) and the
 *      guest's final checksum from the destination's serial file.
 *
 * With --trace, both QEMUs log the postcopy trace events with timestamps
 * (log back end, -msg timestamp=on) to TRACE-src.log/TRACE-dst.log, from
 * which bench/run computes per-fault latencies and the downtime on one clock.
 *
 * One JSON object on stdout; progress on stderr.  Exit 0 when the migration
 * completed and the guest printed its final checksum at the destination,
 * 1 otherwise (the JSON then has "error").
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <libvirt/libvirt-qemu.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "common/clock.h"

struct opts {
	const char *src_uri;
	const char *dst_uri;
	const char *guest;
	const char *cmdline;
	const char *workdir;
	const char *start_text;
	unsigned long mem_mib;
	int port;
	long start_after_ms;
	long precopy_ms;
	long timeout_s;
	const char *trace; /* comma-separated QEMU trace events, or NULL */
	bool kvm;	   /* --accel kvm: domain type kvm, qboot, -cpu qemu64 */
	bool tls;	   /* --tls: VIR_MIGRATE_TLS (x509 in each daemon's qemu.conf dir) */
};

/* What the run found; printed as JSON at the end. */
struct result {
	char name[64];
	char uuid[40];
	char error[512];
	json_object *completed_stats;	 /* from the JOB_COMPLETED event */
	json_object *dest_query_migrate; /* the destination's QMP reply */
	char checksum[32];
	double t_boot_ms;	    /* domain created -> guest start line */
	double t_migrate_call_ms;   /* migration call: start -> return */
	double t_precopy_start_ms;  /* migration start -> first memory moved */
	double t_postcopy_after_ms; /* migration start -> StartPostCopy returned */
	double t_complete_ms;	    /* migration start -> JOB_COMPLETED event */
	double t_guest_done_ms;	    /* migration start -> checksum line at the destination */
	int migrate_ret;
	bool postcopy_started;
	char postcopy_error[256];
};

static struct result res = { .migrate_ret = -1 };
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static bool ev_completed;
static volatile int ev_quit;

/* The one clock (common/clock.h), in fractional milliseconds. */
static double now_msf(void)
{
	return (double)now_ns() / 1e6;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "qemu-postcopy: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Record the first error (with libvirt's last message, if any). */
static void set_error(const char *what)
{
	const char *msg = virGetLastErrorMessage();

	if (res.error[0])
		return;
	snprintf(res.error, sizeof(res.error), "%s%s%s", what, msg ? ": " : "", msg ? msg : "");
	progress("error: %s", res.error);
}

/* A growing string buffer. */
struct sbuf {
	char *s;
	size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			abort();
		if ((size_t)n < room) {
			b->len += n;
			return;
		}
		b->cap = (b->cap + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
		if (!b->s)
			abort();
	}
}

/* libvirt's typed parameters as one JSON object. */
static json_object *typed_params_json(virTypedParameterPtr p, int n)
{
	json_object *o = json_object_new_object();

	for (int i = 0; i < n; i++) {
		json_object *v = NULL;

		switch (p[i].type) {
		case VIR_TYPED_PARAM_INT:
			v = json_object_new_int(p[i].value.i);
			break;
		case VIR_TYPED_PARAM_UINT:
			v = json_object_new_int64(p[i].value.ui);
			break;
		case VIR_TYPED_PARAM_LLONG:
			v = json_object_new_int64(p[i].value.l);
			break;
		case VIR_TYPED_PARAM_ULLONG:
			v = json_object_new_uint64(p[i].value.ul);
			break;
		case VIR_TYPED_PARAM_DOUBLE:
			v = json_object_new_double(p[i].value.d);
			break;
		case VIR_TYPED_PARAM_BOOLEAN:
			v = json_object_new_boolean(p[i].value.b);
			break;
		case VIR_TYPED_PARAM_STRING:
			v = json_object_new_string(p[i].value.s);
			break;
		}
		json_object_object_add(o, p[i].field, v);
	}
	return o;
}

/* The source daemon reports the finished job (with its statistics) here. */
static void on_job_completed(virConnectPtr conn, virDomainPtr dom, virTypedParameterPtr params,
			     int nparams, void *opaque)
{
	if (strcmp(virDomainGetName(dom), res.name))
		return;
	pthread_mutex_lock(&ev_lock);
	if (!res.completed_stats)
		res.completed_stats = typed_params_json(params, nparams);
	ev_completed = true;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
}

/* Errors are reported once, with context, by set_error(): not by libvirt. */
static void quiet_errors(void *opaque, virErrorPtr err)
{
}

static void *event_loop(void *arg)
{
	while (!ev_quit)
		if (virEventRunDefaultImpl() < 0)
			break;
	return NULL;
}

/* Whole file as a string (NULL if unreadable). */
static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	struct sbuf b = { 0 };
	char buf[4096];
	size_t n;

	if (!f)
		return NULL;
	sb_printf(&b, "%s", "");
	while ((n = fread(buf, 1, sizeof(buf) - 1, f)) > 0) {
		buf[n] = 0;
		sb_printf(&b, "%s", buf);
	}
	fclose(f);
	return b.s;
}

/* Wait until PATH contains NEEDLE; copy the rest of that line to LINE. */
static bool wait_for_text(const char *path, const char *needle, char *line, size_t len,
			  long timeout_ms)
{
	double end = now_msf() + timeout_ms;

	do {
		char *s = read_file(path), *p = s ? strstr(s, needle) : NULL;
		size_t k = p ? strcspn(p, "\r\n") : 0;

		/* Only a whole line: the guest may be in the middle of it. */
		if (p && p[k]) {
			if (line)
				snprintf(line, len, "%.*s", (int)k, p);
			free(s);
			return true;
		}
		free(s);
		sleep_ms(20);
	} while (now_msf() < end);
	return false;
}

/*
 * Under KVM, this host's PVM emulates ring-0 and real-mode guest code, so
 * the firmware must be short: qboot (-bios), not SeaBIOS (~4 s).  The CPU
 * model is a named one: -cpu host and max abort here (QEMU cannot set
 * IA32_ARCH_CAPABILITIES); check='none' because KVM's CPUID here lacks
 * SSE3, which qemu64 lists (QEMU warns and runs without it).
 */
static const char kvm_os_cpu[] =
    "    <loader type='rom' readonly='yes'>/usr/share/qemu/qboot.rom</loader>\n"
    "  </os>\n"
    "  <cpu mode='custom' match='exact' check='none'>"
    "<model fallback='forbid'>qemu64</model></cpu>\n";

/* -D names the log back end's file; one -trace per event of --trace. */
static void trace_args(struct sbuf *b, const struct opts *o, const char *side)
{
	const char *p = o->trace;

	sb_printf(b,
		  "    <qemu:arg value='-msg'/><qemu:arg value='timestamp=on'/>\n"
		  "    <qemu:arg value='-D'/><qemu:arg value='%s/trace-%s.log'/>\n",
		  o->workdir, side);
	while (*p) {
		size_t n = strcspn(p, ",");

		if (n)
			sb_printf(b,
				  "    <qemu:arg value='-trace'/>"
				  "<qemu:arg value='enable=%.*s'/>\n",
				  (int)n, p);
		p += n + (p[n] == ',');
	}
}

static char *domain_xml(const struct opts *o, const char *side)
{
	struct sbuf b = { 0 };

	sb_printf(&b,
		  "<domain type='%s' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
		  "  <name>%s</name>\n  <uuid>%s</uuid>\n"
		  "  <memory unit='MiB'>%lu</memory>\n  <vcpu>1</vcpu>\n"
		  "  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n"
		  "    <kernel>%s</kernel>\n    <cmdline>%s</cmdline>\n",
		  o->kvm ? "kvm" : "qemu", res.name, res.uuid, o->mem_mib, o->guest, o->cmdline);
	sb_printf(&b, "%s", o->kvm ? kvm_os_cpu : "  </os>\n");
	sb_printf(&b,
		  "  <on_poweroff>destroy</on_poweroff>\n  <on_crash>destroy</on_crash>\n"
		  "  <devices>\n"
		  "    <serial type='file'><source path='%s/serial-%s.log'/>"
		  "<target port='0'/></serial>\n"
		  "    <memballoon model='none'/>\n  </devices>\n"
		  "  <qemu:commandline>\n"
		  "    <qemu:arg value='-device'/>"
		  "<qemu:arg value='isa-debug-exit,iobase=0xf4,iosize=0x04'/>\n",
		  o->workdir, side);
	if (o->trace)
		/* -D names the log back end's file.  (QEMU 7.2 has no property
		 * for the postcopy-blocktime capability and libvirt does not set
		 * it: bench/run computes the blocktime from these events.) */
		trace_args(&b, o, side);
	sb_printf(&b, "  </qemu:commandline>\n</domain>\n");
	return b.s;
}

/* Replace every "-src." by "-dst." (serial and trace file names). */
static char *to_dest_xml(const char *xml)
{
	char *d = strdup(xml), *p;

	if (!d)
		abort();
	for (p = d; (p = strstr(p, "-src.")); p += 5)
		memcpy(p, "-dst.", 5);
	return d;
}

struct migrate_args {
	virDomainPtr dom;
	const char *dconnuri;
	char *dest_xml;
	int port;
	unsigned int extra_flags; /* VIR_MIGRATE_TLS with --tls */
	double t_start, t_end;
	volatile int done;
	int ret;
	char err[256];
};

static void *migrate_thread(void *arg)
{
	struct migrate_args *m = arg;
	virTypedParameterPtr params = NULL;
	int nparams = 0, maxparams = 0;
	char uri[64];

	snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", m->port);
	virTypedParamsAddString(&params, &nparams, &maxparams, VIR_MIGRATE_PARAM_URI, uri);
	virTypedParamsAddString(&params, &nparams, &maxparams, VIR_MIGRATE_PARAM_DEST_XML,
				m->dest_xml);
	m->t_start = now_msf();
	m->ret = virDomainMigrateToURI3(m->dom, m->dconnuri, params, nparams,
					VIR_MIGRATE_LIVE | VIR_MIGRATE_PEER2PEER |
					    VIR_MIGRATE_POSTCOPY | m->extra_flags);
	m->t_end = now_msf();
	if (m->ret < 0)
		snprintf(m->err, sizeof(m->err), "%s", virGetLastErrorMessage());
	virTypedParamsFree(params, nparams);
	__atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void random_uuid(char *out)
{
	unsigned char u[16];
	FILE *f = fopen("/dev/urandom", "r");

	if (!f || fread(u, 1, sizeof(u), f) != sizeof(u))
		abort();
	fclose(f);
	u[6] = (u[6] & 0x0f) | 0x40;
	u[8] = (u[8] & 0x3f) | 0x80;
	sprintf(out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
		u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		u[14], u[15]);
}

/* A string member, or null when empty. */
static void add_str(json_object *o, const char *key, const char *val)
{
	json_object_object_add(o, key, val && val[0] ? json_object_new_string(val) : NULL);
}

static void add_path(json_object *o, const char *key, const char *dir, const char *file)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	add_str(o, key, path);
}

static void print_result(const struct opts *o)
{
	json_object *j = json_object_new_object();
	unsigned long lv = 0;
	char ver[32];

	virGetVersion(&lv, NULL, NULL);
	snprintf(ver, sizeof(ver), "%lu.%lu.%lu", lv / 1000000, lv / 1000 % 1000, lv % 1000);
	add_str(j, "driver", "libvirt");
	add_str(j, "libvirt_version", ver);
	add_str(j, "accel", o->kvm ? "kvm" : "tcg");
	add_str(j, "domain", res.name);
	json_object_object_add(j, "mem_mib", json_object_new_uint64(o->mem_mib));
	add_str(j, "cmdline", o->cmdline);
	json_object_object_add(j, "start_after_ms", json_object_new_int64(o->start_after_ms));
	json_object_object_add(j, "precopy_ms", json_object_new_int64(o->precopy_ms));
	json_object_object_add(j, "migrate_ret", json_object_new_int(res.migrate_ret));
	json_object_object_add(j, "postcopy_started",
			       json_object_new_boolean(res.postcopy_started));
	add_str(j, "postcopy_error", res.postcopy_error);
	json_object_object_add(j, "t_boot_ms", json_object_new_double(res.t_boot_ms));
	json_object_object_add(j, "t_migrate_call_ms",
			       json_object_new_double(res.t_migrate_call_ms));
	json_object_object_add(j, "t_precopy_start_ms",
			       json_object_new_double(res.t_precopy_start_ms));
	json_object_object_add(j, "t_postcopy_after_ms",
			       json_object_new_double(res.t_postcopy_after_ms));
	json_object_object_add(j, "t_complete_ms", json_object_new_double(res.t_complete_ms));
	json_object_object_add(j, "t_guest_done_ms", json_object_new_double(res.t_guest_done_ms));
	json_object_object_add(j, "completed_stats", res.completed_stats);
	json_object_object_add(j, "dest_query_migrate", res.dest_query_migrate);
	res.completed_stats = res.dest_query_migrate = NULL; /* owned by j now */
	add_str(j, "checksum", res.checksum);
	add_path(j, "serial_src", o->workdir, "serial-src.log");
	add_path(j, "serial_dst", o->workdir, "serial-dst.log");
	if (o->trace) {
		add_path(j, "trace_src", o->workdir, "trace-src.log");
		add_path(j, "trace_dst", o->workdir, "trace-dst.log");
	}
	add_str(j, "error", res.error);
	puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY));
	json_object_put(j);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: qemu-postcopy --src URI --dst qemu+unix:///system?socket=PATH "
		"--guest FILE --mem MIB --cmdline STR\n"
		"                     --workdir DIR --port N [--start-text STR] "
		"[--start-after-ms 500]\n"
		"                     [--precopy-ms 500] [--timeout-s 300] [--trace EV,EV]\n"
		"                     [--accel kvm|tcg] [--tls]\n");
	exit(2);
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "src", required_argument, NULL, 's' },
		{ "dst", required_argument, NULL, 'd' },
		{ "guest", required_argument, NULL, 'g' },
		{ "mem", required_argument, NULL, 'm' },
		{ "cmdline", required_argument, NULL, 'c' },
		{ "workdir", required_argument, NULL, 'w' },
		{ "port", required_argument, NULL, 'p' },
		{ "start-after-ms", required_argument, NULL, 'a' },
		{ "start-text", required_argument, NULL, 'S' },
		{ "precopy-ms", required_argument, NULL, 'P' },
		{ "timeout-s", required_argument, NULL, 't' },
		{ "trace", required_argument, NULL, 'T' },
		{ "accel", required_argument, NULL, 'A' },
		{ "tls", no_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*o = (struct opts){ .start_after_ms = 500,
			    .precopy_ms = 500,
			    .timeout_s = 300,
			    .start_text = "guest: workload=" };
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			o->src_uri = optarg;
			break;
		case 'd':
			o->dst_uri = optarg;
			break;
		case 'g':
			o->guest = optarg;
			break;
		case 'm':
			o->mem_mib = strtoul(optarg, NULL, 0);
			break;
		case 'c':
			o->cmdline = optarg;
			break;
		case 'w':
			o->workdir = optarg;
			break;
		case 'p':
			o->port = atoi(optarg);
			break;
		case 'a':
			o->start_after_ms = atol(optarg);
			break;
		case 'S':
			o->start_text = optarg;
			break;
		case 'P':
			o->precopy_ms = atol(optarg);
			break;
		case 't':
			o->timeout_s = atol(optarg);
			break;
		case 'T':
			o->trace = optarg;
			break;
		case 'L':
			o->tls = true;
			break;
		case 'A':
			if (strcmp(optarg, "kvm") && strcmp(optarg, "tcg"))
				usage();
			o->kvm = !strcmp(optarg, "kvm");
			break;
		default:
			usage();
		}
	}
	if (!o->src_uri || !o->dst_uri || !o->guest || !o->mem_mib || !o->cmdline || !o->workdir ||
	    o->port <= 0 || o->port > 65535 || optind != argc)
		usage();
	if (strchr(o->cmdline, '<') || strchr(o->cmdline, '&') || strchr(o->cmdline, '\'') ||
	    strchr(o->guest, '<') || strchr(o->workdir, '<') || strchr(o->workdir, '\'') ||
	    (o->trace && (strchr(o->trace, '<') || strchr(o->trace, '\'')))) {
		fprintf(stderr, "qemu-postcopy: no XML metacharacters in "
				"--cmdline/--guest/--workdir/--trace\n");
		exit(2);
	}
}

static bool migration_done(struct migrate_args *m)
{
	return __atomic_load_n(&m->done, __ATOMIC_ACQUIRE);
}

static void postcopy_refused(void)
{
	/* Precopy may complete first (QEMU 7.2 ends a migration whose first
	 * pass took under 100 ms, before it measured the bandwidth): not an
	 * error, but no postcopy either. */
	snprintf(res.postcopy_error, sizeof(res.postcopy_error), "%s", virGetLastErrorMessage());
	progress("no postcopy: virDomainMigrateStartPostCopy: %s", res.postcopy_error);
}

/* Pure postcopy (as far as QEMU goes): ask from the start, again until QEMU
 * takes it (refused before its migration runs: "Enable postcopy with
 * migrate_set_capability before the start of migration"). */
static void start_postcopy_at_once(struct migrate_args *m, virDomainPtr dom, double t0)
{
	double deadline = t0 + 30000;

	char last[256] = "";

	while (now_msf() < deadline && !migration_done(m)) {
		const char *why;

		if (virDomainMigrateStartPostCopy(dom, 0) == 0) {
			res.postcopy_started = true;
			res.t_postcopy_after_ms = now_msf() - t0;
			progress("postcopy requested after %.0f ms", res.t_postcopy_after_ms);
			return;
		}
		why = virGetLastErrorMessage();
		if (strcmp(why, last)) {
			progress("%.0f ms: not yet: %s", now_msf() - t0, why);
			snprintf(last, sizeof(last), "%s", why);
		}
		sleep_ms(2);
	}
	postcopy_refused();
}

/* Precopy then postcopy: wait until QEMU moves memory (the libvirt job
 * exists earlier, while the destination is prepared), keep the downtime
 * limit at 1 ms so that precopy does not end by itself, and switch to
 * postcopy precopy_ms later. */
static void start_postcopy_after(const struct opts *o, struct migrate_args *m, virDomainPtr dom,
				 double t0)
{
	double deadline = t0 + 30000, t_mem;
	bool moving = false;
	long left;

	while (now_msf() < deadline && !migration_done(m)) {
		virTypedParameterPtr st = NULL;
		int nst = 0, type = 0;
		unsigned long long processed = 0;

		if (virDomainGetJobStats(dom, &type, &st, &nst, 0) == 0) {
			virTypedParamsGetULLong(st, nst, VIR_DOMAIN_JOB_MEMORY_PROCESSED,
						&processed);
			virTypedParamsFree(st, nst);
		}
		if (type == VIR_DOMAIN_JOB_UNBOUNDED && processed > 0) {
			moving = true;
			break;
		}
		sleep_ms(2);
	}
	if (!moving) {
		if (!migration_done(m))
			set_error("the migration job never started");
		return;
	}
	t_mem = now_msf();
	res.t_precopy_start_ms = t_mem - t0;
	/* libvirt re-applies its own migration parameters when the job starts. */
	if (virDomainMigrateSetMaxDowntime(dom, 1, 0) < 0)
		progress("warning: virDomainMigrateSetMaxDowntime: %s", virGetLastErrorMessage());
	progress("precopy moving after %.0f ms", res.t_precopy_start_ms);
	left = o->precopy_ms - (long)(now_msf() - t_mem);
	if (left > 0)
		sleep_ms(left);
	if (virDomainMigrateStartPostCopy(dom, 0) == 0) {
		res.postcopy_started = true;
		res.t_postcopy_after_ms = now_msf() - t0;
		progress("postcopy requested after %.0f ms", res.t_postcopy_after_ms);
	} else {
		postcopy_refused();
	}
}

/* The migration itself: returns when the job completed (or failed). */
static void run_migration(const struct opts *o, virConnectPtr src, virConnectPtr dst,
			  virDomainPtr dom, const char *xml)
{
	struct migrate_args m = { .dom = dom,
				  .dconnuri = o->dst_uri,
				  .port = o->port,
				  .extra_flags = o->tls ? VIR_MIGRATE_TLS : 0 };
	char *live_xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_MIGRATABLE);
	double t0, deadline;
	pthread_t th;

	/* The destination gets the source's own migratable definition (so the
	 * ABI check passes), only with its own serial and trace files. */
	m.dest_xml = to_dest_xml(live_xml ? live_xml : xml);
	free(live_xml);
	/* Precopy must not converge by itself before the switch to postcopy
	 * (a small guest otherwise completes in precopy): allow 1 ms of
	 * precopy downtime only. */
	if (virDomainMigrateSetMaxDowntime(dom, 1, 0) < 0)
		progress("warning: virDomainMigrateSetMaxDowntime: %s", virGetLastErrorMessage());
	t0 = now_msf();
	progress("migrate %s to %s (tcp://127.0.0.1:%d), postcopy after %ld ms", res.name,
		 o->dst_uri, o->port, o->precopy_ms);
	if (pthread_create(&th, NULL, migrate_thread, &m))
		abort();

	if (o->precopy_ms == 0)
		start_postcopy_at_once(&m, dom, t0);
	else
		start_postcopy_after(o, &m, dom, t0);
	pthread_join(th, NULL);
	res.migrate_ret = m.ret;
	res.t_migrate_call_ms = m.t_end - m.t_start;
	if (m.ret < 0) {
		char what[300];

		snprintf(what, sizeof(what), "virDomainMigrateToURI3: %s", m.err);
		if (!res.error[0])
			snprintf(res.error, sizeof(res.error), "%s", what);
		progress("error: %s", what);
	}
	free(m.dest_xml);

	/* The completed-job event (source side statistics). */
	pthread_mutex_lock(&ev_lock);
	deadline = now_msf() + 1000.0 * o->timeout_s;
	while (!ev_completed && now_msf() < deadline && m.ret == 0) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&ev_cond, &ev_lock, &ts);
	}
	if (ev_completed)
		res.t_complete_ms = now_msf() - t0;
	pthread_mutex_unlock(&ev_lock);
	if (m.ret == 0 && !ev_completed)
		set_error("no JOB_COMPLETED event from the source daemon");

	/* The destination's own query-migrate, kept for the record.  The
	 * domain may be gone already: a short guest can finish (and exit
	 * through isa-debug-exit) before a slow TLS postcopy's completion
	 * event reaches us.  That is no error; the checksum below decides. */
	if (m.ret == 0) {
		virDomainPtr ddom = virDomainLookupByName(dst, res.name);
		char *reply = NULL;

		if (!ddom)
			progress("the domain had already exited at the destination");
		else if (virDomainQemuMonitorCommand(ddom, "{\"execute\":\"query-migrate\"}",
						     &reply, 0) < 0)
			progress("destination query-migrate failed: %s", virGetLastErrorMessage());
		else
			res.dest_query_migrate = json_tokener_parse(reply);
		free(reply);
		if (ddom)
			virDomainFree(ddom);
	}

	/* The guest's result, printed at the destination. */
	if (m.ret == 0) {
		char path[4096], line[256];

		snprintf(path, sizeof(path), "%s/serial-dst.log", o->workdir);
		if (wait_for_text(path, "guest: done ", line, sizeof(line), 1000 * o->timeout_s)) {
			char *c = strstr(line, "checksum=");

			res.t_guest_done_ms = now_msf() - t0;
			if (c)
				snprintf(res.checksum, sizeof(res.checksum), "%.*s",
					 (int)strcspn(c + 9, " \r\n"), c + 9);
			progress("guest done at the destination: %s", line);
		} else {
			set_error("the guest printed no final checksum at the destination");
		}
	}
}

int main(int argc, char **argv)
{
	struct opts o;
	virConnectPtr src = NULL, dst = NULL;
	virDomainPtr dom = NULL;
	pthread_t evth;
	char *xml = NULL;
	int cb = -1;

	parse_opts(argc, argv, &o);
	snprintf(res.name, sizeof(res.name), "pcbench-%lu-%d", o.mem_mib, (int)getpid());
	random_uuid(res.uuid);

	virSetErrorFunc(NULL, quiet_errors);
	if (virEventRegisterDefaultImpl() < 0) {
		set_error("virEventRegisterDefaultImpl");
		goto out;
	}
	if (pthread_create(&evth, NULL, event_loop, NULL))
		abort();
	src = virConnectOpen(o.src_uri);
	if (!src) {
		set_error("cannot connect to the source libvirtd");
		goto out;
	}
	dst = virConnectOpen(o.dst_uri);
	if (!dst) {
		set_error("cannot connect to the destination libvirtd");
		goto out;
	}
	cb = virConnectDomainEventRegisterAny(src, NULL, VIR_DOMAIN_EVENT_ID_JOB_COMPLETED,
					      VIR_DOMAIN_EVENT_CALLBACK(on_job_completed), NULL,
					      NULL);
	if (cb < 0) {
		set_error("virConnectDomainEventRegisterAny(JOB_COMPLETED)");
		goto out;
	}

	xml = domain_xml(&o, "src");
	{
		double t = now_msf();
		char path[4096];

		dom = virDomainCreateXML(src, xml, 0);
		if (!dom) {
			set_error("virDomainCreateXML on the source");
			goto out;
		}
		snprintf(path, sizeof(path), "%s/serial-src.log", o.workdir);
		if (!wait_for_text(path, o.start_text, NULL, 0, 1000 * o.timeout_s)) {
			set_error("the guest never printed the --start-text line at the source");
			goto out;
		}
		res.t_boot_ms = now_msf() - t;
		progress("guest printed '%s' at the source after %.0f ms", o.start_text,
			 res.t_boot_ms);
	}
	sleep_ms(o.start_after_ms);
	run_migration(&o, src, dst, dom, xml);

out:
	if (dom) {
		virDomainDestroy(dom); /* a no-op once it migrated */
		virDomainFree(dom);
	}
	if (dst) {
		virDomainPtr d = virDomainLookupByName(dst, res.name);

		if (d) {
			virDomainDestroy(d);
			virDomainFree(d);
		}
	}
	if (src && cb >= 0)
		virConnectDomainEventDeregisterAny(src, cb);
	ev_quit = 1;
	if (src)
		virConnectClose(src);
	if (dst)
		virConnectClose(dst);
	virResetLastError();
	print_result(&o);
	free(xml);
	return res.error[0] ? 1 : 0;
}
