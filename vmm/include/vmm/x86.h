/* SPDX-License-Identifier: GPL-2.0 */
/* x86-64 specifics: boot image, long-mode setup, vCPU state (vmm/arch/x86/). */
#ifndef VMM_X86_H
#define VMM_X86_H

#include <stddef.h>
#include <stdint.h>

struct vm;
struct vcpu;
struct state_writer;
struct state_reader;

/* Per-VM: supported CPUID, MSR list, XSAVE size. */
int x86_vm_init(struct vm *vm);
void x86_vm_exit(struct vm *vm);
/*
 * Per-vCPU: CPUID, the registers KVM copies to run->s.regs at each exit
 * (where it can), the TSC's rate and whether its offset can be set.
 */
int x86_vcpu_init(struct vcpu *vcpu);

/*
 * Writes the ELF image's PT_LOAD segments, page tables, GDT and boot info
 * into mem (mem_size bytes) and returns the entry point.
 */
int x86_boot_build(void *mem, uint64_t mem_size, unsigned int nr_cpus, uint32_t tsc_khz,
		   const char *path, const char *cmdline, uint64_t *entry, const char **why);
/* Long mode at `entry`, rdi = boot info, rsi = vCPU index. */
int x86_vcpu_boot(struct vcpu *vcpu, uint64_t entry);

/*
 * vCPU state sections into / out of the state blob.  A load takes only the
 * MSRs this VMM saves, each once; else it fails with a sentence in why
 * (may be NULL) naming the MSR.
 */
int x86_vcpu_save(struct vcpu *vcpu, struct state_writer *w);
int x86_vcpu_load(struct vcpu *vcpu, struct state_reader *r, char *why, size_t why_len);

/*
 * The CPUID the guest saw (cpuid.c) and its TSC (tsc.c), saved per vCPU and
 * loaded before the rest of its state.  A load that this host cannot honour
 * fails with -EOPNOTSUPP and a sentence in why (may be NULL).
 */
int x86_cpuid_save(struct vcpu *vcpu, struct state_writer *w);
int x86_cpuid_remember(struct vcpu *vcpu);
int x86_cpuid_load(struct vcpu *vcpu, struct state_reader *r, char *why, size_t why_len);

#define MSR_IA32_TSC 0x10
/* At vCPU creation: the TSC rate (vm->tsc_khz) and whether the offset attribute is there. */
void x86_tsc_init(struct vcpu *vcpu);
/* The TSC section for a value read with the vCPU's MSRs (x86_vcpu_save()). */
int x86_tsc_save(struct vcpu *vcpu, struct state_writer *w, uint64_t tsc);
int x86_tsc_load(struct vcpu *vcpu, struct state_reader *r, char *why, size_t why_len);

#endif /* VMM_X86_H */
