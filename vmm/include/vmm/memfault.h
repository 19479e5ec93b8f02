/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Guest RAM whose missing pages no fault thread serves (a back end with
 * own_thread_faults: kvm-exit): KVM stops the vCPU with
 * KVM_EXIT_MEMORY_FAULT and the vCPU thread serves its own fault through
 * the page record (ram_fault_wait()); every other access of the VMM to
 * guest RAM ensures its pages first (vm_ram_ensure()); a thread that
 * touches a missing page anyway takes SIGBUS, which the guard turns into
 * a clear message and the end of the process (never a zero page read).
 * All functions return 0 or -errno; only the vCPU's calls print, when
 * KVM's exit is not one they take (as vm.c's exits do).
 */
#ifndef VMM_MEMFAULT_H
#define VMM_MEMFAULT_H

#include <stdint.h>

#include "ram/backend.h"

struct vm;
struct vcpu;

/*
 * Does KVM on kvm_fd serve the back end `ops`?  For an own_thread_faults
 * back end it must give KVM_EXIT_MEMORY_FAULT (KVM_CAP_MEMORY_FAULT_INFO)
 * and run with two-dimensional paging (under shadow paging a guest page
 * table on a missing page gets the guest a #PF, not an exit).  0, or
 * -EOPNOTSUPP with *why; 0 for every other back end.
 */
int memfault_check_kvm(int kvm_fd, const struct ram_backend_ops *ops, const char **why);
/*
 * The vCPU's KVM_RUN failed with EFAULT and KVM_EXIT_MEMORY_FAULT: the
 * range is checked against guest RAM, each page of it waited for, and the
 * exit consumed (a later EFAULT without a fresh exit is not taken for
 * one).  0: run again; -ECANCELED: the VM is stopping; -EFAULT (a range
 * outside RAM, flags KVM sets only for private memory) or the source's
 * -errno: fail the VM.
 */
int vcpu_memory_fault(struct vcpu *vcpu);
/*
 * A KVM_EXIT_MMIO whose address is guest RAM: an instruction KVM emulates
 * touched a missing page (KVM takes such a page for MMIO).  The page is
 * waited for and the access done on it.  0: handled; -ERANGE: not RAM (a
 * real MMIO access); -ECANCELED or -errno as vcpu_memory_fault().
 */
int vcpu_mmio_in_ram(struct vcpu *vcpu);
/*
 * The VMM is about to touch [off, off + len) of guest RAM (RAM offsets)
 * from the calling thread: its pages are made present first where no
 * fault thread would serve them (ram_ensure()).  0 or -errno.
 */
int vm_ram_ensure(struct vm *vm, uint64_t off, uint64_t len);
/*
 * SIGBUS from any thread: one line naming the RAM offset (or the address)
 * and the cause, then the default action (the process dies
 * of SIGBUS).  For the VM's RAM only; installed by vm_create() for an
 * own_thread_faults back end.
 */
void memfault_guard_sigbus(struct vm *vm);

#endif /* VMM_MEMFAULT_H */
