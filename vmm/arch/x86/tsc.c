// SPDX-License-Identifier: GPL-2.0
/*
 * Guest time across a save, a restore or a migration: the TSC value and its
 * frequency travel with the vCPU (section VM_STATE_TSC), so the guest never
 * sees its time stamp counter go backwards nor tick at another rate.
 *
 * The value is set through the vCPU's TSC offset (KVM_VCPU_TSC_OFFSET,
 * Linux 5.16+): read the TSC as the guest would now, move the offset by
 * the difference.  Writing IA32_TSC with KVM_SET_MSRS, the older way, is
 * only the fallback: KVM takes a host write for vCPU start-up
 * synchronisation when it lands within a second of the VM's age, and then
 * keeps (Linux 6.1 with a stable TSC) or adjusts the value.  Either way the
 * result is read back: a TSC behind the saved one fails the load.  One
 * ahead of it is accepted: PVM hosts (this project's) ignore TSC offsets
 * and show every guest the host's own TSC, so there a restored guest's
 * time includes the time it spent saved.
 */
#include <errno.h>
#include <linux/kvm.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include "vmm/state.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

static int tsc_msr(struct vcpu *vcpu, unsigned long op, uint64_t *value)
{
	struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry entry;
	} m = { .hdr.nmsrs = 1, .entry = { .index = MSR_IA32_TSC, .data = *value } };
	int n = ioctl(vcpu->fd, op, &m);

	if (n < 0)
		return -errno;
	if (n != 1)
		return -EIO;
	*value = m.entry.data;
	return 0;
}

void x86_tsc_init(struct vcpu *vcpu)
{
	struct kvm_device_attr attr = { .group = KVM_VCPU_TSC_CTRL, .attr = KVM_VCPU_TSC_OFFSET };
	int khz = ioctl(vcpu->fd, KVM_GET_TSC_KHZ, 0);

	if (khz > 0 && vcpu->id == 0)
		vcpu->vm->tsc_khz = (uint32_t)khz;
	vcpu->tsc_offset_attr = ioctl(vcpu->fd, KVM_HAS_DEVICE_ATTR, &attr) == 0;
}

int x86_tsc_save(struct vcpu *vcpu, struct state_writer *w, uint64_t tsc)
{
	struct vm_state_tsc t = { .tsc_khz = vcpu->vm->tsc_khz, .tsc = tsc };

	state_put(w, VM_STATE_TSC, vcpu->id, &t, sizeof(t));
	return w->err;
}

/*
 * Rates within TSC_RATE_TOLERANCE_PPM count as the same: two hosts of one
 * model calibrate their TSC a little differently (two TCG nodes here: 743
 * ppm apart), and KVM can only honour another rate with TSC scaling, which
 * many hosts lack.  Further apart, the rate must be set or the load fails.
 */
#define TSC_RATE_TOLERANCE_PPM 1000

static bool same_rate(uint32_t saved_khz, uint32_t host_khz)
{
	uint64_t diff = saved_khz > host_khz ? saved_khz - host_khz : host_khz - saved_khz;

	return !saved_khz || diff * 1000000 <= (uint64_t)host_khz * TSC_RATE_TOLERANCE_PPM;
}

/* Moves the vCPU's TSC offset so that its TSC reads `want` from now on. */
static int shift_tsc(struct vcpu *vcpu, uint64_t want)
{
	uint64_t offset, now = 0;
	struct kvm_device_attr attr = { .group = KVM_VCPU_TSC_CTRL,
					.attr = KVM_VCPU_TSC_OFFSET,
					.addr = (uint64_t)(uintptr_t)&offset };
	int r;

	if (!vcpu->tsc_offset_attr)
		return -EOPNOTSUPP;
	if (ioctl(vcpu->fd, KVM_GET_DEVICE_ATTR, &attr) < 0)
		return -errno;
	r = tsc_msr(vcpu, KVM_GET_MSRS, &now);
	if (r < 0)
		return r;
	offset += want - now; /* modulo 2^64, as the hardware adds it */
	if (ioctl(vcpu->fd, KVM_SET_DEVICE_ATTR, &attr) < 0)
		return -errno;
	return 0;
}

int x86_tsc_load(struct vcpu *vcpu, struct state_reader *rd, char *why, size_t why_len)
{
	const struct vm *vm = vcpu->vm;
	struct vm_state_tsc t;
	uint64_t now = 0;
	const void *p;
	size_t size;
	int r;

	p = state_get(rd, VM_STATE_TSC, vcpu->id, &size);
	if (!p || size != sizeof(t)) {
		snprintf(why, why_len, "vCPU %u: TSC section missing or malformed", vcpu->id);
		return -EBADMSG;
	}
	memcpy(&t, p, sizeof(t));
	if (!same_rate(t.tsc_khz, vm->tsc_khz) &&
	    ioctl(vcpu->fd, KVM_SET_TSC_KHZ, (unsigned long)t.tsc_khz) < 0) {
		r = -errno;
		snprintf(why, why_len,
			 "this host cannot run the guest's TSC at %u kHz (its own: %u kHz)",
			 t.tsc_khz, vm->tsc_khz);
		return r;
	}
	r = shift_tsc(vcpu, t.tsc);
	if (r == -EOPNOTSUPP) {
		now = t.tsc;
		r = tsc_msr(vcpu, KVM_SET_MSRS, &now);
	}
	if (!r)
		r = tsc_msr(vcpu, KVM_GET_MSRS, &now);
	/*
	 * Taken, the read-back is the value plus the cycles since it was set.
	 * Later still is allowed (PVM ignores TSC offsets: its guests read the
	 * host's own TSC, so their time includes the pause); earlier is not.
	 */
	if (!r && now < t.tsc)
		r = -EIO;
	if (r < 0)
		snprintf(why, why_len, "vCPU %u: cannot restore the guest's TSC: %s", vcpu->id,
			 r == -EIO ? "KVM kept an earlier value" : strerror(-r));
	return r;
}
