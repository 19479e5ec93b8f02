// SPDX-License-Identifier: GPL-2.0
/*
 * The migration library bound to the VMM (vmm/include/vmm/vm.h, ram.h):
 * the source side reads guest RAM and pauses/saves the VM; the destination
 * side is the lazy RAM's page source, installs pages through the RAM back
 * end and loads the state.  Also the control socket `migrate-agent migrate`
 * talks to.  See vmm/include/vmm/migrate.h for where `vmm run` calls in.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/parse.h"
#include "migrate/migrate.h"
#include "migrate/net.h"
#include "vmm/migrate.h"
#include "vmm/qmp.h"
#include "vmm/ram.h"
#include "vmm/vm.h"

#define pr_vmm(...) fprintf(stderr, "vmm: " __VA_ARGS__)

/* Options for the next migration (migrate-set-parameters), under gl->lock. */
struct glue_params {
	uint64_t param[MIG_P_NR];
	char tls_creds[512], tls_psk[512], tls_hostname[256], metrics[512];
};

/*
 * The migration of one `vmm run`: created by migrate_prepare(), kept in
 * migrate_vmm_opts.glue, freed by migrate_finish().  lock/cond guard
 * finishing, the control API's params, mig_on and user_paused.
 */
struct migrate_glue {
	struct vm *vm;
	struct migrate_vmm_opts *o;
	struct mig_dest *dest;
	struct mig_dest_vm dest_vm;
	pthread_t watch, timer, mig_thread;
	int watch_on, timer_on;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int finishing;
	/* The control API (--control): see "The control API" below. */
	struct qmp_server *qmp;
	struct glue_params params, run_params; /* the next migration's; the running one's */
	struct mig_opts mig_opts;	       /* the running one's, pointing into run_params */
	struct mig_ctl ctl;
	char uri[256];
	int mig_on;		      /* a migration thread was started (join it) */
	int user_paused;	      /* stopped by the QMP command stop */
	struct incoming_signals *sig; /* the destination's signal watch, until its vCPUs run */
};

/* A number flag: 0, or -1 after a message naming the flag and its range. */
static int parse_num(const char *opt, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	if (!parse_u64(v, min, max, out))
		return 0;
	pr_vmm("%s: '%s' is not a number from %llu to %llu\n", opt, v, (unsigned long long)min,
	       (unsigned long long)max);
	return -1;
}

int migrate_parse_opt(int argc, char **argv, int *i, struct migrate_vmm_opts *o)
{
	const char *a = argv[*i];
	static const char *const with_value[] = { "--incoming",	       "--control",
						  "--migrate-to",      "--migrate-after",
						  "--migrate-metrics", "--tls-creds",
						  "--tls-psk",	       "--tls-hostname",
						  "--migrate-spin-us" };
	uint64_t n;
	char err[200];
	int p = mig_param_by_flag(a);
	if (p >= 0 && mig_param_defs[p].is_bool) {
		o->param[p] = 1;
		return 1;
	}
	if (p >= 0) {
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
	int known = 0;
	for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
		known |= !strcmp(a, with_value[k]);
	if (!known)
		return 0;
	if (*i + 1 >= argc) {
		pr_vmm("%s needs a value\n", a);
		return -1;
	}
	const char *v = argv[++*i];
	if (!strcmp(a, "--incoming")) {
		o->incoming = v;
	} else if (!strcmp(a, "--control")) {
		o->control = v;
	} else if (!strcmp(a, "--migrate-to")) {
		o->migrate_to = v;
	} else if (!strcmp(a, "--migrate-metrics")) {
		o->metrics = v;
	} else if (!strcmp(a, "--tls-creds")) {
		o->tls_creds = v;
	} else if (!strcmp(a, "--tls-psk")) {
		o->tls_psk = v;
	} else if (!strcmp(a, "--tls-hostname")) {
		o->tls_hostname = v;
	} else if (!strcmp(a, "--migrate-after")) {
		if (parse_num(a, v, 1, PARSE_AFTER_MS_MAX, &o->migrate_after_ms))
			return -1;
	} else if (!strcmp(a, "--migrate-spin-us")) {
		if (parse_num(a, v, 0, MIG_SPIN_MAX_US, &n))
			return -1;
		o->spin_us = (unsigned)n;
	}
	return 1;
}

/* ---- Destination ---- */

static int dst_load(void *ctx, const void *blob, size_t len)
{
	struct migrate_glue *gl = ctx;
	char why[256] = "";
	int r = vm_state_load(gl->vm, blob, len, why, sizeof(why));

	if (r < 0)
		fprintf(stderr, "vmm: cannot load the migrated state: %s\n", why);
	return r;
}

static void write_dest_metrics(struct migrate_glue *gl)
{
	if (!gl->o->metrics)
		return;
	FILE *f = strcmp(gl->o->metrics, "-") ? fopen(gl->o->metrics, "w") : stdout;
	if (!f) {
		pr_vmm("cannot write %s: %s\n", gl->o->metrics, strerror(errno));
		return;
	}
	mig_dest_report(gl->dest, f);
	if (f != stdout)
		fclose(f);
}

/*
 * Watches the incoming migration.  A failure means pages are missing for
 * good: the process ends here, so no vCPU ever runs on with wrong memory
 * (disarming the RAM would let the kernel fill the holes with zeroes).
 */
static void *watch_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	char err[400];
	if (mig_dest_wait(gl->dest, err, sizeof(err))) {
		pr_vmm("incoming migration failed: %s\n", err);
		write_dest_metrics(gl);
		fflush(NULL);
		_exit(1);
	}
	write_dest_metrics(gl);
	pr_vmm("incoming migration complete: all %llu pages arrived\n",
	       (unsigned long long)ram_nr_pages(vm_ram(gl->vm)));
	return arg;
}

static struct mig_opts lib_opts(struct migrate_glue *gl, const char *addr)
{
	struct mig_opts m = {
		.addr = addr,
		.precopy_rounds = (int)gl->o->param[MIG_P_PRECOPY_ROUNDS],
		.compress = (int)gl->o->param[MIG_P_COMPRESS],
		.recover_ms = (int)gl->o->param[MIG_P_RECOVER_MS],
		.spin_us = gl->o->spin_us,
		.metrics = gl->o->metrics,
		.progress = isatty(2),
		.tls = { .creds_dir = gl->o->tls_creds,
			 .psk_file = gl->o->tls_psk,
			 .hostname = gl->o->tls_hostname },
	};
	return m;
}

/*
 * The TLS options make sense together, and their files load: checked when
 * the VMM starts, before anything connects (a source loads them again for
 * each migration: they may be renewed meanwhile).  0 or -EINVAL with a
 * message.
 */
static int check_tls(const struct migrate_vmm_opts *o)
{
	const struct mig_tls_opts t = { .creds_dir = o->tls_creds,
					.psk_file = o->tls_psk,
					.hostname = o->tls_hostname ? o->tls_hostname : "-" };
	struct mig_tls_ctx *ctx;
	char err[400];
	if (!o->tls_creds && !o->tls_psk) {
		if (o->tls_hostname)
			pr_vmm("--tls-hostname needs --tls-creds\n");
		return o->tls_hostname ? -EINVAL : 0;
	}
	if (o->tls_creds && o->tls_psk) {
		pr_vmm("--tls-creds and --tls-psk exclude each other: x509 or a PSK\n");
		return -EINVAL;
	}
	if (mig_tls_ctx_new(&t, o->incoming != NULL, &ctx, err, sizeof(err))) {
		pr_vmm("TLS: %s\n", err);
		return -EINVAL;
	}
	mig_tls_ctx_free(ctx);
	return 0;
}

/*
 * SIGINT/SIGTERM while the destination waits for its source and its state
 * (before runner_loop() watches signals): give the migration up cleanly.
 * The signals are blocked in every thread (vmm run blocks them first), so
 * they wait for this signalfd; stop_fd ends the watch when the state
 * arrived.
 */
struct incoming_signals {
	struct migrate_glue *gl;
	pthread_t thread;
	int stop_fd[2];
	unsigned signo; /* the signal that stopped the migration, 0 if none */
};

static void *incoming_signal_thread(void *arg)
{
	struct incoming_signals *is = arg;
	struct migrate_glue *gl = is->gl;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	struct pollfd p[2] = { { .fd = sfd, .events = POLLIN },
			       { .fd = is->stop_fd[0], .events = POLLIN } };
	while (sfd >= 0 && poll(p, 2, -1) < 0 && errno == EINTR)
		;
	struct signalfd_siginfo si;
	if (sfd >= 0 && (p[0].revents & POLLIN) && read(sfd, &si, sizeof(si)) == sizeof(si)) {
		char why[96];
		snprintf(why, sizeof(why), "stopped by signal %u before the migration completed",
			 si.ssi_signo);
		is->signo = si.ssi_signo;
		mig_dest_abort(gl->dest, why);
	}
	if (sfd >= 0)
		close(sfd);
	return NULL;
}

static int watch_incoming_signals(struct incoming_signals *is)
{
	is->signo = 0;
	if (pipe2(is->stop_fd, O_CLOEXEC))
		return -errno;
	int r = pthread_create(&is->thread, NULL, incoming_signal_thread, is);
	if (r) {
		close(is->stop_fd[0]);
		close(is->stop_fd[1]);
		return -r;
	}
	return 0;
}

static void unwatch_incoming_signals(struct incoming_signals *is)
{
	if (write(is->stop_fd[1], "", 1) < 0)
		pr_vmm("cannot stop the signal watch: %s\n", strerror(errno));
	pthread_join(is->thread, NULL);
	close(is->stop_fd[0]);
	close(is->stop_fd[1]);
	free(is);
}

/* After the vCPUs run (the join waits for a thread's wake-up: not in the downtime). */
static void stop_signal_watch(struct migrate_glue *gl)
{
	if (gl->sig)
		unwatch_incoming_signals(gl->sig);
	gl->sig = NULL;
}

/* The VM's RAM regions as LAYOUT carries them (RAM offsets follow in order). */
static unsigned glue_regions(struct vm *vm, struct mig_region *out)
{
	struct vm_ram_region r[VM_MAX_RAM_REGIONS];
	unsigned n = vm_ram_regions(vm, r);

	_Static_assert(VM_MAX_RAM_REGIONS <= MIG_MAX_REGIONS, "LAYOUT holds every region");
	for (unsigned i = 0; i < n; i++)
		out[i] = (struct mig_region){ .gpa = r[i].gpa, .size = r[i].size };
	return n;
}

static int prepare_incoming(struct migrate_glue *gl)
{
	struct vm *vm = gl->vm;
	char err[400];
	struct ram *ram = vm_ram(vm);
	struct mig_opts m = lib_opts(gl, gl->o->incoming);
	if (!ram_is_lazy(ram)) {
		pr_vmm("--incoming needs lazy RAM\n");
		return -EINVAL;
	}
	gl->dest = mig_dest_listen(&m, err, sizeof(err));
	if (!gl->dest) {
		pr_vmm("%s\n", err);
		return -EADDRINUSE;
	}
	if (!m.tls.creds_dir && !m.tls.psk_file)
		pr_vmm("warning: plain TCP (no --tls-creds or --tls-psk): anyone who can reach "
		       "%s can send this VMM a VM, and anyone on the path can read the guest's "
		       "memory and the session secret (docs/security.md)\n",
		       gl->o->incoming);
	/*
	 * The RAM owns the source (and destroys it in ram_exit(), after
	 * migrate_finish()); it is only asked for pages while the fault thread
	 * runs, which migrate_finish() stops first.
	 */
	struct ram_source *src = mig_dest_page_source(gl->dest);
	if (!src)
		return -ENOMEM;
	int r = ram_start_faults(ram, src, gl->o->busy_poll);
	if (r < 0) {
		if (!ram_owns_source(ram, src)) /* else the RAM destroys it */
			src->destroy(src);
		pr_vmm("cannot start the fault thread: %s\n", strerror(-r));
		return r;
	}
	gl->dest_vm = (struct mig_dest_vm){
		.ctx = gl,
		.ram = ram,
		.load_state = dst_load,
	};
	gl->dest_vm.nr_regions = glue_regions(gl->vm, gl->dest_vm.regions);
	/*
	 * The vCPU threads exist before the state arrives, parked: at the
	 * switch-over only the state load and a wake-up remain
	 * (migrate_started() resumes them; vm_start() starts no thread twice).
	 */
	r = vm_pause(gl->vm);
	if (!r)
		r = vm_start(gl->vm);
	if (r) {
		pr_vmm("cannot start the vCPU threads: %s\n", strerror(-r));
		return r;
	}
	pr_vmm("waiting for an incoming migration on %s\n", gl->o->incoming);
	struct incoming_signals *is = calloc(1, sizeof(*is));
	r = is ? 0 : -ENOMEM;
	if (is) {
		is->gl = gl;
		r = watch_incoming_signals(is);
	}
	if (r) {
		free(is);
		pr_vmm("cannot watch for signals: %s\n", strerror(-r));
		return r;
	}
	gl->sig = is;
	r = mig_dest_incoming(gl->dest, &gl->dest_vm, err, sizeof(err));
	if (r)
		stop_signal_watch(gl);
	if (r) {
		pr_vmm("incoming migration failed: %s\n", err);
		write_dest_metrics(gl);
		ram_stop_faults(ram);
		mig_dest_free(gl->dest);
		gl->dest = NULL;
		return r;
	}
	return 0;
}

/* ---- Source ---- */

static int s_pause(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_pause(gl->vm);
}

static int s_resume(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_resume(gl->vm);
}

static int s_save(void *ctx, void **blob, size_t *len)
{
	struct migrate_glue *gl = ctx;
	ssize_t n = vm_state_size(gl->vm);
	if (n < 0)
		return (int)n;
	void *b = malloc((size_t)n);
	if (!b)
		return -ENOMEM;
	ssize_t w = vm_state_save(gl->vm, b, (size_t)n);
	if (w < 0) {
		free(b);
		return (int)w;
	}
	*blob = b;
	*len = (size_t)w;
	return 0;
}

static int s_stopped(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_is_stopped(gl->vm);
}

static int s_dirty_start(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_set(gl->vm, true);
}

static int s_dirty_stop(void *ctx)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_set(gl->vm, false);
}

static int s_dirty_fetch(void *ctx, uint64_t *bitmap)
{
	struct migrate_glue *gl = ctx;
	return vm_dirty_log_fetch(gl->vm, bitmap);
}

/* Migrate out; returns 0 on success (the VM is then stopped here). */
static int migrate_out(struct migrate_glue *gl, const char *to, const struct mig_opts *m, char *err,
		       size_t errlen)
{
	struct ram *ram = vm_ram(gl->vm);
	struct mig_source_vm svm = {
		.ctx = gl,
		.ram = ram_host(ram),
		.ram_size = ram_bytes(ram),
		.pause = s_pause,
		.resume = s_resume,
		.save_state = s_save,
		.dirty_start = s_dirty_start,
		.dirty_fetch = s_dirty_fetch,
		.dirty_stop = s_dirty_stop,
		.stopped = s_stopped,
	};
	int switched;
	svm.nr_regions = glue_regions(gl->vm, svm.regions);
	pr_vmm("migrating to %s%s\n", to, m->precopy_rounds ? " (precopy, then postcopy)" : "");
	int r = mig_source_run(&svm, m, &switched, err, errlen);
	if (r == 0) {
		pr_vmm("migration to %s complete: the VM runs there now\n", to);
		vm_stop(gl->vm, -EINTR);
		return 0;
	}
	if (switched) {
		pr_vmm("migration failed after the switch-over: %s; the VM cannot run here "
		       "either (its memory is split)\n",
		       err);
		vm_stop(gl->vm, -EIO);
	} else {
		pr_vmm("migration failed, the VM goes on here: %s\n", err);
	}
	return r;
}

/*
 * The control API: QMP commands on the --control socket (vmm/qmp.h,
 * docs/migration.md "The control API").  A migration started by `migrate`
 * runs on its own thread; gl->ctl is the live link to it (requests in,
 * progress and the phase out), gl->params the options of the next one.
 */

static void params_init(struct glue_params *p, const struct migrate_vmm_opts *o)
{
	*p = (struct glue_params){ 0 };
	memcpy(p->param, o->param, sizeof(p->param));
	snprintf(p->tls_creds, sizeof(p->tls_creds), "%s", o->tls_creds ? o->tls_creds : "");
	snprintf(p->tls_psk, sizeof(p->tls_psk), "%s", o->tls_psk ? o->tls_psk : "");
	snprintf(p->tls_hostname, sizeof(p->tls_hostname), "%s",
		 o->tls_hostname ? o->tls_hostname : "");
	snprintf(p->metrics, sizeof(p->metrics), "%s", o->metrics ? o->metrics : "");
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
	const char *creds = p->tls_creds[0] ? p->tls_creds : NULL;
	const char *psk = p->tls_psk[0] ? p->tls_psk : NULL;

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

static int mig_active(struct migrate_glue *gl)
{
	int phase = __atomic_load_n(&gl->ctl.phase, __ATOMIC_ACQUIRE);
	return gl->mig_on && phase < MIG_PHASE_COMPLETED;
}

static void phase_changed(void *arg, enum mig_phase phase)
{
	struct migrate_glue *gl = arg;
	struct json_object *data = json_object_new_object();

	json_object_object_add(data, "status", json_object_new_string(mig_phase_name(phase)));
	if (phase == MIG_PHASE_FAILED) /* QEMU's event has none: a VMM that exits can't be asked */
		json_object_object_add(data, "x-error-desc", json_object_new_string(gl->ctl.error));
	if (gl->qmp)
		qmp_event(gl->qmp, "MIGRATION", data);
	else
		json_object_put(data);
}

static void *migration_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	char err[400] = "";

	migrate_out(gl, gl->uri, &gl->mig_opts, err, sizeof(err));
	return NULL;
}

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

/* A string argument into buf (left alone when absent): 0, or -1 with reply set. */
static int arg_str(struct json_object *args, const char *key, char *buf, size_t len,
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
		for (size_t k = 0; !known && k < sizeof(strings) / sizeof(strings[0]); k++)
			if (!strcmp(key, strings[k])) {
				known = 1;
				if (arg_str(args, key, bufs[k], lens[k], reply))
					return -1;
			}
		if (!known) {
			qmp_fail(reply, "Parameter '%.64s' is unexpected", key);
			return -1;
		}
	}
	return 0;
}

static void qmp_set_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct glue_params p;

	if (args && (json_object_object_get_ex(args, "downtime-limit", NULL) ||
		     json_object_object_get_ex(args, "multifd-channels", NULL))) {
		qmp_fail(reply, "downtime-limit and multifd-channels are not supported: postcopy "
				"here has one bulk channel, and its downtime does not depend on a "
				"limit");
		return;
	}
	pthread_mutex_lock(&gl->lock);
	p = gl->params;
	if ((!args || !set_params(&p, args, reply)) && !check_tls_floor(gl->o, &p, reply)) {
		gl->params = p;
		/* The cap also holds for a migration under way. */
		__atomic_store_n(&gl->ctl.max_bandwidth, p.param[MIG_P_MAX_BANDWIDTH],
				 __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&gl->lock);
}

static void qmp_query_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply)
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
	json_object_object_add(o, "tls-creds", json_object_new_string(p.tls_creds));
	json_object_object_add(o, "tls-psk", json_object_new_string(p.tls_psk));
	json_object_object_add(o, "tls-hostname", json_object_new_string(p.tls_hostname));
	json_object_object_add(o, "x-metrics-file", json_object_new_string(p.metrics));
	reply->ret = o;
}

/* gl->mig_opts from the parameters as they are now (gl->lock held). */
static void freeze_params(struct migrate_glue *gl)
{
	struct glue_params *p = &gl->run_params;

	*p = gl->params;
	gl->mig_opts = lib_opts(gl, gl->uri);
	gl->mig_opts.precopy_rounds = (int)p->param[MIG_P_PRECOPY_ROUNDS];
	gl->mig_opts.compress = (int)p->param[MIG_P_COMPRESS];
	gl->mig_opts.recover_ms = (int)p->param[MIG_P_RECOVER_MS];
	gl->mig_opts.metrics = p->metrics[0] ? p->metrics : NULL;
	gl->mig_opts.tls = (struct mig_tls_opts){
		.creds_dir = p->tls_creds[0] ? p->tls_creds : NULL,
		.psk_file = p->tls_psk[0] ? p->tls_psk : NULL,
		.hostname = p->tls_hostname[0] ? p->tls_hostname : NULL,
	};
	gl->mig_opts.ctl = &gl->ctl;
	gl->ctl = (struct mig_ctl){
		.max_bandwidth = p->param[MIG_P_MAX_BANDWIDTH],
		.manual_postcopy = (int)p->param[MIG_P_POSTCOPY_MANUAL],
		.phase = MIG_PHASE_SETUP,
		.phase_changed = phase_changed,
		.arg = gl,
	};
}

static void qmp_migrate(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	static const char *const known[] = { "uri", NULL };
	struct migrate_glue *gl = ctx;
	char uri[sizeof(gl->uri)] = "";

	if (!args || args_known(args, known, reply) ||
	    arg_str(args, "uri", uri, sizeof(uri), reply))
		goto out;
	if (!uri[0]) {
		qmp_fail(reply, "Parameter 'uri' is missing");
		goto out;
	}
	pthread_mutex_lock(&gl->lock);
	if (mig_active(gl) || gl->user_paused || gl->finishing) {
		qmp_fail(reply, "%s",
			 gl->user_paused ? "the VM is stopped: 'cont' it first"
					 : "There's a migration process in progress");
		pthread_mutex_unlock(&gl->lock);
		return;
	}
	if (gl->mig_on) /* the previous one ended: its thread is done */
		pthread_join(gl->mig_thread, NULL);
	gl->mig_on = 0;
	memcpy(gl->uri, uri, sizeof(uri));
	freeze_params(gl);
	if (pthread_create(&gl->mig_thread, NULL, migration_thread, gl))
		qmp_fail(reply, "cannot start the migration thread");
	else
		gl->mig_on = 1;
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
	if (mig_active(gl) && mig_ctl_cancel(&gl->ctl))
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
	if (!mig_active(gl) || phase > MIG_PHASE_PRECOPY)
		qmp_fail(reply, "no migration in precopy (status: %s)",
			 gl->mig_on ? mig_phase_name(phase) : "none");
	else
		__atomic_store_n(&gl->ctl.start_postcopy, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&gl->lock);
}

static void add_u64(struct json_object *o, const char *key, const uint64_t *field)
{
	json_object_object_add(o, key,
			       json_object_new_uint64(__atomic_load_n(field, __ATOMIC_RELAXED)));
}

/* query-migrate's "ram" member, named as QEMU names it where the meaning is the same. */
static struct json_object *ram_info(struct mig_ctl *c, uint64_t now)
{
	struct json_object *ram = json_object_new_object();
	uint64_t total = __atomic_load_n(&c->pages_total, __ATOMIC_RELAXED);
	uint64_t sent = __atomic_load_n(&c->pages_sent, __ATOMIC_RELAXED);
	uint64_t t0 = __atomic_load_n(&c->t_start_ns, __ATOMIC_RELAXED);
	double secs = t0 && now > t0 ? (double)(now - t0) / 1e9 : 0;

	add_u64(ram, "transferred", &c->bytes_sent);
	json_object_object_add(ram, "total", json_object_new_uint64(total * MIG_PAGE_SIZE));
	json_object_object_add(
	    ram, "remaining",
	    json_object_new_uint64((total - (sent < total ? sent : total)) * MIG_PAGE_SIZE));
	json_object_object_add(ram, "normal", json_object_new_uint64(sent));
	json_object_object_add(ram, "page-size", json_object_new_int(MIG_PAGE_SIZE));
	json_object_object_add(
	    ram, "pages-per-second",
	    json_object_new_uint64(secs > 0 ? (uint64_t)((double)sent / secs) : 0));
	add_u64(ram, "dirty-pages-rate", &c->dirty_pages_rate);
	add_u64(ram, "dirty-sync-count", &c->precopy_rounds);
	add_u64(ram, "postcopy-requests", &c->pages_demand);
	return ram;
}

static void qmp_query_migrate(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *o = json_object_new_object();
	struct mig_ctl *c = &gl->ctl;
	uint64_t now = mig_now_ns(), t0, t1;
	int phase;

	(void)args;
	reply->ret = o;
	pthread_mutex_lock(&gl->lock);
	if (!gl->mig_on) {
		pthread_mutex_unlock(&gl->lock);
		return; /* {}: no migration yet, as QEMU answers */
	}
	phase = __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE);
	t0 = __atomic_load_n(&c->t_start_ns, __ATOMIC_RELAXED);
	t1 = __atomic_load_n(&c->t_end_ns, __ATOMIC_RELAXED);
	json_object_object_add(
	    o, "status",
	    json_object_new_string(phase < MIG_PHASE_COMPLETED &&
					   __atomic_load_n(&c->cancel, __ATOMIC_ACQUIRE) ==
					       MIG_CANCEL_ASKED
				       ? "cancelling"
				       : mig_phase_name(phase)));
	json_object_object_add(o, "total-time",
			       json_object_new_uint64(t0 ? ((t1 ? t1 : now) - t0) / 1000000 : 0));
	if (__atomic_load_n(&c->downtime_us, __ATOMIC_RELAXED))
		json_object_object_add(o, "downtime",
				       json_object_new_uint64(c->downtime_us / 1000));
	add_u64(o, "x-downtime-us", &c->downtime_us);
	json_object_object_add(o, "ram", ram_info(c, now));
	add_u64(o, "x-postcopy-faults", &c->faults);
	add_u64(o, "x-postcopy-fault-p50-ns", &c->fault_lat_p50_ns);
	add_u64(o, "x-postcopy-fault-p99-ns", &c->fault_lat_p99_ns);
	if (phase == MIG_PHASE_FAILED) /* written before the phase: see struct mig_ctl */
		json_object_object_add(o, "error-desc", json_object_new_string(c->error));
	pthread_mutex_unlock(&gl->lock);
}

/* The VM's run state: stop and cont, as QEMU's; not while a migration runs. */
static void qmp_stop_cont(struct migrate_glue *gl, int stop, struct qmp_reply *reply)
{
	int r = 0;

	pthread_mutex_lock(&gl->lock);
	if (mig_active(gl)) {
		qmp_fail(reply, "a migration is in progress: it stops and resumes the VM itself");
	} else if (stop != gl->user_paused) {
		r = stop ? vm_pause(gl->vm) : vm_resume(gl->vm);
		if (r)
			qmp_fail(reply, "cannot %s the VM: %s", stop ? "stop" : "resume",
				 strerror(-r));
		else
			gl->user_paused = stop;
	}
	pthread_mutex_unlock(&gl->lock);
	if (!reply->error_class && gl->qmp)
		qmp_event(gl->qmp, stop ? "STOP" : "RESUME", NULL);
}

static void qmp_stop(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)args;
	qmp_stop_cont(ctx, 1, reply);
}

static void qmp_cont(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	(void)args;
	qmp_stop_cont(ctx, 0, reply);
}

static void qmp_query_status(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	struct json_object *o = json_object_new_object();
	int paused;

	(void)args;
	pthread_mutex_lock(&gl->lock);
	paused = gl->user_paused;
	pthread_mutex_unlock(&gl->lock);
	json_object_object_add(o, "running", json_object_new_boolean(!paused));
	json_object_object_add(o, "singlestep", json_object_new_boolean(0));
	json_object_object_add(o, "status", json_object_new_string(paused ? "paused" : "running"));
	reply->ret = o;
}

static const struct qmp_command qmp_commands[] = {
	{ "migrate", qmp_migrate },
	{ "query-migrate", qmp_query_migrate },
	{ "migrate_cancel", qmp_cancel },
	{ "migrate-set-parameters", qmp_set_parameters },
	{ "query-migrate-parameters", qmp_query_parameters },
	{ "migrate-start-postcopy", qmp_start_postcopy },
	{ "stop", qmp_stop },
	{ "cont", qmp_cont },
	{ "query-status", qmp_query_status },
	{ NULL, NULL },
};

static int start_control(struct migrate_glue *gl)
{
	char err[400] = "";

	gl->qmp = qmp_listen(gl->o->control, qmp_commands, gl, err, sizeof(err));
	if (!gl->qmp) {
		pr_vmm("--control: %s\n", err);
		return -EINVAL;
	}
	return 0;
}

static void *timer_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + gl->o->migrate_after_ms * 1000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	pthread_mutex_lock(&gl->lock);
	int r = 0;
	while (!gl->finishing && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&gl->cond, &gl->lock, &ts);
	int go = !gl->finishing;
	if (go) { /* the flags' options, --max-bandwidth included */
		snprintf(gl->uri, sizeof(gl->uri), "%s", gl->o->migrate_to);
		freeze_params(gl);
	}
	pthread_mutex_unlock(&gl->lock);
	if (go) {
		char err[400];
		migrate_out(gl, gl->uri, &gl->mig_opts, err, sizeof(err));
	}
	return arg;
}

/* ---- The hooks ---- */

int migrate_prepare(struct vm *vm, struct migrate_vmm_opts *o)
{
	if (o->incoming && (o->migrate_to || o->control)) {
		pr_vmm("--incoming cannot be combined with --migrate-to or --control\n");
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
	if (check_tls(o))
		return -EINVAL;
	struct migrate_glue *gl = calloc(1, sizeof(*gl));
	if (!gl)
		return -ENOMEM;
	*gl = (struct migrate_glue){ .vm = vm, .o = o };
	pthread_mutex_init(&gl->lock, NULL);
	pthread_cond_init(&gl->cond, NULL);
	params_init(&gl->params, o);
	o->glue = gl;
	return o->incoming ? prepare_incoming(gl) : 0;
}

int migrate_started(struct vm *vm, struct migrate_vmm_opts *o)
{
	struct migrate_glue *gl = o->glue;
	if (o->incoming) {
		vm_resume(vm); /* parked since prepare_incoming() */
		mig_dest_resumed(gl->dest);
		stop_signal_watch(gl);
		pthread_create(&gl->watch, NULL, watch_thread, gl);
		gl->watch_on = 1;
		return 0;
	}
	if (o->control) {
		int r = start_control(gl);
		if (r)
			return r;
	}
	if (o->migrate_to) {
		pthread_create(&gl->timer, NULL, timer_thread, gl);
		gl->timer_on = 1;
	}
	return 0;
}

/*
 * The destination's VM stopped while pages may still be on their way.  A
 * guest that finished by itself: keep receiving, so the source can finish.
 * A guest that crashed (triple fault, a failed entry), or a VMM told to
 * stop by a signal: the migration failed, and the source must hear so
 * rather than a COMPLETE.
 */
static void stop_incoming_with_vm(struct migrate_glue *gl, struct vm *vm)
{
	int status = 0;
	char why[160];
	if (mig_dest_status(gl->dest) != 0 || vm_wait(vm, 0, &status) != 1)
		return;
	if (status >= 128) {
		snprintf(why, sizeof(why), "the destination VMM was stopped by signal %d",
			 status - 128);
	} else if (status < 0 && status != -EINTR) {
		snprintf(why, sizeof(why), "the guest failed at the destination (%s)",
			 strerror(-status));
	} else {
		pr_vmm("guest stopped; waiting for the remaining pages so the source can "
		       "finish\n");
		return;
	}
	pr_vmm("%s: the migration failed\n", why);
	mig_dest_abort(gl->dest, why);
}

int migrate_finish(struct vm *vm, struct migrate_vmm_opts *o)
{
	struct migrate_glue *gl = o->glue;
	if (!gl)
		return 0;
	pthread_mutex_lock(&gl->lock);
	gl->finishing = 1;
	pthread_cond_broadcast(&gl->cond);
	pthread_mutex_unlock(&gl->lock);
	if (gl->timer_on)
		pthread_join(gl->timer, NULL);
	if (gl->mig_on) {
		/* The VM ended during a migration: give it up if not switched over yet. */
		mig_ctl_cancel(&gl->ctl);
		pthread_join(gl->mig_thread, NULL);
	}
	qmp_close(gl->qmp); /* after the migration thread: it sends events */
	stop_signal_watch(gl);
	if (gl->watch_on) {
		stop_incoming_with_vm(gl, vm);
		pthread_join(gl->watch, NULL);
	}
	if (gl->dest) {
		/* The fault thread calls into the library: stop it first. */
		ram_stop_faults(vm_ram(vm));
		mig_dest_free(gl->dest);
		gl->dest = NULL;
	}
	o->glue = NULL;
	free(gl);
	return 0;
}
