// SPDX-License-Identifier: GPL-2.0
/*
 * A KVM VM made: /dev/kvm checked, the VM, guest RAM (armed when lazy),
 * the vCPUs, the devices on the guest's ports; and the boot image loaded.
 * Any step that fails leaves a VM vm_destroy() takes whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vm-internal.h"
#include "vmm/guest-port.h"
#include "vmm/memfault.h"
#include "vmm/serial.h"
#include "vmm/util.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

static void kick_handler(int sig)
{
	(void)sig;
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
	vcpu->stats_fd = ioctl(vcpu->fd, KVM_GET_STATS_FD, NULL);
	vcpu->run_size = (size_t)run_size;
	vcpu->run = mmap(NULL, vcpu->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		vcpu->run = NULL;
		return -errno;
	}
	return x86_vcpu_init(vcpu);
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
		vm->vcpus[i].fd = vm->vcpus[i].stats_fd = -1;
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
	return vm_ram_slots_set(vm, 0);
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
	r = serial_init(vm, vm->cfg.console_fd);
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
