// SPDX-License-Identifier: GPL-2.0
/*
 * The destination (vmm run --incoming): the migration is the lazy RAM's
 * page source, installs pages through the RAM back end and loads the
 * state; once the vCPUs run, a thread watches the migration to its end.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "glue.h"
#include "ram/ram.h"
#include "vmm/exit-codes.h"
#include "vmm/vm.h"

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
		_exit(VMM_EXIT_ERROR);
	}
	write_dest_metrics(gl);
	pr_vmm("incoming migration complete: all %llu pages arrived\n",
	       (unsigned long long)ram_nr_pages(vm_ram(gl->vm)));
	pthread_mutex_lock(&gl->lock);
	gl->incoming_done = 1;
	pthread_mutex_unlock(&gl->lock);
	return arg;
}

/*
 * The URI to listen on into gl->incoming_uri: --incoming's, or with
 * --incoming defer migrate-incoming's, waited for as QEMU waits, and the
 * TLS of the parameters then (the flags', or what migrate-set-parameters
 * made of them before migrate-incoming, as libvirt sets tls-creds) into
 * gl->incoming_tls.  0, or -EINTR when a signal or quit ended the wait.
 */
static int incoming_uri(struct migrate_glue *gl)
{
	int r = 0;

	pthread_mutex_lock(&gl->lock);
	if (strcmp(gl->o->incoming, GLUE_INCOMING_DEFER))
		snprintf(gl->incoming_uri, sizeof(gl->incoming_uri), "%s", gl->o->incoming);
	else
		pr_vmm("waiting for QMP migrate-incoming on %s\n", gl->o->control);
	while (!gl->incoming_uri[0] && !gl->incoming_signo && !gl->incoming_quit)
		pthread_cond_wait(&gl->cond, &gl->lock);
	if (gl->incoming_signo) {
		pr_vmm("stopped by signal %d before migrate-incoming\n", gl->incoming_signo);
		r = -EINTR;
	} else if (gl->incoming_quit) {
		pr_vmm("quit before migrate-incoming\n");
		r = -EINTR;
	}
	gl->incoming_tls = gl->params.tls;
	pthread_mutex_unlock(&gl->lock);
	return r;
}

/* Listens at gl->incoming_uri: 0, or -errno after a message. */
static int listen_incoming(struct migrate_glue *gl, struct ram *ram)
{
	struct mig_opts m = glue_lib_opts(gl, gl->incoming_uri);
	struct mig_dest *dest;
	char err[400];
	int signo, quit;

	m.tls.creds_dir = gl->incoming_tls.creds_dir[0] ? gl->incoming_tls.creds_dir : NULL;
	m.tls.psk_file = gl->incoming_tls.psk_file[0] ? gl->incoming_tls.psk_file : NULL;
	/* With a control socket, a broken postcopy waits for migrate-recover (QEMU's). */
	if (!m.recover_ms && gl->o->control)
		m.recover_ms = MIG_RECOVER_BY_COMMAND;
	if (!ram_is_lazy(ram)) {
		pr_vmm("--incoming needs lazy RAM\n");
		return -EINVAL;
	}
	dest = mig_dest_listen(&m, err, sizeof(err));
	if (!dest) {
		pr_vmm("%s\n", err);
		return -EADDRINUSE;
	}
	pthread_mutex_lock(&gl->lock); /* the signal watch and quit read it */
	gl->dest = dest;
	signo = gl->incoming_signo;
	quit = gl->incoming_quit;
	pthread_mutex_unlock(&gl->lock);
	if (signo || quit) {
		if (signo)
			pr_vmm("stopped by signal %d before the migration started\n", signo);
		else
			pr_vmm("quit before the migration started\n");
		return -EINTR;
	}
	if (glue_start_incoming_events(gl))
		return -EAGAIN;
	if (!m.tls.creds_dir && !m.tls.psk_file)
		pr_vmm("warning: plain TCP (no --tls-creds or --tls-psk): anyone who can reach "
		       "%s can send this VMM a VM, and anyone on the path can read the guest's "
		       "memory and the session secret (docs/security.md)\n",
		       gl->incoming_uri);
	return 0;
}

/*
 * The RAM owns the source (and destroys it in ram_destroy(), after
 * migrate_finish()); it is only asked for pages while the fault thread
 * runs, which migrate_finish() stops first.
 */
static int start_page_source(struct migrate_glue *gl, struct ram *ram)
{
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
	return 0;
}

/*
 * The vCPU threads exist before the state arrives, parked: at the
 * switch-over only the state load and a wake-up remain
 * (migrate_started() resumes them; vm_start() starts no thread twice).
 */
static int park_vcpus(struct migrate_glue *gl)
{
	int r = vm_pause(gl->vm);
	if (!r)
		r = vm_start(gl->vm);
	if (r)
		pr_vmm("cannot start the vCPU threads: %s\n", strerror(-r));
	return r;
}

/* The signal watch, and the URI (with --incoming defer: migrate-incoming's). */
static int incoming_setup(struct migrate_glue *gl)
{
	int r = glue_watch_signals(gl);

	if (!r)
		r = incoming_uri(gl);
	return r;
}

int glue_prepare_incoming(struct migrate_glue *gl)
{
	struct ram *ram = vm_ram(gl->vm);
	struct mig_dest *dest;
	char err[400];
	int r = incoming_setup(gl);

	if (!r)
		r = listen_incoming(gl, ram);
	if (!r)
		r = start_page_source(gl, ram);
	if (!r)
		r = park_vcpus(gl);
	if (r) {
		glue_stop_signal_watch(gl);
		return r;
	}
	pr_vmm("waiting for an incoming migration on %s\n", gl->incoming_uri);
	r = mig_dest_incoming(gl->dest, &gl->dest_vm, err, sizeof(err));
	if (r)
		glue_stop_signal_watch(gl);
	if (r) {
		pr_vmm("incoming migration failed: %s\n", err);
		write_dest_metrics(gl);
		ram_stop_faults(ram);
		glue_stop_incoming_events(gl);
		pthread_mutex_lock(&gl->lock); /* a quit may be aborting it: it holds the lock */
		dest = gl->dest;
		gl->dest = NULL;
		pthread_mutex_unlock(&gl->lock);
		mig_dest_free(dest);
		return r;
	}
	return 0;
}

static int vcpu_of_thread(void *vm, uint32_t tid)
{
	return vm_vcpu_of_thread(vm, tid);
}

/*
 * QEMU's postcopy-blocktime, set at the destination (QEMU asks it there):
 * counting starts before the vCPUs run, as QEMU's starts when its postcopy
 * listens.  A back end that does not say which thread faulted gives no
 * figures, as QEMU gives none on a kernel without UFFD_FEATURE_THREAD_ID.
 */
static void start_blocktime(struct migrate_glue *gl)
{
	struct ram *ram = vm_ram(gl->vm);
	int on, r;

	pthread_mutex_lock(&gl->lock);
	on = !!(gl->params.caps & GLUE_CAP_BIT(GLUE_CAP_POSTCOPY_BLOCKTIME));
	pthread_mutex_unlock(&gl->lock);
	if (!on)
		return;
	r = ram_blocktime_start(ram, gl->vm->nr_vcpus, vcpu_of_thread, gl->vm);
	if (r == -EOPNOTSUPP)
		pr_vmm("postcopy-blocktime: no figures: the RAM back end %s does not say which "
		       "thread faulted\n",
		       ram_backend(ram)->name);
	else if (r)
		pr_vmm("postcopy-blocktime: no figures: %s\n", strerror(-r));
}

/*
 * QEMU's figures of blocked vCPU time, in query-migrate at the destination
 * once completed (as QEMU's: fill_destination_postcopy_migration_info()),
 * when counted: ms, the total of all vCPUs blocked at once and each vCPU's.
 */
void glue_incoming_blocktime(struct migrate_glue *gl, struct json_object *o)
{
	uint64_t all, vcpu[GUEST_MAX_CPUS];
	struct json_object *list;
	int n;

	if (mig_dest_phase(gl->dest) != MIG_PHASE_COMPLETED)
		return;
	n = ram_blocktime_get(vm_ram(gl->vm), &all, vcpu, GUEST_MAX_CPUS);
	if (n < 0)
		return;
	list = json_object_new_array();
	for (int i = 0; i < n && i < GUEST_MAX_CPUS; i++)
		json_object_array_add(list, json_object_new_int64((int64_t)(vcpu[i] / 1000)));
	json_object_object_add(o, "postcopy-blocktime",
			       json_object_new_int64((int64_t)(all / 1000)));
	json_object_object_add(o, "postcopy-vcpu-blocktime", list);
}

int glue_incoming_started(struct migrate_glue *gl)
{
	start_blocktime(gl);
	vm_resume(gl->vm); /* parked since glue_prepare_incoming() */
	mig_dest_resumed(gl->dest);
	glue_stop_signal_watch(gl);
	int r = pthread_create(&gl->watch, NULL, watch_thread, gl);
	if (r) {
		pr_vmm("cannot start the incoming migration's watch: %s\n", strerror(r));
		return -r;
	}
	gl->watch_on = 1;
	/*
	 * Running before RESUME, as QEMU's destination, whose clients cannot
	 * see between the two (its BQL): a client that acts on RESUME (cont,
	 * then query-status, as libvirt) must read "running", not
	 * "inmigrate" (CI: vmm-qmp-libvirt in a busy node).  A stop that
	 * comes between the two is taken, and its STOP then precedes RESUME.
	 */
	pthread_mutex_lock(&gl->lock);
	gl->inmigrate = 0;
	pthread_mutex_unlock(&gl->lock);
	if (gl->qmp)
		qmp_event(gl->qmp, "RESUME", NULL);
	return 0;
}

void glue_qmp_migrate_incoming(void *ctx, struct json_object *args, struct qmp_reply *reply)
{
	struct migrate_glue *gl = ctx;
	char uri[sizeof(gl->incoming_uri)], err[sizeof(reply->desc)];

	if (glue_arg_listen_uri(args, uri, sizeof(uri), reply))
		return;
	pthread_mutex_lock(&gl->lock);
	if (!gl->o->incoming || strcmp(gl->o->incoming, GLUE_INCOMING_DEFER))
		qmp_fail(reply, "'-incoming' was not specified on the command line: this VMM "
				"was not started with --incoming defer");
	else if (gl->incoming_uri[0])
		qmp_fail(reply, "The incoming migration has already been started");
	else if (glue_tls_endpoint(&gl->params.tls, true, err, sizeof(err)))
		qmp_fail(reply, "%s", err);
	else
		snprintf(gl->incoming_uri, sizeof(gl->incoming_uri), "%s", uri);
	pthread_cond_broadcast(&gl->cond);
	pthread_mutex_unlock(&gl->lock);
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

/*
 * Wait for the watch, which ends with the incoming migration.  After a
 * quit, a postcopy that is (or becomes) paused with recovery by command
 * waits for this destination's migrate-recover, which nobody can send any
 * more (the control socket is closed by now: migrate_finish()), or for the
 * source's resume to the first address, for a VM that quit stopped: it is
 * given up there, the VM lost (the watch exits VMM_EXIT_ERROR), as QEMU's
 * quit ends a destination at once.  The VMM stayed, without end, after its
 * quit was answered.  A guest that ended by itself still waits.
 */
static void wait_incoming_end(struct migrate_glue *gl)
{
	enum mig_phase p = MIG_PHASE_NONE;
	int status = 0;

	vm_wait(gl->vm, 0, &status);
	while (status == -EINTR && gl->o->control && !gl->o->param[MIG_P_RECOVER_MS] &&
	       p != MIG_PHASE_COMPLETED && p != MIG_PHASE_FAILED) {
		p = mig_dest_phase_wait(gl->dest, p, 1000);
		if (p != MIG_PHASE_RECOVER)
			continue;
		pr_vmm("the destination VMM was told to quit while its postcopy was paused: the "
		       "migration failed\n");
		mig_dest_abort(gl->dest,
			       "the destination VMM was told to quit while its postcopy "
			       "was paused (no migrate-recover can come: its control socket "
			       "is closed)");
		break;
	}
	pthread_join(gl->watch, NULL);
}

void glue_incoming_finish(struct migrate_glue *gl)
{
	glue_stop_signal_watch(gl);
	if (gl->watch_on) {
		stop_incoming_with_vm(gl, gl->vm);
		wait_incoming_end(gl);
	}
	glue_stop_incoming_events(gl);
	if (gl->dest) {
		/* The fault thread calls into the library: stop it first. */
		ram_stop_faults(vm_ram(gl->vm));
		mig_dest_free(gl->dest);
		gl->dest = NULL;
	}
}
