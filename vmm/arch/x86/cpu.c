// SPDX-License-Identifier: GPL-2.0
/*
 * x86 vCPU: CPUID, the long-mode boot state, and the state that a save
 * must carry (registers, special registers, XSAVE, XCRs, the MSRs listed
 * below when KVM knows them, pending events).
 */
#include <errno.h>
#include <linux/kvm.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "vmm/guest-abi.h"
#include "vmm/state.h"
#include "vmm/util.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

#define CR0_PE	       (1ULL << 0)
#define CR0_MP	       (1ULL << 1)
#define CR0_ET	       (1ULL << 4)
#define CR0_NE	       (1ULL << 5)
#define CR0_PG	       (1ULL << 31)
#define CR4_PAE	       (1ULL << 5)
#define CR4_OSFXSR     (1ULL << 9)
#define CR4_OSXMMEXCPT (1ULL << 10)
#define EFER_LME       (1ULL << 8)
#define EFER_LMA       (1ULL << 10)

/* What KVM copies to run->s.regs at every exit (get_regs()). */
#define SYNC_REGS (KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS | KVM_SYNC_X86_EVENTS)

/*
 * MSRs a guest like ours (or a small kernel) may change; saved if KVM has
 * them.  The TSC is not here: get_msrs() reads it with them, but it has its
 * own section (tsc.c).
 */
static const uint32_t wanted_msrs[] = {
	0x00000174, /* SYSENTER_CS */
	0x00000175, /* SYSENTER_ESP */
	0x00000176, /* SYSENTER_EIP */
	0x00000277, /* PAT */
	0x000001a0, /* MISC_ENABLE */
	0xc0000081, /* STAR */
	0xc0000082, /* LSTAR */
	0xc0000083, /* CSTAR */
	0xc0000084, /* SYSCALL_MASK */
	0xc0000102, /* KERNEL_GS_BASE */
	0xc0000103, /* TSC_AUX */
};

static int get_cpuid(struct vm *vm)
{
	for (int nent = 128; nent <= 4096; nent *= 2) {
		struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));

		if (!c)
			return -ENOMEM;
		c->nent = (uint32_t)nent;
		if (ioctl(vm->kvm_fd, KVM_GET_SUPPORTED_CPUID, c) == 0) {
			vm->cpuid = c;
			return 0;
		}
		free(c);
		if (errno != E2BIG)
			return -errno;
	}
	return -E2BIG;
}

static int get_msr_list(struct vm *vm)
{
	struct kvm_msr_list probe = { .nmsrs = 0 }, *list;
	int r = 0;

	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
		return -errno;
	list = calloc(1, sizeof(*list) + probe.nmsrs * sizeof(uint32_t));
	vm->msr_list = calloc(ARRAY_SIZE(wanted_msrs), sizeof(uint32_t));
	if (!list || !vm->msr_list) {
		free(list);
		return -ENOMEM;
	}
	list->nmsrs = probe.nmsrs;
	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, list) < 0) {
		r = -errno;
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(wanted_msrs); i++)
		for (uint32_t j = 0; j < list->nmsrs; j++)
			if (list->indices[j] == wanted_msrs[i]) {
				vm->msr_list[vm->nr_msrs++] = wanted_msrs[i];
				break;
			}
out:
	free(list);
	return r;
}

int x86_vm_init(struct vm *vm)
{
	int r, n;

	/* Needed on Intel without unrestricted guest; harmless elsewhere. */
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, 0xfffbd000UL) < 0)
		return -errno;
	r = get_cpuid(vm);
	if (r < 0)
		return r;
	r = get_msr_list(vm);
	if (r < 0)
		return r;
	n = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);
	vm->xsave_size = n > (int)sizeof(struct kvm_xsave) ? n : (int)sizeof(struct kvm_xsave);
	return 0;
}

void x86_vm_exit(struct vm *vm)
{
	free(vm->cpuid);
	free(vm->msr_list);
	vm->cpuid = NULL;
	vm->msr_list = NULL;
}

int x86_vcpu_init(struct vcpu *vcpu)
{
	struct vm *vm = vcpu->vm;
	size_t sz = sizeof(*vm->cpuid) + vm->cpuid->nent * sizeof(vm->cpuid->entries[0]);
	struct kvm_cpuid2 *c = malloc(sz);
	int r = 0, n;

	if (!c)
		return -ENOMEM;
	memcpy(c, vm->cpuid, sz);
	for (uint32_t i = 0; i < c->nent; i++) {
		struct kvm_cpuid_entry2 *e = &c->entries[i];

		if (e->function == 1)
			e->ebx = (e->ebx & 0x00ffffff) | (vcpu->id << 24);
		if (e->function == 0xb || e->function == 0x1f)
			e->edx = vcpu->id;
	}
	if (ioctl(vcpu->fd, KVM_SET_CPUID2, c) < 0)
		r = -errno;
	free(c);
	if (!r)
		r = x86_cpuid_remember(vcpu);
	n = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_SYNC_REGS);
	if (n > 0 && (n & SYNC_REGS) == SYNC_REGS)
		vcpu->run->kvm_valid_regs = SYNC_REGS;
	x86_tsc_init(vcpu);
	return r;
}

static void flat_seg(struct kvm_segment *s, uint16_t sel, uint8_t type, bool code)
{
	*s = (struct kvm_segment){
		.base = 0,
		.limit = 0xffffffff,
		.selector = sel,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = code ? 0 : 1,
		.s = 1,
		.l = code ? 1 : 0,
		.g = 1,
	};
}

int x86_vcpu_boot(struct vcpu *vcpu, uint64_t entry)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;

	if (ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0)
		return -errno;
	flat_seg(&sregs.cs, 0x1b, 0xb, true);
	flat_seg(&sregs.ds, 0x23, 0x3, false);
	sregs.cs.dpl = 3;
	sregs.ds.dpl = 3;
	sregs.es = sregs.fs = sregs.gs = sregs.ss = sregs.ds;
	sregs.gdt.base = GUEST_GDT_GPA;
	sregs.gdt.limit = 5 * 8 - 1;
	sregs.idt.base = 0;
	sregs.idt.limit = 0;
	sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_PG;
	sregs.cr3 = GUEST_PML4_GPA;
	sregs.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT;
	sregs.efer = EFER_LME | EFER_LMA;
	if (ioctl(vcpu->fd, KVM_SET_SREGS, &sregs) < 0)
		return -errno;
	memset(&regs, 0, sizeof(regs));
	regs.rip = entry;
	regs.rdi = GUEST_BOOTINFO_GPA;
	regs.rsi = vcpu->id;
	regs.rflags = 0x3002;
	if (ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0)
		return -errno;
	return 0;
}

/* The fixed-size register sections of one vCPU. */
struct vcpu_regs {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_xcrs xcrs;
	struct kvm_vcpu_events events;
};

/*
 * The listed MSRs into out, and the TSC: one KVM_GET_MSRS for all of them
 * (each vCPU ioctl costs 7-10 us here, inside a migration's downtime).
 */
static int get_msrs(struct vcpu *vcpu, struct vm_state_msr *out, uint64_t *tsc)
{
	struct vm *vm = vcpu->vm;
	unsigned int nr = vm->nr_msrs + 1;
	struct kvm_msrs *m = calloc(1, sizeof(*m) + nr * sizeof(m->entries[0]));
	int n;

	if (!m)
		return -ENOMEM;
	m->nmsrs = nr;
	for (unsigned int i = 0; i < vm->nr_msrs; i++)
		m->entries[i].index = vm->msr_list[i];
	m->entries[vm->nr_msrs].index = MSR_IA32_TSC;
	n = ioctl(vcpu->fd, KVM_GET_MSRS, m);
	if (n < 0 || (unsigned int)n != nr) {
		free(m);
		return n < 0 ? -errno : -EIO;
	}
	for (unsigned int i = 0; i < vm->nr_msrs; i++)
		out[i] = (struct vm_state_msr){ .index = m->entries[i].index,
						.value = m->entries[i].data };
	*tsc = m->entries[vm->nr_msrs].data;
	free(m);
	return 0;
}

/*
 * REGS, SREGS and EVENTS: the copy KVM made when KVM_RUN last returned
 * (vcpu->regs_synced), else three ioctls.
 */
static int get_regs(struct vcpu *vcpu, struct vcpu_regs *v)
{
	const struct kvm_sync_regs *sync = &vcpu->run->s.regs;

	if (vcpu->regs_synced) {
		v->regs = sync->regs;
		v->sregs = sync->sregs;
		v->events = sync->events;
		return 0;
	}
	if (ioctl(vcpu->fd, KVM_GET_REGS, &v->regs) < 0 ||
	    ioctl(vcpu->fd, KVM_GET_SREGS, &v->sregs) < 0 ||
	    ioctl(vcpu->fd, KVM_GET_VCPU_EVENTS, &v->events) < 0)
		return -errno;
	return 0;
}

/* The sizes pass: no ioctl, nothing read. */
static int put_sizes(struct vcpu *vcpu, struct state_writer *w)
{
	struct vm *vm = vcpu->vm;

	state_put(w, VM_STATE_REGS, vcpu->id, NULL, sizeof(struct kvm_regs));
	state_put(w, VM_STATE_SREGS, vcpu->id, NULL, sizeof(struct kvm_sregs));
	state_put(w, VM_STATE_XSAVE, vcpu->id, NULL, (size_t)vm->xsave_size);
	state_put(w, VM_STATE_XCRS, vcpu->id, NULL, sizeof(struct kvm_xcrs));
	state_put(w, VM_STATE_MSRS, vcpu->id, NULL, vm->nr_msrs * sizeof(struct vm_state_msr));
	state_put(w, VM_STATE_EVENTS, vcpu->id, NULL, sizeof(struct kvm_vcpu_events));
	return x86_tsc_save(vcpu, w, 0);
}

int x86_vcpu_save(struct vcpu *vcpu, struct state_writer *w)
{
	struct vm *vm = vcpu->vm;
	struct vcpu_regs v;
	struct vm_state_msr *msrs;
	uint64_t tsc = 0;
	void *xsave;
	int r = 0;
	unsigned long xsave_ioctl =
	    vm->xsave_size > (int)sizeof(struct kvm_xsave) ? KVM_GET_XSAVE2 : KVM_GET_XSAVE;

	if (!w->buf)
		return put_sizes(vcpu, w);
	xsave = calloc(1, (size_t)vm->xsave_size);
	msrs = calloc(vm->nr_msrs + 1, sizeof(*msrs));
	if (!xsave || !msrs) {
		r = -ENOMEM;
		goto out;
	}
	r = get_regs(vcpu, &v);
	if (!r &&
	    (ioctl(vcpu->fd, xsave_ioctl, xsave) < 0 || ioctl(vcpu->fd, KVM_GET_XCRS, &v.xcrs) < 0))
		r = -errno;
	if (!r)
		r = get_msrs(vcpu, msrs, &tsc);
	if (r < 0)
		goto out;
	state_put(w, VM_STATE_REGS, vcpu->id, &v.regs, sizeof(v.regs));
	state_put(w, VM_STATE_SREGS, vcpu->id, &v.sregs, sizeof(v.sregs));
	state_put(w, VM_STATE_XSAVE, vcpu->id, xsave, (size_t)vm->xsave_size);
	state_put(w, VM_STATE_XCRS, vcpu->id, &v.xcrs, sizeof(v.xcrs));
	state_put(w, VM_STATE_MSRS, vcpu->id, msrs, vm->nr_msrs * sizeof(*msrs));
	state_put(w, VM_STATE_EVENTS, vcpu->id, &v.events, sizeof(v.events));
	r = x86_tsc_save(vcpu, w, tsc);
out:
	free(xsave);
	free(msrs);
	return r;
}

static const void *need(struct state_reader *rd, uint32_t type, uint32_t id, size_t size)
{
	size_t n;
	const void *p = state_get(rd, type, id, &n);

	return p && n == size ? p : NULL;
}

static bool msr_saved(const struct vm *vm, uint32_t index)
{
	for (unsigned int i = 0; i < vm->nr_msrs; i++)
		if (vm->msr_list[i] == index)
			return true;
	return false;
}

#define MSR_PAT 0x277

/*
 * Values: every MSR on the list is one the guest's own kernel may write
 * with WRMSR, and KVM checks most host writes as it checks the guest's
 * (a non-canonical LSTAR is refused).  Not PAT: the 6.18 host here takes
 * any PAT from the host, and a reserved memory type is a #GP for the guest
 * itself, so it is checked here.  Host writes of MISC_ENABLE are KVM's
 * choice to take as they come (it emulates that MSR); the SYSENTER/SYSCALL
 * MSRs and TSC_AUX matter to the guest alone.
 */
static bool msr_value_ok(uint32_t index, uint64_t value)
{
	if (index != MSR_PAT)
		return true;
	for (int i = 0; i < 8; i++, value >>= 8)
		if ((value & 0xff) > 7 || (value & 0xfe) == 2) /* types 2, 3 reserved */
			return false;
	return true;
}

/*
 * The MSR section as KVM_SET_MSRS takes it (malloc'd), or NULL with *err
 * and why.  The section comes from a file or a peer: only MSRs this VMM
 * saves itself (vm->msr_list) are taken, each once, so a peer cannot set
 * IA32_APIC_BASE, EFER, FEATURE_CONTROL, SPEC_CTRL or any other MSR KVM
 * would accept from the host.
 */
static struct kvm_msrs *state_msrs(struct vcpu *vcpu, const void *ms, size_t size, int *err,
				   char *why, size_t why_len)
{
	const struct vm *vm = vcpu->vm;
	size_t nr = size / sizeof(struct vm_state_msr);
	struct kvm_msrs *m;

	*err = -EBADMSG;
	if (nr > vm->nr_msrs) {
		snprintf(why, why_len, "vCPU %u: %zu MSRs in the state, this VMM saves at most %u",
			 vcpu->id, nr, vm->nr_msrs);
		return NULL;
	}
	m = calloc(1, sizeof(*m) + (nr + 1) * sizeof(m->entries[0]));
	if (!m) {
		*err = -ENOMEM;
		snprintf(why, why_len, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < nr; i++) {
		struct vm_state_msr e;

		memcpy(&e, (const uint8_t *)ms + i * sizeof(e), sizeof(e));
		if (!msr_saved(vm, e.index)) {
			snprintf(why, why_len,
				 "vCPU %u: MSR 0x%x in the state is not one this VMM saves",
				 vcpu->id, e.index);
			goto bad;
		}
		if (!msr_value_ok(e.index, e.value)) {
			snprintf(why, why_len, "vCPU %u: MSR 0x%x: 0x%llx is not a valid value",
				 vcpu->id, e.index, (unsigned long long)e.value);
			goto bad;
		}
		for (size_t j = 0; j < i; j++)
			if (m->entries[j].index == e.index) {
				snprintf(why, why_len,
					 "vCPU %u: MSR 0x%x appears twice in the state", vcpu->id,
					 e.index);
				goto bad;
			}
		m->entries[i].index = e.index;
		m->entries[i].data = e.value;
	}
	m->nmsrs = (uint32_t)nr;
	return m;
bad:
	free(m);
	return NULL;
}

/* -EBADMSG if one is missing or not exactly its struct's size. */
static int state_regs(struct vcpu *vcpu, struct state_reader *rd, struct vcpu_regs *v)
{
	const void *p;

	if (!(p = need(rd, VM_STATE_REGS, vcpu->id, sizeof(v->regs))))
		return -EBADMSG;
	memcpy(&v->regs, p, sizeof(v->regs));
	if (!(p = need(rd, VM_STATE_SREGS, vcpu->id, sizeof(v->sregs))))
		return -EBADMSG;
	memcpy(&v->sregs, p, sizeof(v->sregs));
	if (!(p = need(rd, VM_STATE_XCRS, vcpu->id, sizeof(v->xcrs))))
		return -EBADMSG;
	memcpy(&v->xcrs, p, sizeof(v->xcrs));
	if (!(p = need(rd, VM_STATE_EVENTS, vcpu->id, sizeof(v->events))))
		return -EBADMSG;
	memcpy(&v->events, p, sizeof(v->events));
	return 0;
}

/*
 * Hands the checked state to KVM, which validates the values: MSRs after
 * SREGS (EFER), events last.  KVM_SET_MSRS stops at the first MSR it
 * refuses and returns how many it took, which names that MSR.
 */
static int set_vcpu(struct vcpu *vcpu, struct vcpu_regs *v, void *xsave, struct kvm_msrs *m,
		    char *why, size_t why_len)
{
	int n, r;

	if (ioctl(vcpu->fd, KVM_SET_SREGS, &v->sregs) < 0 ||
	    ioctl(vcpu->fd, KVM_SET_REGS, &v->regs) < 0 ||
	    ioctl(vcpu->fd, KVM_SET_XCRS, &v->xcrs) < 0 ||
	    ioctl(vcpu->fd, KVM_SET_XSAVE, xsave) < 0)
		goto refused;
	n = ioctl(vcpu->fd, KVM_SET_MSRS, m);
	if (n >= 0 && (uint32_t)n < m->nmsrs) {
		snprintf(why, why_len, "vCPU %u: KVM refused the value of MSR 0x%x", vcpu->id,
			 m->entries[n].index);
		return -EINVAL;
	}
	if (n < 0 || ioctl(vcpu->fd, KVM_SET_VCPU_EVENTS, &v->events) < 0)
		goto refused;
	return 0;
refused:
	r = -errno;
	snprintf(why, why_len, "vCPU %u: KVM refused the guest's registers: %s", vcpu->id,
		 strerror(-r));
	return r;
}

/* The vCPU's registers and MSRs are all checked before KVM gets any of them. */
int x86_vcpu_load(struct vcpu *vcpu, struct state_reader *rd, char *why, size_t why_len)
{
	struct vm *vm = vcpu->vm;
	struct vcpu_regs v;
	const void *xs, *ms;
	size_t xs_size, ms_size;
	struct kvm_msrs *m = NULL;
	void *xsave = NULL;
	int r;

	xs = state_get(rd, VM_STATE_XSAVE, vcpu->id, &xs_size);
	ms = state_get(rd, VM_STATE_MSRS, vcpu->id, &ms_size);
	if (!xs || !ms || xs_size < sizeof(struct kvm_xsave) ||
	    ms_size % sizeof(struct vm_state_msr) || state_regs(vcpu, rd, &v) < 0) {
		snprintf(why, why_len, "vCPU %u: register sections missing or malformed", vcpu->id);
		return -EBADMSG;
	}
	if (xs_size > (size_t)vm->xsave_size) {
		snprintf(why, why_len, "vCPU %u: %zu bytes of XSAVE state, this host has %d",
			 vcpu->id, xs_size, vm->xsave_size);
		return -EOPNOTSUPP; /* saved on a CPU with more XSAVE state */
	}
	m = state_msrs(vcpu, ms, ms_size, &r, why, why_len);
	xsave = calloc(1, (size_t)vm->xsave_size);
	if (m && !xsave) {
		r = -ENOMEM;
		snprintf(why, why_len, "out of memory");
	}
	if (!m || !xsave)
		goto out;
	memcpy(xsave, xs, xs_size);
	vcpu->regs_synced = false; /* run->s.regs is stale until the next KVM_RUN */
	r = set_vcpu(vcpu, &v, xsave, m, why, why_len);
out:
	free(xsave);
	free(m);
	return r;
}
