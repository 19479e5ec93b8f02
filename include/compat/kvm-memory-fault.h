/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Linux 6.8's KVM_EXIT_MEMORY_FAULT, which kernel-patches/0005 brings to
 * the node kernel's 6.1 (docs/kernel-interfaces.md, "KVM guests"), for
 * builds against headers that predate it (Debian 12's linux-libc-dev).
 * Same numbers and layout as upstream; whether the running KVM gives the
 * exit is asked at run time (KVM_CHECK_EXTENSION), never assumed.
 */
#ifndef COMPAT_KVM_MEMORY_FAULT_H
#define COMPAT_KVM_MEMORY_FAULT_H

#include <linux/kvm.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef KVM_EXIT_MEMORY_FAULT
#define KVM_EXIT_MEMORY_FAULT 39
#endif
#ifndef KVM_CAP_MEMORY_FAULT_INFO
#define KVM_CAP_MEMORY_FAULT_INFO 232
#endif

/* kvm_run->memory_fault: the first three words of the exit union. */
struct compat_memory_fault {
	uint64_t flags, gpa, size;
};

static inline struct compat_memory_fault compat_memory_fault(const struct kvm_run *run)
{
	struct compat_memory_fault mf;

	memcpy(&mf, (const uint8_t *)run + offsetof(struct kvm_run, hw), sizeof(mf));
	return mf;
}

#endif /* COMPAT_KVM_MEMORY_FAULT_H */
