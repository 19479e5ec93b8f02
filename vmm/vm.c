// SPDX-License-Identifier: GPL-2.0
/*
 * vm: the KVM VM's core, which every other file of the VM builds on: its
 * devices' registry, its RAM's memslots and dirty log, pause, resume,
 * stop, wait, destroy.  Its creation is vm-create.c's, the vCPU threads'
 * loop vcpu.c's: above this file, with the devices (vmm/hw/) and the
 * memory faults (memfault.c) between, so that nothing here calls them.
 *
 * Locking: vm->lock protects pause_req, stopped, exit_status, every
 * vcpu->state and the guest-port state; vm->cond signals any change.
 *
 * Getting a vCPU out of KVM_RUN (pause, stop): set the flag under the
 * lock, set run->immediate_exit, then SIGUSR1 the thread.  immediate_exit
 * closes the race with a thread that checked the flag but has not entered
 * KVM_RUN yet; the signal interrupts one already inside.  A vCPU that
 * parks right after an I/O exit first re-enters KVM_RUN with
 * immediate_exit set, which completes the instruction, so the saved
 * registers are the post-instruction ones; it does so holding the lock
 * under which it saw the pause, so immediate_exit cannot be cleared by a
 * resume in between (the guest would run).  Only the vCPU's own thread
 * calls KVM_RUN (another thread would make KVM switch the vCPU's pid,
 * which costs a synchronize_rcu()).
 */
#include <errno.h>
#include <linux/kvm.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vm-internal.h"
#include "vmm/util.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

#define RAM_SLOT      0 /* RAM below 3 GiB, at guest-physical 0 */
#define RAM_HIGH_SLOT 1 /* the rest, from guest-physical 4 GiB */

int vm_register_pio(struct vm *vm, struct pio_device *dev)
{
	if (vm->nr_devs == VM_MAX_DEVICES)
		return -ENOSPC;
	vm->devs[vm->nr_devs++] = dev;
	return 0;
}

/* Atomic store: vm_pause() reads the state without the lock while it spins. */
void vcpu_set_state(struct vcpu *vcpu, enum vcpu_state st)
{
	__atomic_store_n(&vcpu->state, st, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&vcpu->vm->cond);
}

void vcpu_park(struct vcpu *vcpu)
{
	pthread_mutex_lock(&vcpu->vm->lock);
	vcpu_set_state(vcpu, VCPU_HALTED);
	pthread_mutex_unlock(&vcpu->vm->lock);
}

static void kick_all(struct vm *vm)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];

		__atomic_store_n(&vcpu->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
		if (vcpu->thread_started)
			pthread_kill(vcpu->thread, KICK_SIGNAL);
	}
}

unsigned int vm_ram_regions(const struct vm *vm, struct vm_ram_region *out)
{
	uint64_t low = guest_low_size(ram_bytes(vm->ram));

	out[0] = (struct vm_ram_region){ .gpa = 0, .size = low, .offset = 0 };
	if (ram_bytes(vm->ram) == low)
		return 1;
	out[1] = (struct vm_ram_region){ .gpa = GUEST_HIGH_GPA,
					 .size = ram_bytes(vm->ram) - low,
					 .offset = low };
	return 2;
}

/* One memslot per region, each a slice of the one RAM mapping. */
int vm_ram_slots_set(struct vm *vm, uint32_t flags)
{
	struct vm_ram_region r[VM_MAX_RAM_REGIONS];
	unsigned int n = vm_ram_regions(vm, r);

	for (unsigned int i = 0; i < n; i++) {
		struct kvm_userspace_memory_region region = {
			.slot = i ? RAM_HIGH_SLOT : RAM_SLOT,
			.flags = flags,
			.guest_phys_addr = r[i].gpa,
			.memory_size = r[i].size,
			.userspace_addr = (uintptr_t)ram_host(vm->ram) + r[i].offset,
		};

		if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &region) < 0)
			return -errno;
	}
	return 0;
}

int vm_dirty_log_set(struct vm *vm, bool on)
{
	return vm_ram_slots_set(vm, on ? KVM_MEM_LOG_DIRTY_PAGES : 0);
}

/* bitmap is by RAM page; the high slot's pages follow the low ones. */
int vm_dirty_log_fetch(struct vm *vm, uint64_t *bitmap)
{
	size_t words = (ram_nr_pages(vm->ram) + 63) / 64;
	uint64_t *fetched = calloc(words, sizeof(*fetched));
	struct vm_ram_region r[VM_MAX_RAM_REGIONS];
	unsigned int n = vm_ram_regions(vm, r);
	int ret = 0;

	_Static_assert(GUEST_LOW_MEM_MAX % (64 * PAGE_SIZE) == 0, "high slot starts on a word");
	if (!fetched)
		return -ENOMEM;
	for (unsigned int i = 0; i < n && !ret; i++) {
		struct kvm_dirty_log log = {
			.slot = i ? RAM_HIGH_SLOT : RAM_SLOT,
			.dirty_bitmap = fetched + r[i].offset / PAGE_SIZE / 64,
		};

		ret = ioctl(vm->vm_fd, KVM_GET_DIRTY_LOG, &log) < 0 ? -errno : 0;
	}
	for (size_t w = 0; !ret && w < words; w++)
		bitmap[w] |= fetched[w];
	free(fetched);
	return ret;
}

int vm_vcpu_of_thread(struct vm *vm, uint32_t tid)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		if (tid && __atomic_load_n(&vm->vcpus[i].tid, __ATOMIC_ACQUIRE) == tid)
			return (int)i;
	return -1;
}

static bool all_out(struct vm *vm)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];

		if (vcpu->thread_started &&
		    __atomic_load_n(&vcpu->state, __ATOMIC_ACQUIRE) == VCPU_RUNNING)
			return false;
	}
	return true;
}

/*
 * A kicked vCPU is out of KVM_RUN and parked within tens of microseconds.
 * Sleeping on vm->cond meanwhile would add this thread's own wake-up (a
 * futex wake and an IPI to an idle CPU, 10-40 us under PVM, measured) to a
 * migration's downtime, so the pause spins first, for a bounded while,
 * without the lock the vCPUs need to park.  Only when the vCPUs leave it a
 * CPU (vm->pause_spins): with two vCPUs on two CPUs the spinner took the
 * CPU a kicked vCPU needed, and vmm-api-test's pauses went from a mean of
 * 130-330 us to 750-980 us.
 */
#define PAUSE_SPIN_NS 2000000ULL

static void spin_until_out(struct vm *vm)
{
	uint64_t end = now_ns() + PAUSE_SPIN_NS;

	while (!all_out(vm) && now_ns() < end)
		__builtin_ia32_pause();
}

int vm_pause(struct vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	if (vm->stopped) {
		pthread_mutex_unlock(&vm->lock);
		return -ESHUTDOWN;
	}
	vm->pause_req = true;
	kick_all(vm);
	pthread_mutex_unlock(&vm->lock);
	if (vm->pause_spins)
		spin_until_out(vm);
	pthread_mutex_lock(&vm->lock);
	/*
	 * A stop ends the wait: a vCPU may wait in KVM for a page that does
	 * not come (our signal does not end that wait: vm_destroy()), and the
	 * pausing thread (stop's) must not keep the VMM from ending.
	 */
	while (!all_out(vm) && !vm->stopped)
		pthread_cond_wait(&vm->cond, &vm->lock);
	if (!all_out(vm)) {
		pthread_mutex_unlock(&vm->lock);
		return -ESHUTDOWN;
	}
	pthread_mutex_unlock(&vm->lock);
	/* What the guest wrote before the pause is out before the caller acts on it. */
	for (unsigned int i = 0; i < vm->nr_devs; i++)
		if (vm->devs[i]->flush)
			vm->devs[i]->flush(vm->devs[i]);
	return 0;
}

int vm_resume(struct vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		vm->vcpus[i].run->immediate_exit = 0;
	vm->pause_req = false;
	pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

void vm_stop(struct vm *vm, int status)
{
	uint64_t one = 1;

	pthread_mutex_lock(&vm->lock);
	if (!vm->stopped) {
		vm->stopped = true;
		vm->exit_status = status;
		kick_all(vm);
		/* A vCPU waiting for its own page (kvm-exit) returns and sees the stop. */
		ram_cancel_waits(vm->ram);
		pthread_cond_broadcast(&vm->cond);
		if (write(vm->event_fd, &one, sizeof(one)) < 0) {
			/* the eventfd cannot overflow with one write */
		}
	}
	pthread_mutex_unlock(&vm->lock);
}

int vm_wait(struct vm *vm, int timeout_ms, int *status)
{
	struct pollfd pfd = { .fd = vm->event_fd, .events = POLLIN };
	int r = poll(&pfd, 1, timeout_ms);

	if (r < 0)
		return -errno;
	if (r == 0)
		return 0;
	pthread_mutex_lock(&vm->lock);
	if (status)
		*status = vm->exit_status;
	pthread_mutex_unlock(&vm->lock);
	return 1;
}

bool vm_is_stopped(struct vm *vm)
{
	return __atomic_load_n(&vm->stopped, __ATOMIC_ACQUIRE);
}

void vm_last_report(struct vm *vm, struct guest_report *out, uint64_t *count)
{
	pthread_mutex_lock(&vm->lock);
	*out = vm->last_report;
	if (count)
		*count = vm->nr_reports;
	pthread_mutex_unlock(&vm->lock);
}

static bool wait_exited(struct vm *vm, int ms)
{
	struct timespec ts;
	bool done = false;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&vm->lock);
	for (;;) {
		done = true;
		for (unsigned int i = 0; i < vm->nr_vcpus; i++)
			if (vm->vcpus[i].thread_started && vm->vcpus[i].state != VCPU_EXITED)
				done = false;
		if (done || pthread_cond_timedwait(&vm->cond, &vm->lock, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&vm->lock);
	return done;
}

void vm_destroy(struct vm *vm)
{
	if (!vm)
		return;
	vm_stop(vm, 0);
	if (!wait_exited(vm, 500)) {
		/*
		 * A vCPU still sleeps on a missing page that will not come (the
		 * source is gone): our signal does not end KVM's wait for a
		 * user-space fault (seen on 6.1 and on 6.18).  Disarming lazy
		 * RAM wakes it; the VM is stopped, so nothing it computes from
		 * here on is reported (handle_io drops device I/O), and a second
		 * kick ends its KVM_RUN.
		 */
		if (vm->ram) {
			ram_stop_faults(vm->ram);
			ram_disarm(vm->ram);
		}
		pthread_mutex_lock(&vm->lock);
		kick_all(vm);
		pthread_mutex_unlock(&vm->lock);
	}
	for (unsigned int i = 0; i < GUEST_MAX_CPUS; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];

		if (vcpu->thread_started)
			pthread_join(vcpu->thread, NULL);
	}
	/* The fault thread may be serving a vCPU: stop it only after them. */
	if (vm->ram)
		ram_stop_faults(vm->ram);
	for (unsigned int i = 0; i < GUEST_MAX_CPUS; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];

		if (vcpu->run)
			munmap(vcpu->run, vcpu->run_size);
		if (vcpu->fd >= 0)
			close(vcpu->fd);
		if (vcpu->stats_fd >= 0)
			close(vcpu->stats_fd);
		free(vcpu->cpuid);
		vcpu->cpuid = NULL;
	}
	for (unsigned int i = vm->nr_devs; i-- > 0;)
		if (vm->devs[i]->destroy)
			vm->devs[i]->destroy(vm->devs[i]);
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	ram_destroy(vm->ram);
	x86_vm_exit(vm);
	if (vm->kvm_fd >= 0)
		close(vm->kvm_fd);
	if (vm->event_fd >= 0)
		close(vm->event_fd);
	pthread_mutex_destroy(&vm->lock);
	pthread_cond_destroy(&vm->cond);
	free(vm);
}
