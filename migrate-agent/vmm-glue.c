// SPDX-License-Identifier: GPL-2.0
/*
 * The migration library bound to the VMM (vmm/include/vmm/vm.h, ram.h):
 * the source side reads guest RAM and pauses/saves the VM; the destination
 * side is the lazy RAM's page source, installs pages through the RAM back
 * end and loads the state.  Also the control socket `migrate-agent migrate`
 * talks to.  See include/migrate/vmm-glue.h for where `vmm run` calls in.
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
#include "migrate/vmm-glue.h"
#include "spin.h"
#include "vmm/ram.h"
#include "vmm/vm.h"

#define pr_vmm(...) fprintf(stderr, "vmm: " __VA_ARGS__)

/*
 * The migration of one `vmm run`: created by migrate_prepare(), kept in
 * migrate_vmm_opts.glue, freed by migrate_finish().  lock/cond guard
 * finishing and ctl_client.
 */
struct migrate_glue {
	struct vm *vm;
	struct migrate_vmm_opts *o;
	struct mig_dest *dest;
	struct mig_dest_vm dest_vm;
	pthread_t watch, ctl, timer;
	int watch_on, ctl_on, timer_on;
	int ctl_fd, ctl_client;
	dev_t ctl_dev; /* the control socket we bound: removed at the end only if still ours */
	ino_t ctl_ino;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int finishing;
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
	static const char *const with_value[] = {
		"--incoming",	    "--control",	 "--migrate-to",     "--migrate-after",
		"--precopy-rounds", "--migrate-metrics", "--recover-ms",     "--tls-creds",
		"--tls-psk",	    "--tls-hostname",	 "--migrate-spin-us"
	};
	uint64_t n;
	if (!strcmp(a, "--compress")) {
		o->compress = 1;
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
	} else if (!strcmp(a, "--precopy-rounds")) {
		if (parse_num(a, v, 0, PARSE_PRECOPY_MAX, &n))
			return -1;
		o->precopy_rounds = (int)n;
	} else if (!strcmp(a, "--recover-ms")) {
		if (parse_num(a, v, 1, PARSE_RECOVER_MS_MAX, &n))
			return -1;
		o->recover_ms = (int)n;
	} else if (!strcmp(a, "--migrate-spin-us")) {
		if (parse_num(a, v, 0, MIG_SPIN_MAX_US, &n))
			return -1;
		o->spin_us = (unsigned)n;
	}
	return 1;
}

/* ---- Destination ---- */

/* A page-aligned anonymous page per thread: moving back ends take it. */
static _Thread_local uint8_t *bounce;

static int dst_install(void *ctx, uint64_t off, const void *data)
{
	struct migrate_glue *gl = ctx;
	struct ram *ram = vm_ram(gl->vm);
	int r;
	if (!data) {
		r = ram_install_zero(ram, off);
	} else {
		if (!bounce) {
			void *p = mmap(NULL, MIG_PAGE_SIZE, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				return -ENOMEM;
			bounce = p;
		}
		memcpy(bounce, data, MIG_PAGE_SIZE);
		r = ram_install(ram, off, bounce);
	}
	return r == 1 ? -EEXIST : r;
}

static int dst_install_run(void *ctx, uint64_t off, void *data, uint64_t n)
{
	struct migrate_glue *gl = ctx;
	return ram_install_run(vm_ram(gl->vm), off, data, n);
}

static int dst_load(void *ctx, const void *blob, size_t len)
{
	struct migrate_glue *gl = ctx;
	char why[256] = "";
	int r = vm_state_load(gl->vm, blob, len, why, sizeof(why));

	if (r < 0)
		fprintf(stderr, "vmm: cannot load the migrated state: %s\n", why);
	return r;
}

/*
 * The destination's page source: the migration.  The RAM owns it (and
 * destroys it in ram_exit(), after migrate_finish()); it is only asked for
 * pages while the fault thread runs, which migrate_finish() stops first.
 */
struct glue_source {
	struct ram_source src;
	struct migrate_glue *gl;
};

static void src_destroy(struct ram_source *s)
{
	free(s);
}

static int src_request(struct ram_source *s, struct ram *ram, uint64_t off)
{
	struct migrate_glue *gl = ((struct glue_source *)s)->gl;
	int r = mig_dest_fault(gl->dest, off);
	if (r == 1)
		return ram->ops->wake(ram, off, MIG_PAGE_SIZE);
	return r < 0 ? r : RAM_SOURCE_PENDING;
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
	       (unsigned long long)vm_ram(gl->vm)->nr_pages);
	return arg;
}

static struct mig_opts lib_opts(struct migrate_glue *gl, const char *addr)
{
	struct mig_opts m = {
		.addr = addr,
		.precopy_rounds = gl->o->precopy_rounds,
		.compress = gl->o->compress,
		.recover_ms = gl->o->recover_ms,
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
	if (!ram->ops) {
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
	struct glue_source *src = malloc(sizeof(*src));
	if (!src)
		return -ENOMEM;
	*src = (struct glue_source){ .src = { .request = src_request, .destroy = src_destroy },
				     .gl = gl };
	int r = ram_start_faults(ram, &src->src, gl->o->busy_poll);
	if (r < 0) {
		if (ram->source != &src->src) /* else the RAM destroys it */
			free(src);
		pr_vmm("cannot start the fault thread: %s\n", strerror(-r));
		return r;
	}
	gl->dest_vm = (struct mig_dest_vm){
		.ctx = gl,
		.ram_size = ram->size,
		.install = dst_install,
		.install_run = dst_install_run,
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
	return __atomic_load_n(&gl->vm->stopped, __ATOMIC_ACQUIRE);
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
		.ram = ram->host,
		.ram_size = ram->size,
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
 * Control socket: one line per connection,
 *   migrate to=tcp:H:P [precopy=N] [compress=0|1] [metrics=FILE] [recover-ms=N]
 *           [tls-creds=DIR | tls-psk=FILE] [tls-hostname=NAME]
 * answered by "progress" lines every second while the migration runs (so
 * the CLI can tell a long migration from a silent VMM), then one line, "ok"
 * or "error MESSAGE".  A client that says nothing for CTL_READ_MS is
 * dropped; a client that went away never hurts the VMM (MSG_NOSIGNAL).
 */
#define CTL_READ_MS  5000
#define CTL_BEAT_MS  1000
#define CTL_LINE_MAX 4096

static void ctl_say(int c, const char *line)
{
	size_t n = strlen(line);
	if (send(c, line, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
		return; /* the client went away or does not read: its loss */
}

/*
 * One request line into line[CTL_LINE_MAX]: 0; -ENODATA when the client
 * gave none in time; -EMSGSIZE for a line over the limit and -EBADMSG for
 * one with a NUL in it, refused whole (acting on a prefix would run a
 * request the client did not send).
 */
static int ctl_read_line(int c, char *line)
{
	struct timeval tv = { .tv_sec = CTL_READ_MS / 1000 };
	char *nl = NULL;
	size_t n = 0;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (n < CTL_LINE_MAX && !nl) {
		ssize_t k = read(c, line + n, CTL_LINE_MAX - n);
		if (k <= 0)
			break;
		nl = memchr(line + n, '\n', (size_t)k);
		n += (size_t)k;
	}
	if (!nl && n == CTL_LINE_MAX)
		return -EMSGSIZE;
	if (!n)
		return -ENODATA;
	if (!nl)
		nl = line + (n < CTL_LINE_MAX ? n : CTL_LINE_MAX - 1);
	if (nl > line && nl[-1] == '\r')
		nl--;
	if (memchr(line, 0, (size_t)(nl - line)))
		return -EBADMSG;
	*nl = 0;
	return 0;
}

/* A request's strings; struct mig_opts points into them. */
struct ctl_req {
	char to[256], metrics[512], tls_creds[512], tls_psk[512], tls_hostname[256];
};

/* "KEY=VALUE" into buf when tok starts with key: 1; 0 if not this key; -1 if too long. */
static int ctl_str(const char *tok, const char *key, char *buf, size_t len)
{
	size_t k = strlen(key);
	if (strncmp(tok, key, k))
		return 0;
	return snprintf(buf, len, "%s", tok + k) < (int)len ? 1 : -1;
}

/* A number key ("precopy=N"): 1 when tok is this key and its value fits, -1 if not, 0 if another key. */
static int ctl_num(const char *tok, const char *key, uint64_t min, uint64_t max, int *out,
		   char *err, size_t errlen)
{
	size_t k = strlen(key);
	uint64_t n;
	if (strncmp(tok, key, k))
		return 0;
	if (parse_u64(tok + k, min, max, &n)) {
		snprintf(err, errlen, "%.*s'%s' is not a number from %llu to %llu", (int)k - 1, key,
			 tok + k, (unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = (int)n;
	return 1;
}

/* One "KEY=VALUE" token into m and q: 0, or -1 with err set. */
static int ctl_token(const char *tok, struct mig_opts *m, struct ctl_req *q, char *err,
		     size_t errlen)
{
	static const char *const keys[] = { "to=", "metrics=", "tls-creds=", "tls-psk=",
					    "tls-hostname=" };
	char *const bufs[] = { q->to, q->metrics, q->tls_creds, q->tls_psk, q->tls_hostname };
	const size_t lens[] = { sizeof(q->to), sizeof(q->metrics), sizeof(q->tls_creds),
				sizeof(q->tls_psk), sizeof(q->tls_hostname) };
	int r = ctl_num(tok, "precopy=", 0, PARSE_PRECOPY_MAX, &m->precopy_rounds, err, errlen);
	if (!r)
		r = ctl_num(tok, "compress=", 0, 1, &m->compress, err, errlen);
	if (!r)
		r = ctl_num(tok, "recover-ms=", 1, PARSE_RECOVER_MS_MAX, &m->recover_ms, err,
			    errlen);
	for (size_t i = 0; !r && i < sizeof(keys) / sizeof(keys[0]); i++)
		if ((r = ctl_str(tok, keys[i], bufs[i], lens[i])) < 0)
			snprintf(err, errlen, "%s value too long", keys[i]);
	if (!r)
		snprintf(err, errlen, "unknown key '%.64s'", tok);
	return r > 0 ? 0 : -1;
}

/*
 * The TLS of a request.  What the VMM was started with is a floor: a
 * request may add TLS to a plain VMM, or name the host of an x509 peer,
 * never drop TLS or swap its mode or files (before this rule, a request
 * naming only tls-hostname= ran in plain text).  0, or -1 with err set.
 */
static int ctl_tls(const struct migrate_vmm_opts *o, const struct ctl_req *q,
		   struct mig_tls_opts *t, char *err, size_t errlen)
{
	const char *creds = q->tls_creds[0] ? q->tls_creds : NULL;
	const char *psk = q->tls_psk[0] ? q->tls_psk : NULL;
	const char *host = q->tls_hostname[0] ? q->tls_hostname : NULL;
	int started = o->tls_creds || o->tls_psk;

	if ((creds && psk) || (host && !creds && !o->tls_creds)) {
		snprintf(err, errlen, "%s",
			 creds && psk ? "tls-creds and tls-psk exclude each other"
				      : "tls-hostname needs tls-creds");
		return -1;
	}
	if (started && ((creds && (!o->tls_creds || strcmp(creds, o->tls_creds))) ||
			(psk && (!o->tls_psk || strcmp(psk, o->tls_psk))))) {
		snprintf(err, errlen,
			 "this VMM was started with TLS (%s): a request may not change or drop it",
			 o->tls_creds ? "x509" : "PSK");
		return -1;
	}
	if (creds || psk)
		*t = (struct mig_tls_opts){ .creds_dir = creds, .psk_file = psk };
	if (host)
		t->hostname = host;
	return 0;
}

/* Parse "migrate to=... ..." into m and q: 0, or -1 with err set. */
static int ctl_parse(const struct migrate_vmm_opts *o, char *line, struct mig_opts *m,
		     struct ctl_req *q, char *err, size_t errlen)
{
	char *save = NULL;
	char *tok = strtok_r(line, " ", &save);
	if (!tok || strcmp(tok, "migrate")) {
		snprintf(err, errlen,
			 "unknown request (expected: migrate to=tcp:H:P [precopy=N] "
			 "[compress=0|1] [metrics=FILE] [recover-ms=N] [tls-creds=DIR | "
			 "tls-psk=FILE] [tls-hostname=NAME])");
		return -1;
	}
	while ((tok = strtok_r(NULL, " ", &save)))
		if (ctl_token(tok, m, q, err, errlen))
			return -1;
	if (!q->to[0]) {
		snprintf(err, errlen, "a migrate request needs to=tcp:HOST:PORT");
		return -1;
	}
	m->addr = q->to;
	if (q->metrics[0])
		m->metrics = q->metrics;
	return ctl_tls(o, q, &m->tls, err, errlen);
}

/* "progress" to the client every CTL_BEAT_MS until told to stop. */
struct ctl_beat {
	pthread_t thread;
	int client, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void *ctl_beat_thread(void *arg)
{
	struct ctl_beat *b = arg;
	pthread_mutex_lock(&b->lock);
	while (!b->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += CTL_BEAT_MS / 1000;
		if (pthread_cond_timedwait(&b->cond, &b->lock, &ts) == ETIMEDOUT && !b->stop)
			ctl_say(b->client, "progress\n");
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* Run one migration for a control client, with heartbeats; 0 on success. */
static int ctl_migrate(struct migrate_glue *gl, int c, const char *to, const struct mig_opts *m,
		       char *err, size_t errlen)
{
	struct ctl_beat b = { .client = c,
			      .lock = PTHREAD_MUTEX_INITIALIZER,
			      .cond = PTHREAD_COND_INITIALIZER };
	int beating = pthread_create(&b.thread, NULL, ctl_beat_thread, &b) == 0;
	int r = migrate_out(gl, to, m, err, errlen);
	if (beating) {
		pthread_mutex_lock(&b.lock);
		b.stop = 1;
		pthread_cond_signal(&b.cond);
		pthread_mutex_unlock(&b.lock);
		pthread_join(b.thread, NULL);
	}
	return r;
}

/* Serve one control connection; 1 once serving ends (the VM migrated away, or the VMM exits). */
static int ctl_serve(struct migrate_glue *gl, int c)
{
	char line[CTL_LINE_MAX], reply[600], err[400] = "";
	struct ctl_req q = { 0 };
	struct mig_opts m = lib_opts(gl, NULL);
	/* While the request is awaited, migrate_finish() may cut it short. */
	pthread_mutex_lock(&gl->lock);
	int finishing = gl->finishing;
	gl->ctl_client = finishing ? -1 : c;
	pthread_mutex_unlock(&gl->lock);
	int r = finishing ? -ENODATA : ctl_read_line(c, line);
	pthread_mutex_lock(&gl->lock);
	gl->ctl_client = -1;
	pthread_mutex_unlock(&gl->lock);
	if (r == -ENODATA)
		return finishing; /* an idle or empty client: dropped */
	if (r)
		snprintf(err, sizeof(err), "%s",
			 r == -EMSGSIZE ? "request line too long" : "NUL byte in the request");
	else
		r = ctl_parse(gl->o, line, &m, &q, err, sizeof(err));
	if (r) {
		snprintf(reply, sizeof(reply), "error %s\n", err);
		ctl_say(c, reply);
		pr_vmm("control socket: refused: %s\n", err);
		return 0;
	}
	r = ctl_migrate(gl, c, q.to, &m, err, sizeof(err));
	snprintf(reply, sizeof(reply), r ? "error %s\n" : "ok\n", err);
	ctl_say(c, reply);
	return r == 0;
}

/*
 * The socket's mode keeps other users out; the peer's credentials are
 * checked too (a mode can be changed, a directory can be shared): only the
 * VMM's own effective uid, or root, may start a migration.
 */
static int ctl_peer_allowed(int c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char msg[160];
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		pr_vmm("control socket: cannot read the client's credentials: %s\n",
		       strerror(errno));
		return 0;
	}
	if (cred.uid == geteuid() || cred.uid == 0)
		return 1;
	snprintf(msg, sizeof(msg), "error refused: uid %u does not own this VMM (uid %u)\n",
		 (unsigned)cred.uid, (unsigned)geteuid());
	ctl_say(c, msg);
	pr_vmm("control socket: %s", msg + 6);
	return 0;
}

static void *ctl_thread(void *arg)
{
	struct migrate_glue *gl = arg;
	for (;;) {
		int c = accept4(gl->ctl_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		int migrated = ctl_peer_allowed(c) ? ctl_serve(gl, c) : 0;
		close(c);
		if (migrated)
			break;
	}
	return arg;
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
	pthread_mutex_unlock(&gl->lock);
	if (go) {
		struct mig_opts m = lib_opts(gl, gl->o->migrate_to);
		char err[400];
		migrate_out(gl, gl->o->migrate_to, &m, err, sizeof(err));
	}
	return arg;
}

/*
 * The control path may be left over from a VMM that died: remove it only
 * when it is a socket nobody listens on.  Anything else at the path (a
 * file, a live VMM's socket) is the user's, and stays.  0 or -errno after a
 * message.
 */
static int ctl_clear_stale(const char *path, const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, r;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		pr_vmm("--control %s: %s\n", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		pr_vmm("--control %s: exists and is not a socket; not removed\n", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ? -errno : 0;
	close(fd);
	if (r == 0) {
		pr_vmm("--control %s: another VMM is listening there\n", path);
		return -EADDRINUSE;
	}
	if (r != -ECONNREFUSED) {
		pr_vmm("--control %s: %s\n", path, strerror(-r));
		return r;
	}
	return unlink(path) ? -errno : 0;
}

/*
 * Only the owner may connect: the socket is born 0600 (umask around
 * bind(), not a chmod() by path after it, which another process could
 * redirect or race).  The umask is process-wide for that instant; no other
 * thread of ours creates files while the VMM starts.
 */
static int start_control(struct migrate_glue *gl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = gl->o->control;
	struct stat st;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		pr_vmm("--control: path too long\n");
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	r = ctl_clear_stale(path, &sa);
	if (r)
		return r;
	gl->ctl_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (gl->ctl_fd >= 0) {
		mode_t old = umask(0177);
		r = bind(gl->ctl_fd, (struct sockaddr *)&sa, sizeof(sa));
		umask(old);
	}
	if (gl->ctl_fd < 0 || r < 0 || stat(path, &st) < 0 || listen(gl->ctl_fd, 4) < 0) {
		r = -errno;
		pr_vmm("cannot open the control socket %s: %s\n", path, strerror(-r));
		return r;
	}
	gl->ctl_dev = st.st_dev;
	gl->ctl_ino = st.st_ino;
	r = -pthread_create(&gl->ctl, NULL, ctl_thread, gl);
	if (r) {
		pr_vmm("control socket: cannot start its thread: %s\n", strerror(-r));
		return r;
	}
	gl->ctl_on = 1;
	return 0;
}

/* Remove the control path if it is still the socket we bound (not a successor's). */
static void stop_control_path(struct migrate_glue *gl)
{
	struct stat st;

	if (!lstat(gl->o->control, &st) && st.st_dev == gl->ctl_dev && st.st_ino == gl->ctl_ino)
		unlink(gl->o->control);
}

/* ---- The hooks ---- */

int migrate_prepare(struct vm *vm, struct migrate_vmm_opts *o)
{
	if (o->incoming && (o->migrate_to || o->control)) {
		pr_vmm("--incoming cannot be combined with --migrate-to or --control\n");
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
	*gl = (struct migrate_glue){ .vm = vm, .o = o, .ctl_fd = -1, .ctl_client = -1 };
	pthread_mutex_init(&gl->lock, NULL);
	pthread_cond_init(&gl->cond, NULL);
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
	if (gl->ctl_fd >= 0) {
		shutdown(gl->ctl_fd, SHUT_RDWR);
		/* A client that connected and says nothing must not keep us here. */
		pthread_mutex_lock(&gl->lock);
		if (gl->ctl_client >= 0)
			shutdown(gl->ctl_client, SHUT_RDWR);
		pthread_mutex_unlock(&gl->lock);
		if (gl->ctl_on)
			pthread_join(gl->ctl, NULL);
		close(gl->ctl_fd);
		stop_control_path(gl);
	}
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
