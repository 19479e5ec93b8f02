// SPDX-License-Identifier: GPL-2.0
/*
 * kvm-exit: the seeds' fast path, on the patched node kernel only.
 * Guest RAM is MADV_USERFAULT and no userfaultfd claims it, so a missing
 * page is never reported to a fault thread: KVM stops the vCPU
 * (KVM_RUN fails with EFAULT, exit KVM_EXIT_MEMORY_FAULT naming the gpa)
 * and any other thread touching it takes SIGBUS.  The faulting thread
 * serves its own fault through ram_fault_wait() (wait.c): it claims the
 * page in the record, asks the source, and sleeps on the record until
 * some thread installs the page.  Installs move the page in with
 * remap_anon_pages() as the userfault back end does; there is no kernel
 * wait to end, so wake() has nothing to do (the record's install wakes
 * the waiters, ram_waiters_end()).
 *
 * The VMM must handle the exit (vmm/vm.c) and must make every access of
 * its own threads to guest RAM go through ram_ensure() first: that part,
 * and the check that KVM gives the exit (KVM_CAP_MEMORY_FAULT_INFO), is
 * the VMM's, since this library knows no KVM.  Never chosen by "auto".
 */
#include <errno.h>
#include <sys/mman.h>

#include "compat/userfault.h"
#include "internal.h"

/* MADV_USERFAULT on a scratch page: a stock kernel refuses the advice (EINVAL). */
static int kvm_exit_probe(void)
{
	void *p = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int r;

	if (p == MAP_FAILED)
		return -ENOMEM;
	r = madvise(p, PAGE_SIZE, MADV_USERFAULT) < 0 ? -EOPNOTSUPP : 0;
	munmap(p, PAGE_SIZE);
	return r;
}

static int kvm_exit_arm(struct ram *ram)
{
	if (madvise(ram->host, ram->size, MADV_USERFAULT) < 0)
		return errno == EINVAL ? -EOPNOTSUPP : -errno;
	ram->fault_tids = true; /* ram_fault_wait()'s caller says who it is */
	return 0;
}

/* No descriptor: the fault thread only waits for kicks and the source's replies. */
static int kvm_exit_fault_fd(struct ram *ram)
{
	(void)ram;
	return -1;
}

static int kvm_exit_read_faults(struct ram *ram, uint64_t *offs, uint32_t *tids, int max)
{
	(void)ram, (void)offs, (void)tids, (void)max;
	return 0;
}

static int kvm_exit_install(struct ram *ram, uint64_t off, void *page)
{
	return ram_rap_install(ram, off, page);
}

/* A run of pages in as few moves as the kernel allows (a TLB flush each): the pages already there. */
static int kvm_exit_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_install_run(ram, off, pages, len, &there);

	return r < 0 ? r : (int)there;
}

static int kvm_exit_zero(struct ram *ram, uint64_t off, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_zero(ram, off, len, &there);

	return r == 0 && there ? -EEXIST : r;
}

/* A run of zero pages in as few moves as it can (a TLB flush each): the pages already there. */
static int kvm_exit_zero_run(struct ram *ram, uint64_t off, uint64_t len)
{
	uint64_t there;
	int r = ram_rap_zero(ram, off, len, &there);

	return r < 0 ? r : (int)there;
}

static int kvm_exit_wake(struct ram *ram, uint64_t off, uint64_t len)
{
	(void)ram, (void)off, (void)len;
	return 0;
}

/* Flag off: a thread that touches a missing page from now on gets zero-fill, not SIGBUS. */
static void kvm_exit_disarm(struct ram *ram)
{
	madvise(ram->host, ram->size, MADV_NOUSERFAULT);
}

const struct ram_backend_ops ram_backend_kvm_exit = {
	.name = "kvm-exit",
	.moves_pages = true,
	.own_thread_faults = true,
	.needs =
	    "MADV_USERFAULT and remap_anon_pages() (the patched node kernel, "
	    "kernel-patches/0002, 0003) and KVM_EXIT_MEMORY_FAULT on unclaimed guest RAM (0005)",
	.probe = kvm_exit_probe,
	.arm = kvm_exit_arm,
	.fault_fd = kvm_exit_fault_fd,
	.read_faults = kvm_exit_read_faults,
	.install = kvm_exit_install,
	.install_run = kvm_exit_install_run,
	.zero = kvm_exit_zero,
	.zero_run = kvm_exit_zero_run,
	.wake = kvm_exit_wake,
	.disarm = kvm_exit_disarm,
};
