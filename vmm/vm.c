// SPDX-License-Identifier: GPL-2.0
/*
 * vm: KVM VM life cycle and the vCPU threads.
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
#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "compat/kvm-memory-fault.h"
#include "vmm/guest-port.h"
#include "vmm/memfault.h"
#include "vmm/serial.h"
#include "vmm/util.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

#define KICK_SIGNAL   SIGUSR1
#define RAM_SLOT      0 /* RAM below 3 GiB, at guest-physical 0 */
#define RAM_HIGH_SLOT 1 /* the rest, from guest-physical 4 GiB */

static void kick_handler(int sig)
{
	(void)sig;
}

int vm_register_pio(struct vm *vm, struct pio_device *dev)
{
	if (vm->nr_devs == VM_MAX_DEVICES)
		return -ENOSPC;
	vm->devs[vm->nr_devs++] = dev;
	return 0;
}

/* Atomic store: vm_pause() reads the state without the lock while it spins. */
static void set_state(struct vcpu *vcpu, enum vcpu_state st)
{
	__atomic_store_n(&vcpu->state, st, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&vcpu->vm->cond);
}

void vcpu_park(struct vcpu *vcpu)
{
	pthread_mutex_lock(&vcpu->vm->lock);
	set_state(vcpu, VCPU_HALTED);
	pthread_mutex_unlock(&vcpu->vm->lock);
}

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
			set_state(vcpu, VCPU_PARKED);
		pthread_cond_wait(&vm->cond, &vm->lock);
	}
	if (vcpu->state == VCPU_PARKED)
		set_state(vcpu, VCPU_RUNNING);
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
	set_state(vcpu, VCPU_EXITED);
	pthread_mutex_unlock(&vcpu->vm->lock);
	return NULL;
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

static void ram_failed(void *arg, int err)
{
	pr_err("guest RAM fault handling failed: %s", strerror(-err));
	vm_stop(arg, err);
}

static int create_vcpu(struct vm *vm, unsigned int id, int run_size)
{
	struct vcpu *vcpu = &vm->vcpus[id];

	vcpu->vm = vm;
	vcpu->id = id;
	vcpu->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, id);
	if (vcpu->fd < 0)
		return -errno;
	vcpu->run_size = (size_t)run_size;
	vcpu->run = mmap(NULL, vcpu->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		vcpu->run = NULL;
		return -errno;
	}
	return x86_vcpu_init(vcpu);
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
static int ram_slot_set(struct vm *vm, uint32_t flags)
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
	return ram_slot_set(vm, on ? KVM_MEM_LOG_DIRTY_PAGES : 0);
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

/* KVM's vCPU limit: MAX_VCPUS, else NR_VCPUS, else 4 (the KVM API's default). */
static unsigned int kvm_max_vcpus(int kvm_fd)
{
	int n = ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);

	if (n <= 0)
		n = ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
	return n > 0 ? (unsigned int)n : 4;
}

/* A VM with nothing open yet (every fd -1), so that vm_destroy() takes it at any step. */
static struct vm *vm_alloc(const struct vm_config *cfg)
{
	struct vm *vm = calloc(1, sizeof(*vm));

	if (!vm)
		return NULL;
	vm->cfg = *cfg;
	vm->kvm_fd = vm->vm_fd = vm->event_fd = -1;
	for (int i = 0; i < GUEST_MAX_CPUS; i++)
		vm->vcpus[i].fd = -1;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_cond_init(&vm->cond, NULL);
	return vm;
}

/* /dev/kvm, checked for this VM's needs, the KVM VM and the event fd: 0 or -errno with *why. */
static int open_kvm_vm(struct vm *vm, const char **why)
{
	*why = "cannot open /dev/kvm";
	vm->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (vm->kvm_fd < 0)
		return -errno;
	*why = "KVM API version mismatch";
	if (ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		return -EPROTO;
	*why = "more vCPUs than this KVM supports (KVM_CAP_MAX_VCPUS)";
	if (vm->cfg.nr_vcpus > kvm_max_vcpus(vm->kvm_fd))
		return -EINVAL;
	*why = "KVM_CREATE_VM failed";
	vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0)
		return -errno;
	vm->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (vm->event_fd < 0)
		return -errno;
	return 0;
}

/* Guest RAM, reserved (and armed when lazy) and given to KVM: 0 or -errno with *why. */
static int create_ram(struct vm *vm, const char **why)
{
	int r;

	r = memfault_check_kvm(vm->kvm_fd, vm->cfg.lazy, why);
	if (r < 0)
		return r;
	*why = vm->cfg.lazy ? "cannot reserve and arm guest RAM" : "cannot reserve guest RAM";
	r = ram_create(vm->cfg.mem_size, vm->cfg.lazy, &vm->ram);
	if (r < 0)
		return r;
	ram_set_on_error(vm->ram, ram_failed, vm);
	if (vm->cfg.lazy && vm->cfg.lazy->own_thread_faults)
		memfault_guard_sigbus(vm);
	*why = "KVM refused the guest RAM";
	return ram_slot_set(vm, 0);
}

/* The vCPUs, their kvm_run mapped: 0 or -errno with *why. */
static int create_vcpus(struct vm *vm, const char **why)
{
	int r, run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);

	*why = "cannot create the vCPUs";
	if (run_size < (int)sizeof(struct kvm_run))
		return -EPROTO;
	vm->nr_vcpus = vm->cfg.nr_vcpus;
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		r = create_vcpu(vm, i, run_size);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The devices on the guest's ports: 0 or -errno with *why. */
static int create_devices(struct vm *vm, const char **why)
{
	int r;

	*why = "cannot create the devices";
	r = serial_init(vm, vm->cfg.console_fd, &vm->serial);
	if (r < 0)
		return r;
	return guest_port_init(vm);
}

/* The CPUs this process may run on (its affinity), 1 if unknown. */
static unsigned int host_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return (unsigned int)CPU_COUNT(&set);
}

int vm_create(const struct vm_config *cfg, struct vm **out, const char **why)
{
	struct sigaction sa = { .sa_handler = kick_handler };
	struct vm *vm;
	int r;

	*why = "invalid VM geometry";
	if (!cfg->nr_vcpus || cfg->nr_vcpus > GUEST_MAX_CPUS || !cfg->mem_size ||
	    cfg->mem_size % PAGE_SIZE || cfg->mem_size > GUEST_MAX_MEM)
		return -EINVAL;
	vm = vm_alloc(cfg);
	if (!vm)
		return -ENOMEM;
	vm->pause_spins = cfg->nr_vcpus < host_cpus();
	sigemptyset(&sa.sa_mask);
	sigaction(KICK_SIGNAL, &sa, NULL);

	r = open_kvm_vm(vm, why);
	if (r < 0)
		goto fail;
	*why = "cannot query KVM's CPUID, MSRs or XSAVE size";
	r = x86_vm_init(vm);
	if (r < 0)
		goto fail;
	r = create_ram(vm, why);
	if (r < 0)
		goto fail;
	r = create_vcpus(vm, why);
	if (r < 0)
		goto fail;
	r = create_devices(vm, why);
	if (r < 0)
		goto fail;
	*why = "";
	*out = vm;
	return 0;
fail:
	vm_destroy(vm);
	return r;
}

int vm_boot_image(struct vm *vm, const char *path, const char *cmdline, void *mem, const char **why)
{
	uint64_t entry;
	int r;

	if (!mem && ram_is_lazy(vm->ram)) {
		*why = "lazy RAM needs a staging buffer";
		return -EINVAL;
	}
	r = x86_boot_build(mem ? mem : ram_host(vm->ram), ram_bytes(vm->ram), vm->nr_vcpus,
			   vm->tsc_khz, path, cmdline, &entry, why);
	if (r < 0)
		return r;
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		r = x86_vcpu_boot(&vm->vcpus[i], entry);
		if (r < 0) {
			*why = "cannot set the boot registers";
			return r;
		}
	}
	return 0;
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
	while (!all_out(vm))
		pthread_cond_wait(&vm->cond, &vm->lock);
	pthread_mutex_unlock(&vm->lock);
	if (vm->serial)
		serial_flush(vm->serial);
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
		free(vcpu->cpuid);
		vcpu->cpuid = NULL;
	}
	serial_exit(vm->serial);
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
