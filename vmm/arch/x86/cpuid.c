// SPDX-License-Identifier: GPL-2.0
/*
 * The CPUID a guest saw travels with it.
 *
 * A guest probes CPUID once, at boot, and from then on relies on what it
 * found.  A destination that handed it that host's own KVM CPUID instead
 * could take away an instruction set the guest is in the middle of using,
 * or change the vendor under it.  So the source saves each vCPU's CPUID as
 * KVM holds it, and the destination sets exactly those entries, after
 * checking that its own KVM offers every feature bit the guest was shown.
 */
#include <errno.h>
#include <linux/kvm.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "vmm/state.h"
#include "vmm/vm.h"
#include "vmm/x86.h"

#define CPUID_MAX_ENTRIES 512
#define SIG		  KVM_CPUID_FLAG_SIGNIFCANT_INDEX /* the subleaf counts */

enum cpuid_reg {
	EAX,
	EBX,
	ECX,
	EDX
};

/*
 * The registers that are feature bitmaps (QEMU's "feature words").  Leaves
 * that describe topology, caches or sizes are carried but not compared.
 */
static const struct feature_word {
	uint32_t function, index;
	enum cpuid_reg reg;
	uint32_t dynamic; /* bits that mirror guest state (CR4, APIC base) */
} feature_words[] = {
	{ 0x00000001, 0, ECX, 1u << 27 /* OSXSAVE */ },
	{ 0x00000001, 0, EDX, 1u << 9 /* APIC */ },
	{ 0x00000007, 0, EBX, 0 },
	{ 0x00000007, 0, ECX, 1u << 4 /* OSPKE */ },
	{ 0x00000007, 0, EDX, 0 },
	{ 0x00000007, 1, EAX, 0 },
	{ 0x0000000d, 1, EAX, 0 },
	{ 0x40000001, 0, EAX, 0 },
	{ 0x80000001, 0, ECX, 0 },
	{ 0x80000001, 0, EDX, 0 },
	{ 0x80000007, 0, EDX, 0 },
	{ 0x80000008, 0, EBX, 0 },
};

static const char *const reg_names[] = { "EAX", "EBX", "ECX", "EDX" };

static uint32_t reg_of(const struct kvm_cpuid_entry2 *e, enum cpuid_reg reg)
{
	const uint32_t regs[] = { e->eax, e->ebx, e->ecx, e->edx };

	return regs[reg];
}

static const struct kvm_cpuid_entry2 *find(const struct kvm_cpuid_entry2 *e, uint32_t n,
					   uint32_t function, uint32_t index)
{
	for (uint32_t i = 0; i < n; i++)
		if (e[i].function == function &&
		    (!(e[i].flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) || e[i].index == index))
			return &e[i];
	return NULL;
}

/*
 * The CPUID entries KVM holds for the vCPU (malloc'd), or NULL with *err.
 * They can be fewer than the VMM set: Linux 6.18 drops some all-zero
 * leaves (0x1d, 0x1e, 0x24 where AMX is not permitted) that
 * KVM_GET_SUPPORTED_CPUID listed.
 */
static struct kvm_cpuid2 *vcpu_cpuid(struct vcpu *vcpu, int *err)
{
	uint32_t nent = vcpu->vm->cpuid->nent;
	struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));

	*err = -ENOMEM;
	if (!c)
		return NULL;
	c->nent = nent;
	*err = 0;
	if (ioctl(vcpu->fd, KVM_GET_CPUID2, c) < 0)
		*err = -errno;
	else if (c->nent > nent)
		*err = -EIO;
	if (*err) {
		free(c);
		return NULL;
	}
	return c;
}

/*
 * What KVM held after the vCPU's last KVM_SET_CPUID2 (vcpu->cpuid, read
 * back at its creation and at each load that set it): the save, inside a
 * migration's downtime, needs no ioctl (KVM_GET_CPUID2 took 15-20 us here).
 * Only the dynamic bits (OSXSAVE, OSPKE, APIC, leaf 0xd's sizes) can have
 * changed since, and they mirror registers the state carries: KVM
 * recomputes them from those at the destination, whatever the section says.
 */
int x86_cpuid_save(struct vcpu *vcpu, struct state_writer *w)
{
	const struct kvm_cpuid2 *c;
	int r;

	if (!vcpu->cpuid && (r = x86_cpuid_remember(vcpu)) < 0)
		return r;
	c = vcpu->cpuid;
	state_put(w, VM_STATE_CPUID, vcpu->id, w->buf ? c->entries : NULL,
		  c->nent * sizeof(c->entries[0]));
	return w->err;
}

/*
 * What this host offers: a bit KVM reports as supported, or one that a
 * fresh vCPU here shows anyway (PVM, for one, reports the processor's own
 * feature bits for a vCPU whatever KVM_GET_SUPPORTED_CPUID says).
 */
static uint32_t offered(const struct kvm_cpuid2 *supported, const struct kvm_cpuid2 *fresh,
			const struct feature_word *f)
{
	const struct kvm_cpuid_entry2 *s =
	    find(supported->entries, supported->nent, f->function, f->index);
	const struct kvm_cpuid_entry2 *v = find(fresh->entries, fresh->nent, f->function, f->index);

	return (s ? reg_of(s, f->reg) : 0) | (v ? reg_of(v, f->reg) : 0);
}

/* Would KVM take a and b for the same leaf (subleaf where it counts)? */
static bool same_leaf(const struct kvm_cpuid_entry2 *a, const struct kvm_cpuid_entry2 *b)
{
	return a->function == b->function &&
	       (!(a->flags & SIG) || !(b->flags & SIG) || a->index == b->index);
}

/* Is e, flags and all, an entry of table t? */
static bool listed(const struct kvm_cpuid2 *t, const struct kvm_cpuid_entry2 *e)
{
	for (uint32_t i = 0; i < t->nent; i++)
		if (same_leaf(&t->entries[i], e) && (t->entries[i].flags & SIG) == (e->flags & SIG))
			return true;
	return false;
}

/*
 * The saved entries come from a file or a peer: each must be one this VMM
 * sets itself (an entry of KVM_GET_SUPPORTED_CPUID, or of a fresh vCPU
 * here), and each at most once.  KVM would take any leaf it is given (a
 * hypervisor range, a leaf this CPU lacks) and a duplicate hides what the
 * feature check below reads.  Their values are check_host()'s business.
 */
static int check_entries(const struct kvm_cpuid2 *supported, const struct kvm_cpuid2 *fresh,
			 const struct kvm_cpuid2 *saved, unsigned int id, char *why, size_t why_len)
{
	for (uint32_t i = 0; i < saved->nent; i++) {
		const struct kvm_cpuid_entry2 *e = &saved->entries[i];

		for (uint32_t j = 0; j < i; j++)
			if (same_leaf(&saved->entries[j], e)) {
				snprintf(why, why_len,
					 "vCPU %u: CPUID leaf 0x%x.%u appears twice in the state",
					 id, e->function, e->index);
				return -EBADMSG;
			}
		if (!listed(supported, e) && !listed(fresh, e)) {
			snprintf(why, why_len,
				 "vCPU %u: CPUID leaf 0x%x.%u in the state is not one this host's "
				 "KVM offers",
				 id, e->function, e->index);
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

/* 0 if this host offers everything in the saved entries; else why not. */
static int check_host(const struct kvm_cpuid2 *supported, const struct kvm_cpuid2 *fresh,
		      const struct kvm_cpuid2 *saved, char *why, size_t why_len)
{
	const struct kvm_cpuid_entry2 *hv = find(fresh->entries, fresh->nent, 0, 0);
	const struct kvm_cpuid_entry2 *gv = find(saved->entries, saved->nent, 0, 0);

	if (!gv || !hv || gv->ebx != hv->ebx || gv->ecx != hv->ecx || gv->edx != hv->edx) {
		snprintf(why, why_len, "the guest's CPU vendor differs from this host's");
		return -EOPNOTSUPP;
	}
	for (size_t i = 0; i < sizeof(feature_words) / sizeof(feature_words[0]); i++) {
		const struct feature_word *f = &feature_words[i];
		const struct kvm_cpuid_entry2 *g =
		    find(saved->entries, saved->nent, f->function, f->index);
		uint32_t want = g ? reg_of(g, f->reg) & ~f->dynamic : 0;
		uint32_t missing = want & ~offered(supported, fresh, f);

		if (missing) {
			snprintf(why, why_len,
				 "the guest was shown CPUID leaf 0x%x.%u %s bit %d, which this "
				 "host's KVM does not offer",
				 f->function, f->index, reg_names[f->reg], __builtin_ctz(missing));
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

int x86_cpuid_remember(struct vcpu *vcpu)
{
	int r;

	free(vcpu->cpuid);
	vcpu->cpuid = vcpu_cpuid(vcpu, &r);
	return r;
}

/* Entry e with the bits that mirror guest state cleared (KVM recomputes them). */
static struct kvm_cpuid_entry2 static_part(const struct kvm_cpuid_entry2 *e)
{
	struct kvm_cpuid_entry2 c = *e;

	for (size_t i = 0; i < sizeof(feature_words) / sizeof(feature_words[0]); i++) {
		const struct feature_word *f = &feature_words[i];
		uint32_t *regs[] = { &c.eax, &c.ebx, &c.ecx, &c.edx };

		if (f->dynamic && c.function == f->function && c.index == f->index)
			*regs[f->reg] &= ~f->dynamic;
	}
	return c;
}

/*
 * Does KVM already hold the saved entries?  Then setting them again would
 * change nothing the guest can see (KVM recomputes the dynamic bits from
 * the registers loaded next), and KVM_SET_CPUID2 is the costliest step of
 * a state load (~100-150 us here, inside the migration's downtime).
 */
static bool already_set(const struct kvm_cpuid2 *held, const struct kvm_cpuid2 *saved)
{
	if (held->nent != saved->nent)
		return false;
	for (uint32_t i = 0; i < held->nent; i++) {
		struct kvm_cpuid_entry2 a = static_part(&held->entries[i]);
		struct kvm_cpuid_entry2 b = static_part(&saved->entries[i]);

		if (memcmp(&a, &b, sizeof(a)))
			return false;
	}
	return true;
}

/* Set the checked entries, unless KVM holds them already; keep what it holds. */
static int set_cpuid(struct vcpu *vcpu, const struct kvm_cpuid2 *saved, char *why, size_t why_len)
{
	if (already_set(vcpu->cpuid, saved))
		return 0;
	if (ioctl(vcpu->fd, KVM_SET_CPUID2, saved) < 0) {
		int r = -errno;

		snprintf(why, why_len, "vCPU %u: KVM refused the guest's CPUID", vcpu->id);
		return r;
	}
	return x86_cpuid_remember(vcpu);
}

int x86_cpuid_load(struct vcpu *vcpu, struct state_reader *rd, char *why, size_t why_len)
{
	struct kvm_cpuid2 *saved;
	const void *p;
	size_t size;
	int r;

	p = state_get(rd, VM_STATE_CPUID, vcpu->id, &size);
	if (!p || !size || size % sizeof(saved->entries[0]) ||
	    size / sizeof(saved->entries[0]) > CPUID_MAX_ENTRIES) {
		snprintf(why, why_len, "vCPU %u: CPUID section missing or malformed", vcpu->id);
		return -EBADMSG;
	}
	/* What this vCPU holds was read at its creation: no ioctl here. */
	if (!vcpu->cpuid && (r = x86_cpuid_remember(vcpu)) < 0)
		return r;
	saved = calloc(1, sizeof(*saved) + size);
	if (!saved)
		return -ENOMEM;
	memcpy(saved->entries, p, size);
	saved->nent = (uint32_t)(size / sizeof(saved->entries[0]));
	r = check_entries(vcpu->vm->cpuid, vcpu->cpuid, saved, vcpu->id, why, why_len);
	if (!r)
		r = check_host(vcpu->vm->cpuid, vcpu->cpuid, saved, why, why_len);
	if (!r)
		r = set_cpuid(vcpu, saved, why, why_len);
	free(saved);
	return r;
}
