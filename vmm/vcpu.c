// SPDX-License-Identifier: GPL-2.0
/*
 * The vCPU threads: KVM_RUN in a loop on each vCPU's own thread, its exits
 * handled (port I/O to the devices, a halt, a missing page of lazy RAM
 * through memfault.c), pauses and stops obeyed (vm.c says how a vCPU is
 * kicked out of KVM_RUN, and the locking).
 */
#include <errno.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "compat/kvm-memory-fault.h"
#include "vm-internal.h"
#include "vmm/memfault.h"
#include "vmm/util.h"
#include "vmm/vm.h"

static struct pio_device *find_pio(struct vm *vm, uint16_t port)
{
	for (unsigned int i = 0; i < vm->nr_devs; i++) {
		struct pio_device *d = vm->devs[i];

		if (port >= d->base && port - d->base < d->len)
			return d;
	}
	return NULL;
}

static void handle_io(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	uint8_t *data = (uint8_t *)run + run->io.data_offset;
	struct pio_device *dev = find_pio(vcpu->vm, run->io.port);
	bool out = run->io.direction == KVM_EXIT_IO_OUT;

	/* A stopped VM reports nothing more (see vm_destroy). */
	if (__atomic_load_n(&vcpu->vm->stopped, __ATOMIC_ACQUIRE))
		dev = NULL;
	for (uint32_t i = 0; i < run->io.count; i++, data += run->io.size) {
		if (dev)
			dev->io(vcpu, dev, run->io.port, out, data, run->io.size);
		else if (!out)
			memset(data, 0xff, run->io.size);
	}
}

/* After every KVM_RUN: KVM has stored the registers in run->s.regs on its way out. */
static void ran(struct vcpu *vcpu, int ret)
{
	if (ret == 0 || errno == EINTR || errno == EAGAIN)
		vcpu->regs_synced = vcpu->run->kvm_valid_regs != 0;
}

/*
 * A vCPU paused right after an I/O exit: KVM_RUN with immediate_exit set
 * completes the instruction (the guest's RIP moves past it, an IN's data
 * lands) and returns -EINTR without entering the guest.  Called with
 * vm->lock held, which keeps pause_req, and so immediate_exit, set.
 */
static void complete_io(struct vcpu *vcpu)
{
	ran(vcpu, ioctl(vcpu->fd, KVM_RUN, 0));
}

/*
 * Waits while paused (or forever once halted); false when the VM stops.
 * pending_io: the last exit was an I/O (or MMIO-on-RAM) exit, handled but not completed.
 */
static bool wait_runnable(struct vcpu *vcpu, bool pending_io)
{
	struct vm *vm = vcpu->vm;
	bool go;

	pthread_mutex_lock(&vm->lock);
	while (!vm->stopped && (vm->pause_req || vcpu->state == VCPU_HALTED)) {
		if (pending_io)
			complete_io(vcpu);
		pending_io = false;
		if (vcpu->state == VCPU_RUNNING)
			vcpu_set_state(vcpu, VCPU_PARKED);
		pthread_cond_wait(&vm->cond, &vm->lock);
	}
	if (vcpu->state == VCPU_PARKED)
		vcpu_set_state(vcpu, VCPU_RUNNING);
	go = !vm->stopped;
	pthread_mutex_unlock(&vm->lock);
	return go;
}

static void fail(struct vcpu *vcpu, int err, const char *what)
{
	struct kvm_regs regs;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &regs) == 0)
		pr_err("vcpu %u: %s (rip %#llx)", vcpu->id, what, (unsigned long long)regs.rip);
	else
		pr_err("vcpu %u: %s", vcpu->id, what);
	vm_stop(vcpu->vm, err);
}

/*
 * What the vCPU's last KVM_RUN exited for; true when it was an I/O exit, or
 * an MMIO exit on RAM (now handled, the instruction completes on re-entry).
 */
static bool handle_exit(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	int r;

	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		handle_io(vcpu);
		return true;
	case KVM_EXIT_HLT:
		vcpu_park(vcpu);
		break;
	case KVM_EXIT_INTR:
		break;
	case KVM_EXIT_SHUTDOWN:
		fail(vcpu, -EFAULT, "guest shut down (triple fault)");
		break;
	case KVM_EXIT_MMIO:
		r = vcpu_mmio_in_ram(vcpu);
		if (r == 0)
			return true; /* RAM whose page was missing (kvm-exit): completed like an I/O exit */
		if (r == -ECANCELED)
			break; /* stopping */
		if (r != -ERANGE) {
			fail(vcpu, r, "cannot serve a missing page");
			break;
		}
		pr_err("vcpu %u: guest accessed %#llx, outside RAM", vcpu->id,
		       (unsigned long long)run->mmio.phys_addr);
		fail(vcpu, -EFAULT, "access outside RAM");
		break;
	case KVM_EXIT_FAIL_ENTRY:
		fail(vcpu, -EIO, "VM entry failed");
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		fail(vcpu, -EIO, "KVM internal error");
		break;
	default:
		pr_err("vcpu %u: unexpected exit reason %u", vcpu->id, run->exit_reason);
		fail(vcpu, -EIO, "unexpected exit");
		break;
	}
	return false;
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *vcpu = arg;
	bool pending_io = false;
	int ret;

	/* Before it can fault on guest RAM: who faulted, for blocked vCPU time. */
	__atomic_store_n(&vcpu->tid, (uint32_t)gettid(), __ATOMIC_RELEASE);
	for (;;) {
		if (!wait_runnable(vcpu, pending_io))
			break;
		pending_io = false;
		ret = ioctl(vcpu->fd, KVM_RUN, 0);
		ran(vcpu, ret);
		if (ret < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				/* Kicked: a pause or stop is pending. */
				continue;
			}
			if (errno == EFAULT && vcpu->run->exit_reason == KVM_EXIT_MEMORY_FAULT) {
				/* A missing page (kvm-exit): served here, then the guest retries. */
				ret = vcpu_memory_fault(vcpu);
				if (ret == 0 || ret == -ECANCELED)
					continue;
				fail(vcpu, ret, "cannot serve a missing page");
				break;
			}
			fail(vcpu, -errno, "KVM_RUN failed");
			break;
		}
		pending_io = handle_exit(vcpu);
	}
	pthread_mutex_lock(&vcpu->vm->lock);
	vcpu_set_state(vcpu, VCPU_EXITED);
	pthread_mutex_unlock(&vcpu->vm->lock);
	return NULL;
}

int vm_start(struct vm *vm)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];
		if (vcpu->thread_started)
			continue; /* started paused before (an incoming migration) */
		int r = pthread_create(&vcpu->thread, NULL, vcpu_thread, vcpu);

		if (r) {
			vm_stop(vm, -r);
			return -r;
		}
		vcpu->thread_started = true;
	}
	return 0;
}
