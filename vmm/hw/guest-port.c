// SPDX-License-Identifier: GPL-2.0
/*
 * guest-port: the guest program's report and exit ports (vmm/guest-abi.h).
 * A report is a guest-physical address; the record is read from guest RAM
 * while the reporting vCPU is stopped in the I/O exit.  An exit ends the VM
 * with the guest's status.  State: the last report and the report count.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "vmm/guest-abi.h"
#include "vmm/guest-port.h"
#include "vmm/memfault.h"
#include "vmm/util.h"
#include "vmm/vm.h"

struct guest_port_state {
	struct guest_report last;
	uint64_t nr_reports;
};

static const char *const kind_names[] = { "?", "start", "progress", "done", "error" };

static void guest_port_io(struct vcpu *vcpu, struct pio_device *dev, uint16_t port, bool out,
			  void *data, int size)
{
	struct vm *vm = vcpu->vm;
	struct guest_report rep;
	uint32_t v = 0;

	if (!out) {
		memset(data, 0xff, (size_t)size);
		return;
	}
	memcpy(&v, data, (size_t)size);
	if (port == GUEST_PORT_EXIT) {
		if (v > GUEST_EXIT_MAX) {
			pr_err("guest exit status %" PRIu32 " is outside 0-%d (vmm/guest-abi.h)", v,
			       GUEST_EXIT_MAX);
			vm_stop(vm, -ERANGE);
			return;
		}
		vm_stop(vm, (int)v);
		return;
	}
	if (port == GUEST_PORT_PARK) {
		vcpu_park(vcpu);
		return;
	}
	if (port != GUEST_PORT_REPORT || size != 4)
		return;
	/* Below the hole, guest-physical = RAM offset. */
	if ((uint64_t)v + sizeof(rep) > guest_low_size(ram_bytes(vm->ram))) {
		pr_err("guest report at %#x is outside guest RAM: ignored", v);
		return;
	}
	/* A missing page (kvm-exit) first comes: it may have been written before a migration. */
	if (vm_ram_ensure(vm, v, sizeof(rep)) < 0)
		return; /* stopping */
	memcpy(&rep, ram_host(vm->ram) + v, sizeof(rep));
	if (rep.magic != GUEST_REPORT_MAGIC) {
		pr_err("guest report at %#x has a bad magic: ignored", v);
		return;
	}
	pthread_mutex_lock(&vm->lock);
	vm->last_report = rep;
	vm->nr_reports++;
	pthread_mutex_unlock(&vm->lock);
	if (vm->cfg.trace_reports)
		pr_info("report cpu=%u kind=%s iter=%" PRIu64 " ops=%" PRIu64
			" checksum=0x%016" PRIx64 " value=%" PRIu64,
			rep.cpu, rep.kind < ARRAY_SIZE(kind_names) ? kind_names[rep.kind] : "?",
			rep.iter, rep.ops, rep.checksum, rep.value);
}

static size_t guest_port_save(struct pio_device *dev, void *buf, size_t len)
{
	struct vm *vm = dev->priv;
	struct guest_port_state st;

	if (buf && len >= sizeof(st)) {
		pthread_mutex_lock(&vm->lock);
		st.last = vm->last_report;
		st.nr_reports = vm->nr_reports;
		pthread_mutex_unlock(&vm->lock);
		memcpy(buf, &st, sizeof(st));
	}
	return sizeof(st);
}

static int guest_port_load(struct pio_device *dev, const void *buf, size_t len)
{
	struct vm *vm = dev->priv;
	struct guest_port_state st;

	if (len != sizeof(st))
		return -EBADMSG;
	memcpy(&st, buf, sizeof(st));
	pthread_mutex_lock(&vm->lock);
	vm->last_report = st.last;
	vm->nr_reports = st.nr_reports;
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

int guest_port_init(struct vm *vm)
{
	vm->guest_port = (struct pio_device){
		.name = "guest-port",
		.base = GUEST_PORT_EXIT,
		.len = GUEST_PORT_PARK + 4 - GUEST_PORT_EXIT,
		.state_id = 2,
		.priv = vm,
		.io = guest_port_io,
		.save = guest_port_save,
		.load = guest_port_load,
	};
	return vm_register_pio(vm, &vm->guest_port);
}
