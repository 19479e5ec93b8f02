/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The VM state blob (layout documented in docs/vmm.md):
 *
 *   struct vm_state_header (64 bytes)
 *   sections: struct vm_state_section (16 bytes) + payload, padded to 8
 *
 * Little-endian, same-architecture (payloads of vCPU sections are the
 * kernel's struct kvm_* ABI).  checksum = CRC32C of the whole blob with
 * the checksum field read as zero.
 */
#ifndef VMM_STATE_H
#define VMM_STATE_H

#include <stddef.h>
#include <stdint.h>

#define VM_STATE_MAGIC	 0x5441545356434350ULL /* "PCCVSTAT" */
#define VM_STATE_VERSION 3		       /* 2: CPUID and TSC sections; 3: CRC32C checksum */

struct vm_state_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size; /* sizeof(struct vm_state_header) */
	uint64_t total_size;  /* header + sections */
	uint64_t checksum;
	uint64_t mem_size;
	uint32_t nr_vcpus;
	uint32_t nr_sections;
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct vm_state_header) == 64, "vm_state_header ABI");

struct vm_state_section {
	uint32_t type;
	uint32_t index; /* vCPU index, or 0 */
	uint64_t size;	/* payload bytes (not counting padding) */
};
_Static_assert(sizeof(struct vm_state_section) == 16, "vm_state_section ABI");

enum vm_state_type {
	VM_STATE_REGS = 1,   /* struct kvm_regs */
	VM_STATE_SREGS = 2,  /* struct kvm_sregs */
	VM_STATE_XSAVE = 3,  /* struct kvm_xsave (4096 bytes or KVM_CAP_XSAVE2 size) */
	VM_STATE_XCRS = 4,   /* struct kvm_xcrs */
	VM_STATE_MSRS = 5,   /* n x struct vm_state_msr */
	VM_STATE_EVENTS = 6, /* struct kvm_vcpu_events */
	VM_STATE_VCPU = 7,   /* struct vm_state_vcpu */
	VM_STATE_CPUID = 8,  /* n x struct kvm_cpuid_entry2: the CPUID the guest saw */
	VM_STATE_TSC = 9,    /* struct vm_state_tsc */
	VM_STATE_DEVICE = 16 /* index = device state_id, payload = device's */
};

struct vm_state_msr {
	uint32_t index;
	uint32_t reserved;
	uint64_t value;
};

struct vm_state_vcpu {
	uint32_t halted; /* the vCPU had halted for good (guest is done with it) */
	uint32_t reserved;
};

/* Guest time: the TSC when the vCPU was saved, and its rate. */
struct vm_state_tsc {
	uint64_t tsc;
	uint32_t tsc_khz; /* 0 if the source did not know it */
	uint32_t reserved;
};
_Static_assert(sizeof(struct vm_state_tsc) == 16, "vm_state_tsc ABI");

/* Section writer: counts only when buf is NULL. */
struct state_writer {
	uint8_t *buf;
	size_t len, pos;
	uint32_t nr_sections;
	int err;
};

void state_put(struct state_writer *w, uint32_t type, uint32_t index, const void *data,
	       size_t size);

struct state_reader {
	const uint8_t *buf;
	size_t len;
};

/* Finds a section; NULL if absent. */
const void *state_get(const struct state_reader *r, uint32_t type, uint32_t index, size_t *size);

#endif /* VMM_STATE_H */
