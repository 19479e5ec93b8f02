// SPDX-License-Identifier: GPL-2.0
/*
 * Where each vCPU is, said when the VM is stopped from outside (a signal:
 * an operator's, or a test's hang guard).  A guest that hangs on a page
 * that never comes looks, from outside, like one that is merely slow; here
 * its vCPU shows asleep in the kernel (wchan, and the kernel stack where
 * this process may read it: as root) beside the state the VMM keeps.  A
 * vCPU that runs is shown with what KVM did for it meanwhile: a guest that
 * loops on its own exits to KVM, one that KVM keeps emulating (an
 * instruction, then a page fault injected, over and over) shows climbing
 * insn_emulation and pf_guest and no fault of its own (pf_taken).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "common/macros.h"
#include "vmm/util.h"
#include "vmm/vm.h"

/* /proc/self/task/TID/NAME into buf (NUL-terminated, trailing newline cut); false if unreadable. */
static bool read_task_file(uint32_t tid, const char *name, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%u/%s", tid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	if (buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	return true;
}

static void report_stack(uint32_t tid)
{
	char stack[2048], *save = NULL;

	if (!read_task_file(tid, "stack", stack, sizeof(stack)))
		return; /* not root, or no CONFIG_STACKTRACE */
	for (char *line = strtok_r(stack, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		pr_info("    %s", line);
}

/*
 * Where thread tid is in the kernel, into buf: its scheduler state (R
 * running, S asleep, D uninterruptible), the system call it is in (16 is
 * ioctl: KVM_RUN), and the kernel function it sleeps in where the kernel
 * has symbols.  Each part that cannot be read is left out.
 */
static void describe_task(uint32_t tid, char *buf, size_t len)
{
	char stat[512], sys[128], wchan[128], state = '?';
	const char *end;

	if (read_task_file(tid, "stat", stat, sizeof(stat)) && (end = strrchr(stat, ')')) &&
	    end[1] == ' ' && end[2])
		state = end[2];
	if (!read_task_file(tid, "syscall", sys, sizeof(sys)))
		snprintf(sys, sizeof(sys), "?");
	sys[strcspn(sys, " ")] = '\0';
	if (!read_task_file(tid, "wchan", wchan, sizeof(wchan)) || !strcmp(wchan, "0"))
		wchan[0] = '\0';
	snprintf(buf, len, "state %c, syscall %s%s%s", state, sys, wchan[0] ? ", waiting in " : "",
		 wchan);
}

/* KVM's counters the report shows, by their names in its binary statistics. */
static const char *const counter_names[] = { "exits", "insn_emulation", "pf_guest", "pf_taken" };
#define NR_COUNTERS	 ARRAY_SIZE(counter_names)
#define COUNTERS_SPAN_MS 200

/* The value of the one-number counter d of stats fd (header h) into *val; false if unreadable. */
static bool read_counter(int fd, const struct kvm_stats_header *h, const struct kvm_stats_desc *d,
			 uint64_t *val)
{
	return d->size == 1 &&
	       pread(fd, val, sizeof(*val), h->data_offset + d->offset) == sizeof(*val);
}

/*
 * counter_names into vals from a vCPU's stats fd (vcpu->stats_fd: -1 where
 * the kernel has no binary statistics); false without it or one of them.
 */
static bool read_counters(int fd, uint64_t *vals)
{
	struct kvm_stats_header h;
	unsigned int found = 0;
	char *descs = NULL;

	if (fd < 0)
		return false;
	if (pread(fd, &h, sizeof(h), 0) != sizeof(h) || h.num_desc > 4096 || h.name_size > 256)
		goto out;
	size_t stride = sizeof(struct kvm_stats_desc) + h.name_size, len = stride * h.num_desc;
	descs = malloc(len);
	if (!descs || pread(fd, descs, len, h.desc_offset) != (ssize_t)len)
		goto out;
	for (uint32_t i = 0; i < h.num_desc; i++) {
		const struct kvm_stats_desc *d = (const void *)(descs + i * stride);

		for (unsigned int k = 0; k < NR_COUNTERS; k++)
			if (!strncmp(d->name, counter_names[k], h.name_size) &&
			    read_counter(fd, &h, d, &vals[k]))
				found++;
	}
out:
	free(descs);
	return found == NR_COUNTERS;
}

/* "exits +N, insn_emulation +N, ..." from before to after into buf. */
static void describe_counters(const uint64_t *before, const uint64_t *after, char *buf, size_t len)
{
	size_t n = 0;

	for (unsigned int k = 0; k < NR_COUNTERS && n < len; k++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s +%" PRIu64, k ? ", " : "",
				      counter_names[k], after[k] - before[k]);
}

void vm_report_vcpus(struct vm *vm)
{
	static const char *const names[] = { "running", "parked", "halted", "exited" };
	uint64_t before[GUEST_MAX_CPUS][NR_COUNTERS];
	bool counted[GUEST_MAX_CPUS];
	char where[400], what[200];

	bool any = false;

	/* Only running vCPUs are counted, and only then is there a span to wait. */
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		pthread_mutex_lock(&vm->lock);
		counted[i] = vm->vcpus[i].state == VCPU_RUNNING;
		pthread_mutex_unlock(&vm->lock);
		counted[i] = counted[i] && read_counters(vm->vcpus[i].stats_fd, before[i]);
		any |= counted[i];
	}
	if (any)
		nanosleep(&(struct timespec){ .tv_nsec = COUNTERS_SPAN_MS * 1000000L }, NULL);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];
		uint32_t tid = __atomic_load_n(&vcpu->tid, __ATOMIC_ACQUIRE);
		enum vcpu_state state;

		pthread_mutex_lock(&vm->lock);
		state = vcpu->state;
		pthread_mutex_unlock(&vm->lock);
		if (tid)
			describe_task(tid, where, sizeof(where));
		else
			snprintf(where, sizeof(where), "no thread yet");
		pr_info("vcpu %u (thread %u): %s; kernel: %s", i, tid, names[state], where);
		if (tid && state == VCPU_RUNNING)
			report_stack(tid);
		uint64_t after[NR_COUNTERS];
		if (state == VCPU_RUNNING && counted[i] && read_counters(vcpu->stats_fd, after)) {
			describe_counters(before[i], after, what, sizeof(what));
			pr_info("vcpu %u: KVM in %d ms: %s", i, COUNTERS_SPAN_MS, what);
		}
	}
}
