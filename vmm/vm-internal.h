/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the VM's own files (vm.c, vm-create.c, vcpu.c) share and nothing
 * else uses.
 */
#ifndef VMM_VM_INTERNAL_H
#define VMM_VM_INTERNAL_H

#include <signal.h>
#include <stdint.h>

#include "vmm/vm.h"

/* Kicks a vCPU thread out of KVM_RUN (its handler does nothing). */
#define KICK_SIGNAL SIGUSR1

/* vm.c: a vCPU's state, stored atomically and broadcast on vm->cond (vm->lock held). */
void vcpu_set_state(struct vcpu *vcpu, enum vcpu_state st);
/* vm.c: guest RAM's memslots (re)set with flags: 0 or -errno. */
int vm_ram_slots_set(struct vm *vm, uint32_t flags);

#endif /* VMM_VM_INTERNAL_H */
