// SPDX-License-Identifier: GPL-2.0
/*
 * The VM state blob: header, then typed sections (see vmm/state.h and
 * docs/vmm.md).  vm_state_save/load never touch files: the caller decides
 * where the bytes go (a snapshot file, a socket).  The sections are
 * state.c's; each vCPU's and device's are the architecture's (vmm/arch/).
 */
#include <errno.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "vmm/state.h"
#include "vmm/util.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

/*
 * CRC32C, with the CPU's crc32 instruction: a save and a load each check
 * the blob inside a migration's downtime (FNV-1a 64, byte by byte, took
 * 7.6 us for each of the 7.7 KB of a one-vCPU blob here).
 */
static uint64_t blob_checksum(const uint8_t *buf, size_t len)
{
	struct vm_state_header h;

	memcpy(&h, buf, sizeof(h));
	h.checksum = 0;
	return crc32c(crc32c(0, &h, sizeof(h)), buf + sizeof(h), len - sizeof(h));
}

static int write_all(struct vm *vm, struct state_writer *w)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *vcpu = &vm->vcpus[i];
		struct vm_state_vcpu vs = { .halted = vcpu->state == VCPU_HALTED };
		int r = x86_cpuid_save(vcpu, w);

		if (!r)
			r = x86_vcpu_save(vcpu, w); /* and the TSC, read with the MSRs */
		if (r < 0)
			return r;
		state_put(w, VM_STATE_VCPU, i, &vs, sizeof(vs));
	}
	for (unsigned int i = 0; i < vm->nr_devs; i++) {
		struct pio_device *dev = vm->devs[i];
		size_t n;

		if (!dev->save)
			continue;
		n = dev->save(dev, NULL, 0);
		if (w->buf) {
			uint8_t tmp[n ? n : 1];

			dev->save(dev, tmp, n);
			state_put(w, VM_STATE_DEVICE, dev->state_id, tmp, n);
		} else {
			state_put(w, VM_STATE_DEVICE, dev->state_id, NULL, n);
		}
	}
	return w->err;
}

ssize_t vm_state_size(struct vm *vm)
{
	struct state_writer w = { .pos = sizeof(struct vm_state_header) };
	int r = write_all(vm, &w);

	return r < 0 ? r : (ssize_t)w.pos;
}

ssize_t vm_state_save(struct vm *vm, void *buf, size_t len)
{
	struct state_writer w = { .buf = buf, .len = len, .pos = sizeof(struct vm_state_header) };
	struct vm_state_header h;
	int r;

	if (len < sizeof(h))
		return -ENOSPC;
	r = write_all(vm, &w);
	if (r < 0)
		return r;
	h = (struct vm_state_header){
		.magic = VM_STATE_MAGIC,
		.version = VM_STATE_VERSION,
		.header_size = sizeof(h),
		.total_size = w.pos,
		.mem_size = ram_bytes(vm->ram),
		.nr_vcpus = vm->nr_vcpus,
		.nr_sections = w.nr_sections,
	};
	memcpy(buf, &h, sizeof(h));
	h.checksum = blob_checksum(buf, w.pos);
	memcpy(buf, &h, sizeof(h));
	return (ssize_t)w.pos;
}

int vm_state_peek(const void *buf, size_t len, uint64_t *mem_size, unsigned int *nr_vcpus)
{
	struct vm_state_header h;

	if (len < sizeof(h))
		return -EBADMSG;
	memcpy(&h, buf, sizeof(h));
	if (h.magic != VM_STATE_MAGIC || h.header_size != sizeof(h))
		return -EBADMSG;
	if (h.version != VM_STATE_VERSION)
		return -EPROTONOSUPPORT;
	if (h.total_size != len)
		return -EBADMSG;
	if (h.checksum != blob_checksum(buf, len))
		return -EBADMSG;
	if (h.nr_vcpus == 0 || h.nr_vcpus > GUEST_MAX_CPUS || !h.mem_size ||
	    h.mem_size > GUEST_MAX_MEM || h.mem_size % PAGE_SIZE)
		return -EBADMSG;
	if (mem_size)
		*mem_size = h.mem_size;
	if (nr_vcpus)
		*nr_vcpus = h.nr_vcpus;
	return 0;
}

int vm_state_load(struct vm *vm, const void *buf, size_t len, char *why, size_t why_len)
{
	struct state_reader rd = { .buf = buf, .len = len };
	uint64_t mem_size;
	unsigned int nr_vcpus;
	int r = vm_state_peek(buf, len, &mem_size, &nr_vcpus);

	if (r < 0) {
		snprintf(why, why_len, "%s",
			 r == -EPROTONOSUPPORT ? "unsupported state version"
					       : "bad header, size or checksum");
		return r;
	}
	if (mem_size != ram_bytes(vm->ram) || nr_vcpus != vm->nr_vcpus) {
		snprintf(why, why_len, "state is for %llu bytes and %u vCPUs",
			 (unsigned long long)mem_size, nr_vcpus);
		return -EINVAL;
	}
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		const struct vm_state_vcpu *vs;
		size_t n;

		/* CPUID first: KVM checks the rest of the state against it. */
		r = x86_cpuid_load(&vm->vcpus[i], &rd, why, why_len);
		if (r < 0)
			return r;
		r = x86_vcpu_load(&vm->vcpus[i], &rd, why, why_len);
		if (r < 0)
			return r;
		r = x86_tsc_load(&vm->vcpus[i], &rd, why, why_len);
		if (r < 0)
			return r;
		vs = state_get(&rd, VM_STATE_VCPU, i, &n);
		if (!vs || n != sizeof(*vs)) {
			snprintf(why, why_len, "vCPU %u: section missing", i);
			return -EBADMSG;
		}
		vm->vcpus[i].state = vs->halted ? VCPU_HALTED : VCPU_RUNNING;
	}
	for (unsigned int i = 0; i < vm->nr_devs; i++) {
		struct pio_device *dev = vm->devs[i];
		const void *p;
		size_t n;

		if (!dev->load)
			continue;
		p = state_get(&rd, VM_STATE_DEVICE, dev->state_id, &n);
		r = p ? dev->load(dev, p, n) : -EBADMSG;
		if (r < 0) {
			snprintf(why, why_len, "device %u: state missing or refused",
				 dev->state_id);
			return r;
		}
	}
	return 0;
}
