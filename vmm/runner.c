// SPDX-License-Identifier: GPL-2.0
/* The part of `vmm run` and `vmm restore` that is the same. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "vmm/builtin.h"
#include "vmm/runner.h"
#include "vmm/snapshot.h"
#include "vmm/util.h"
#include "vmm/vm-control.h"

static const char *arg_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		pr_err("%s needs a value", argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

int runner_parse_common(int argc, char **argv, int *i, struct run_opts *o)
{
	const char *a = argv[*i], *v;

	if (!strcmp(a, "--lazy")) {
		o->lazy = true;
	} else if (!strcmp(a, "--busy-poll")) {
		o->busy_poll = true;
	} else if (!strcmp(a, "--trace-reports")) {
		o->trace_reports = true;
	} else if (!strcmp(a, "--ram-backend")) {
		if (!(v = arg_value(argc, argv, i)))
			return -1;
		if (strcmp(v, "auto") && strcmp(v, "uffd") && strcmp(v, "uffd-move") &&
		    strcmp(v, "userfault") && strcmp(v, "kvm-exit")) {
			pr_err("unknown RAM back end '%s' (uffd, uffd-move, userfault, kvm-exit, "
			       "auto)",
			       v);
			return -1;
		}
		o->backend = v;
	} else if (!strcmp(a, "--save-after")) {
		if (!(v = arg_value(argc, argv, i)))
			return -1;
		/* As --migrate-after's: the deadline in ns and poll()'s int ms hold it. */
		if (parse_u64(v, 1, PARSE_AFTER_MS_MAX, &o->save_after_ms) < 0) {
			pr_err(
			    "--save-after: '%s' is not a positive number of milliseconds up to %u",
			    v, PARSE_AFTER_MS_MAX);
			return -1;
		}
		if (*i + 1 >= argc) {
			pr_err("--save-after needs MS and FILE");
			return -1;
		}
		o->save_path = argv[++*i];
	} else {
		return 0;
	}
	return 1;
}

static int lazy_backend(const struct run_opts *o, const struct ram_backend_ops **ops)
{
	int r;

	*ops = NULL;
	if (!o->lazy)
		return 0;
	r = ram_backend_find(o->backend, ops);
	if (r < 0) {
		const struct ram_backend_ops *named = ram_backend_named(o->backend);

		pr_err("RAM back end '%s' is not available on this kernel: %s%s%s%s", o->backend,
		       strerror(-r), named && named->needs ? " (it needs " : "",
		       named && named->needs ? named->needs : "", named && named->needs ? ")" : "");
		return r;
	}
	return 0;
}

/* SIGINT and SIGTERM are taken by runner_loop()'s signalfd, never delivered. */
static void block_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Refuse up front a guest bigger than the host's RAM and swap. */
static int check_host_ram(uint64_t mem_size)
{
	uint64_t limit = host_ram_limit();

	if (!limit || mem_size <= limit)
		return 0;
	pr_err("guest RAM of %" PRIu64 " MiB is more than this host can back: %" PRIu64
	       " MiB (MemTotal + SwapTotal in /proc/meminfo)",
	       mem_size >> 20, limit >> 20);
	return -ENOMEM;
}

int runner_create_vm(const struct run_opts *o, struct vm **vm)
{
	struct vm_config cfg = { .mem_size = o->mem_size,
				 .nr_vcpus = o->nr_vcpus,
				 .console_fd = 1,
				 .trace_reports = o->trace_reports };
	const char *why;
	int r = check_host_ram(o->mem_size);

	if (r < 0)
		return r;
	r = lazy_backend(o, &cfg.lazy);
	if (r < 0)
		return r;
	/* Before the VM's first thread: every thread inherits the mask. */
	block_signals();
	r = vm_create(&cfg, vm, &why);
	if (r < 0)
		pr_err("%s: %s", why, strerror(-r));
	return r;
}

static const char *const kind_names[] = { "none", "start", "progress", "done", "error" };

static void summary(struct vm *vm, int status, const struct run_opts *o)
{
	struct guest_report rep;
	const struct ram_backend_ops *lazy = ram_backend(vm_ram(vm));
	struct ram_stats st;
	uint64_t n;

	vm_last_report(vm, &rep, &n);
	if (status >= 0)
		pr_info("guest exited with status %d; reports %" PRIu64 ", last: %s iter=%" PRIu64
			" checksum=0x%016" PRIx64,
			status, n, rep.kind < ARRAY_SIZE(kind_names) ? kind_names[rep.kind] : "?",
			rep.iter, rep.checksum);
	if (lazy) {
		ram_get_stats(vm_ram(vm), &st);
		pr_info("lazy RAM: backend=%s%s faults=%" PRIu64 " served=%" PRIu64
			" installed=%" PRIu64 " zero=%" PRIu64 " dup=%" PRIu64 " late=%" PRIu64
			" present=%" PRIu64 "/%" PRIu64,
			lazy->name, o->busy_poll ? " (busy-poll)" : "", st.faults, st.requests,
			st.installed, st.zeroed, st.dup_faults, st.late_faults,
			ram_nr_present(vm_ram(vm)), ram_nr_pages(vm_ram(vm)));
		if (lazy->own_thread_faults)
			pr_info("lazy RAM: faults served on the faulting thread (KVM exits and VMM "
				"accesses): own=%" PRIu64,
				st.own_thread);
	}
}

/* The signalfd that takes SIGINT and SIGTERM (blocked: block_signals()); without one the VM stops. */
static int open_signalfd(struct vm *vm)
{
	sigset_t set;
	int sfd;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0) {
		pr_err("signalfd: %s", strerror(errno));
		vm_stop(vm, -errno);
	}
	return sfd;
}

/* The snapshot is written: say so, and stop the VM (not a guest exit). */
static void saved(struct vm *vm, const struct run_opts *o)
{
	struct guest_report rep;

	vm_last_report(vm, &rep, NULL);
	pr_info("saved state and RAM to %s after %" PRIu64 " ms (guest at iter %" PRIu64
		", checksum 0x%016" PRIx64 ")",
		o->save_path, o->save_after_ms, rep.iter, rep.checksum);
	vm_stop(vm, -EINTR);
}

/*
 * --save-after's time came: pause, write the snapshot, stop the VM.  The
 * VM's run state (vc; NULL: none, `vmm restore`) refuses it while a
 * migration has the VM or after it left, when the snapshot would be a
 * second copy of a VM that runs at the destination.  Refused or failed,
 * the VM runs on as it was (as QEMU's savevm resumes it): nothing is lost
 * but the snapshot.  0, or -errno after a message.
 */
static int save_and_stop(struct vm *vm, struct vm_control *vc, const struct run_opts *o)
{
	char buf[320];
	const char *why = vc ? vm_control_save_begin(vc, buf, sizeof(buf)) : NULL;
	int r;

	if (why) {
		pr_err("--save-after: not saved to %s: %s", o->save_path, why);
		return -EBUSY;
	}
	r = vm_pause(vm);
	if (r == 0)
		r = snapshot_write(vm, o->save_path);
	if (r == 0)
		saved(vm, o);
	else
		pr_err("cannot save to %s: %s; the VM runs on", o->save_path, strerror(-r));
	if (vc)
		vm_control_save_end(vc, r == 0);
	else if (r < 0)
		vm_resume(vm);
	return r;
}

/* poll()'s timeout until deadline (ns; 0: none): -1 for none, in ms rounded up. */
static int ms_until(uint64_t deadline)
{
	uint64_t now;

	if (!deadline)
		return -1;
	now = now_ns();
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/*
 * What the run exits with, for the VM's status (said, with the summary):
 * VMM_EXIT_ERROR too when the snapshot --save-after asked for was not
 * written (unsaved), whatever the VM did after.
 */
static int exit_status(struct vm *vm, int status, bool unsaved, const struct run_opts *o)
{
	int code = status;

	if (status == -EINTR) {
		code = 0;
	} else if (status < 0) {
		pr_err("VM failed: %s", strerror(-status));
		code = VMM_EXIT_ERROR;
	}
	summary(vm, status < 0 ? -1 : status, o);
	if (unsaved) {
		pr_err("--save-after: no snapshot was written to %s (said above)", o->save_path);
		code = VMM_EXIT_ERROR;
	}
	return code;
}

int runner_loop(struct vm *vm, const struct run_opts *o, struct vm_control *vc)
{
	struct signalfd_siginfo si;
	struct pollfd pfd[2];
	uint64_t deadline = o->save_after_ms ? now_ns() + o->save_after_ms * 1000000ULL : 0;
	int sfd = open_signalfd(vm), status = 0, r;
	bool unsaved = false;

	pfd[0] = (struct pollfd){ .fd = vm_event_fd(vm), .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	for (;;) {
		r = poll(pfd, 2, ms_until(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		if (vm_wait(vm, 0, &status) == 1)
			break;
		if (r > 0 && (pfd[1].revents & POLLIN) &&
		    read(sfd, &si, sizeof(si)) == sizeof(si)) {
			pr_info("stopped by signal %u", si.ssi_signo);
			vm_report_vcpus(vm);
			vm_stop(vm, 128 + (int)si.ssi_signo);
			continue;
		}
		if (r == 0 && deadline) {
			deadline = 0;
			unsaved = save_and_stop(vm, vc, o) < 0;
		}
	}
	if (sfd >= 0)
		close(sfd);
	return exit_status(vm, status, unsaved, o);
}
