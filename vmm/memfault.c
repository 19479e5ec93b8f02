// SPDX-License-Identifier: GPL-2.0
/*
 * memfault: guest RAM whose missing pages the VMM's own threads serve
 * (the kvm-exit back end; vmm/include/vmm/memfault.h).  Who does what:
 *
 *   vCPU thread   KVM_RUN fails with EFAULT, exit KVM_EXIT_MEMORY_FAULT:
 *                 vcpu_memory_fault() checks the gpa is RAM, and
 *                 ram_fault_wait() claims the page in the record, sends the
 *                 request (the migration's PAGE_REQUEST, on this thread)
 *                 and sleeps on the record until the page is PRESENT; then
 *                 KVM_RUN again, and the guest retries the access.
 *   fault thread  no userfaultfd to read: it still reads the urgent
 *                 channel's replies and installs them (through the record,
 *                 which wakes the vCPU), as do the push's receivers.
 *   other threads (the guest-port report, the snapshot) call
 *                 vm_ram_ensure() before they touch guest RAM; a thread
 *                 that forgets takes SIGBUS, and the guard below says so.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "compat/kvm-memory-fault.h"
#include "vmm/memfault.h"
#include "vmm/util.h"
#include "vmm/vm.h"

/* "N" or "0" in a KVM module parameter file: the feature is off.  Absent: unknown. */
static bool param_off(const char *path)
{
	char c = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == 'N' || c == '0';
}

int memfault_check_kvm(int kvm_fd, const struct ram_backend_ops *ops, const char **why)
{
	if (!ops || !ops->own_thread_faults)
		return 0;
	*why = "the kvm-exit RAM back end needs KVM_EXIT_MEMORY_FAULT on guest RAM that no "
	       "userfaultfd claims (KVM_CAP_MEMORY_FAULT_INFO), which this kernel's KVM lacks";
	if (ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_MEMORY_FAULT_INFO) <= 0)
		return -EOPNOTSUPP;
	*why = "the kvm-exit RAM back end needs two-dimensional paging (EPT/NPT), which KVM "
	       "has off here: under shadow paging a guest page table on a missing page gets the "
	       "guest a page fault instead of an exit";
	if (param_off("/sys/module/kvm_intel/parameters/ept") ||
	    param_off("/sys/module/kvm_amd/parameters/npt"))
		return -EOPNOTSUPP;
	return 0;
}

/* The RAM offset of guest-physical gpa, or -ERANGE when it is no RAM. */
static int64_t ram_offset(struct vm *vm, uint64_t gpa)
{
	struct vm_ram_region r[VM_MAX_RAM_REGIONS];
	unsigned int n = vm_ram_regions(vm, r);

	for (unsigned int i = 0; i < n; i++)
		if (gpa >= r[i].gpa && gpa - r[i].gpa < r[i].size)
			return (int64_t)(r[i].offset + (gpa - r[i].gpa));
	return -ERANGE;
}

/* Every page of [gpa, gpa + len) is RAM: wait for each.  -ERANGE where one is not. */
static int wait_gpa_range(struct vcpu *vcpu, uint64_t gpa, uint64_t len)
{
	struct ram *ram = vm_ram(vcpu->vm);
	uint64_t first = gpa & ~(uint64_t)(PAGE_SIZE - 1);

	if (!len || gpa + len < gpa)
		return -ERANGE;
	for (uint64_t p = first; p < gpa + len; p += PAGE_SIZE)
		if (ram_offset(vcpu->vm, p) < 0)
			return -ERANGE;
	for (uint64_t p = first; p < gpa + len; p += PAGE_SIZE) {
		int r =
		    ram_fault_wait(ram, (uint64_t)ram_offset(vcpu->vm, p) >> PAGE_SHIFT, vcpu->tid);

		if (r < 0)
			return r;
	}
	return 0;
}

int vcpu_memory_fault(struct vcpu *vcpu)
{
	struct compat_memory_fault mf = compat_memory_fault(vcpu->run);
	const struct ram_backend_ops *ops = ram_backend(vm_ram(vcpu->vm));
	int r;

	/* Consumed: an EFAULT of a later KVM_RUN that sets no exit is not this one again. */
	vcpu->run->exit_reason = KVM_EXIT_UNKNOWN;
	if (!ops || !ops->own_thread_faults)
		return -ECANCELED; /* disarmed meanwhile (teardown): the VM is stopping */
	if (mf.flags || mf.size > GUEST_MAX_MEM) {
		pr_err("vcpu %u: KVM_EXIT_MEMORY_FAULT with flags %#llx, size %#llx: not ours",
		       vcpu->id, (unsigned long long)mf.flags, (unsigned long long)mf.size);
		return -EFAULT;
	}
	r = wait_gpa_range(vcpu, mf.gpa, mf.size);
	if (r == -ERANGE) {
		pr_err("vcpu %u: KVM_EXIT_MEMORY_FAULT at %#llx (+%#llx), outside guest RAM",
		       vcpu->id, (unsigned long long)mf.gpa, (unsigned long long)mf.size);
		return -EFAULT;
	}
	return r;
}

int vcpu_mmio_in_ram(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	const struct ram_backend_ops *ops = ram_backend(vm_ram(vcpu->vm));
	uint64_t gpa = run->mmio.phys_addr, len = run->mmio.len;
	uint8_t *host;
	int r;

	if (!ops || !ops->own_thread_faults || len > sizeof(run->mmio.data))
		return -ERANGE;
	r = wait_gpa_range(vcpu, gpa, len);
	if (r < 0)
		return r;
	/* Both ends are RAM and RAM has no hole inside a region: one host range. */
	if (ram_offset(vcpu->vm, gpa + len - 1) - ram_offset(vcpu->vm, gpa) != (int64_t)len - 1)
		return -ERANGE;
	host = ram_host(vm_ram(vcpu->vm)) + ram_offset(vcpu->vm, gpa);
	if (run->mmio.is_write)
		memcpy(host, run->mmio.data, len);
	else
		memcpy(run->mmio.data, host, len);
	return 0;
}

int vm_ram_ensure(struct vm *vm, uint64_t off, uint64_t len)
{
	struct ram *ram = vm_ram(vm);
	uint64_t first = off >> PAGE_SHIFT;

	if (!len)
		return 0;
	if (off + len < off || off + len > ram_bytes(ram))
		return -ERANGE;
	return ram_ensure(ram, first, ((off + len - 1) >> PAGE_SHIFT) - first + 1,
			  (uint32_t)gettid());
}

/*
 * Guest RAM's range, for the SIGBUS handler: a signal handler can reach
 * no VM, so this is the one place the range is kept outside it.  Written
 * before any thread can touch the RAM, read only by the handler.
 */
static struct {
	uintptr_t base;
	uint64_t size;
} guarded;

/* Async-signal-safe: "0x" and 16 hex digits at out. */
static void hex64(char *out, uint64_t v)
{
	out[0] = '0';
	out[1] = 'x';
	for (int i = 0; i < 16; i++)
		out[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
}

static void say(const char *s, size_t n)
{
	if (write(2, s, n) < 0) {
		/* nothing more to say on a broken stderr */
	}
}

/* SA_RESETHAND: returning runs the access again, and the default action ends the process. */
static void sigbus_handler(int sig, siginfo_t *si, void *uc)
{
	static const char in[] = "vmm: SIGBUS: a VMM thread touched guest RAM at offset ";
	static const char why[] = " whose page has not arrived (kvm-exit back end: the access "
				  "did not ensure its page first); the VMM stops here rather "
				  "than go on without that page\n";
	static const char out[] = "vmm: SIGBUS at address ";
	uintptr_t a = (uintptr_t)si->si_addr;
	char hex[18];

	(void)sig, (void)uc;
	if (a >= guarded.base && a - guarded.base < guarded.size) {
		hex64(hex, a - guarded.base);
		say(in, sizeof(in) - 1);
		say(hex, sizeof(hex));
		say(why, sizeof(why) - 1);
	} else {
		hex64(hex, a);
		say(out, sizeof(out) - 1);
		say(hex, sizeof(hex));
		say(" (outside guest RAM)\n", 21);
	}
}

void memfault_guard_sigbus(struct vm *vm)
{
	struct sigaction sa = { .sa_sigaction = sigbus_handler,
				.sa_flags = SA_SIGINFO | SA_RESETHAND };

	guarded.base = (uintptr_t)ram_host(vm_ram(vm));
	guarded.size = ram_bytes(vm_ram(vm));
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}
