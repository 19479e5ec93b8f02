// SPDX-License-Identifier: GPL-2.0
/*
 * Where each vCPU is, said when the VM is stopped from outside (a signal:
 * an operator's, or a test's hang guard).  A guest that hangs on a page
 * that never comes looks, from outside, like one that is merely slow; here
 * its vCPU shows asleep in the kernel (wchan, and the kernel stack where
 * this process may read it: as root) beside the state the VMM keeps.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

void vm_report_vcpus(struct vm *vm)
{
	static const char *const names[] = { "running", "parked", "halted", "exited" };
	char where[400];

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
	}
}
