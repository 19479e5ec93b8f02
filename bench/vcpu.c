// SPDX-License-Identifier: GPL-2.0
/*
 * bench-vcpu: the floors of a switch-over's downtime on this host, measured
 * on a VM running the guest program (this VMM's library, no migration):
 *
 *   pause   vm_pause() of the running guest, once it has passed over its
 *           memory WARM_ITER times: a signal kicks the vCPU thread
 *           out of KVM_RUN, the pauser spins until it parked.  Nothing else
 *           runs, so this is the pause step of a switch-over with the
 *           migration taken away: the host's kick of a vCPU in the guest.
 *   ioctl   one vCPU ioctl (KVM_GET_REGS) of the paused vCPU, from the
 *           pausing thread: what each GET or SET of the saved state costs
 *           (a save and a load are a handful of them).
 *
 * The guest is bench/run's at its anchor size: 256 MiB, the random workload
 * on 160 MiB.  JSON on stdout; an error on stderr and exit 1 without a
 * usable /dev/kvm.
 *
 * usage: bench-vcpu --guest GUEST.ELF [--rounds N]
 *        (N pauses, default 300, each after 2 ms of running; 10 N ioctls)
 */
#include <errno.h>
#include <json-c/json.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "vmm/util.h"
#include "vmm/vm.h"

#define GUEST_MEM  (256ULL << 20)
#define GUEST_ARGS "workload=random mem=160M seed=1 iters=1000000000 quiet=1"
#define WARM_ITER  3 /* bench/benchlib/common.py's TRIGGER_ITER */

/* {"n", "p50_us", "p99_us", "max_us"} of ns (sorted here). */
static json_object *stats(uint64_t *ns, size_t n)
{
	json_object *o = json_object_new_object();

	sort_u64(ns, n);
	json_object_object_add(o, "n", json_object_new_int64((int64_t)n));
	json_object_object_add(o, "p50_us", json_object_new_double(ns[n / 2] / 1000.0));
	json_object_object_add(o, "p99_us", json_object_new_double(ns[n * 99 / 100] / 1000.0));
	json_object_object_add(o, "max_us", json_object_new_double(ns[n - 1] / 1000.0));
	return o;
}

static int start_guest(const char *guest, struct vm **vm)
{
	struct vm_config cfg = { .mem_size = GUEST_MEM, .nr_vcpus = 1, .console_fd = -1 };
	const char *why = "";
	int r = vm_create(&cfg, vm, &why);

	if (!r)
		r = vm_boot_image(*vm, guest, GUEST_ARGS, NULL, &why);
	if (!r && (r = vm_start(*vm)) < 0)
		why = "cannot start the vCPU";
	if (r < 0)
		fprintf(stderr, "bench-vcpu: %s: %s\n", why, strerror(-r));
	return r;
}

/*
 * Until the guest reported WARM_ITER passes, as bench/run's migrations wait
 * for (TRIGGER_ITER): before, the guest is still touching its memory for
 * the first time, and a pause then took 3-6 ms here, not 70 us.  -ETIMEDOUT
 * after a minute.
 */
static int wait_warm(struct vm *vm)
{
	struct guest_report rep;
	uint64_t n, end = now_ns() + 60000000000ULL;

	do {
		usleep(10000);
		vm_last_report(vm, &rep, &n);
		if (rep.kind == GUEST_REPORT_PROGRESS && rep.iter >= WARM_ITER)
			return 0;
	} while (now_ns() < end && !vm_is_stopped(vm));
	fprintf(stderr, "bench-vcpu: the guest did not report pass %d within a minute\n",
		WARM_ITER);
	return -ETIMEDOUT;
}

/* N pauses of the running guest, 10 N ioctls while paused; -errno. */
static int measure(struct vm *vm, size_t n, uint64_t *pause_ns, uint64_t *ioctl_ns)
{
	struct kvm_regs regs;

	if (wait_warm(vm))
		return -ETIMEDOUT;
	for (size_t i = 0; i < n; i++) {
		uint64_t t0 = now_ns();
		int r = vm_pause(vm);

		pause_ns[i] = now_ns() - t0;
		for (size_t k = 0; !r && k < 10; k++) {
			t0 = now_ns();
			if (ioctl(vm->vcpus[0].fd, KVM_GET_REGS, &regs) < 0)
				r = -errno;
			ioctl_ns[i * 10 + k] = now_ns() - t0;
		}
		if (r || (r = vm_resume(vm)) < 0 || vm_is_stopped(vm)) {
			fprintf(stderr, "bench-vcpu: the guest stopped or a pause failed\n");
			return r ? r : -ESHUTDOWN;
		}
		usleep(2000);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *guest = NULL;
	uint64_t rounds = 300, *pause_ns, *ioctl_ns;
	struct vm *vm;
	json_object *out;
	int r;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--guest"))
			guest = argv[i + 1];
		else if (strcmp(argv[i], "--rounds") ||
			 parse_u64(argv[i + 1], 0, UINT64_MAX, &rounds))
			guest = NULL, argc = 0;
	}
	if (!guest || argc % 2 == 0 || rounds < 1 || rounds > 100000) {
		fprintf(stderr, "usage: bench-vcpu --guest GUEST.ELF [--rounds N]  (1..100000)\n");
		return 2;
	}
	pause_ns = calloc(rounds, sizeof(uint64_t));
	ioctl_ns = calloc(rounds * 10, sizeof(uint64_t));
	if (!pause_ns || !ioctl_ns || start_guest(guest, &vm) < 0)
		return 1;
	r = measure(vm, rounds, pause_ns, ioctl_ns);
	vm_stop(vm, 0);
	vm_destroy(vm);
	if (r < 0)
		return 1;
	out = json_object_new_object();
	json_object_object_add(out, "guest", json_object_new_string(GUEST_ARGS));
	json_object_object_add(out, "pause", stats(pause_ns, rounds));
	json_object_object_add(out, "ioctl", stats(ioctl_ns, rounds * 10));
	printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PRETTY));
	json_object_put(out);
	free(pause_ns);
	free(ioctl_ns);
	return 0;
}
