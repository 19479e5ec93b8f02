/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The contract between the VMM and the guest program (guest-image/guest/).
 * Shared by both sides; freestanding (only <stdint.h>).
 *
 * Boot (VMM): the vCPU starts in 64-bit long mode, in ring 3 with IOPL 3,
 * at the ELF entry with
 *   rdi = guest-physical address of struct guest_bootinfo (GUEST_BOOTINFO_GPA)
 *   rsi = vCPU index (0 .. nr_cpus-1)
 *   page tables (2 MiB user pages) that map guest-virtual [0, mem_size)
 *   onto all of RAM in order, flat GDT (ring-0 code 0x08 and data 0x10,
 *   ring-3 code 0x1b and data 0x23), interrupts off, no IDT.  The guest
 *   picks its own stack.
 *
 * RAM layout (QEMU pc's): RAM up to GUEST_LOW_MEM_MAX (3 GiB) sits at
 * guest-physical 0; the rest, if any, at GUEST_HIGH_GPA (4 GiB), leaving
 * [3 GiB, 4 GiB) unbacked (where a PC has its 32-bit MMIO hole).  The page
 * tables hide the hole: guest-virtual address = RAM offset (the offset in
 * the VMM's RAM object, the one snapshots and migration use), identity
 * below 3 GiB, virtual 3 GiB + x -> physical 4 GiB + x above, so the
 * workload sees one contiguous range that spans both regions.
 *
 * Why ring 3: this project's hosts run KVM on PVM (kvm_pvm), which
 * emulates guest supervisor-mode code instruction by instruction (a
 * ten-instruction loop costs ~16 us there) but runs user-mode code
 * natively.  The guest needs no privileged instruction: ports work at
 * IOPL 3, and instead of HLT it parks on GUEST_PORT_PARK.
 * Boot (QEMU -kernel): multiboot v1 (a.out kludge), one CPU, see entry.S.
 *
 * Ports (all 32-bit OUT):
 *   GUEST_PORT_REPORT  value = guest-physical address (< 3 GiB) of a
 *                      struct guest_report the guest just filled in.  The
 *                      VMM reads it from guest RAM before the guest resumes.
 *   GUEST_PORT_PARK    any value: this vCPU is done; the VMM stops running it
 *                      (HLT without interrupts, for ring 3).
 *   GUEST_PORT_EXIT    value = exit status (0-GUEST_EXIT_MAX): the VMM
 *                      stops every vCPU and exits with it.  A larger value
 *                      fails the VM (the VMM's own codes and 128 + signal
 *                      live above the range: vmm/builtin.h).  Same port as
 *                      QEMU's isa-debug-exit (iobase=0xf4), which exits
 *                      with (status << 1) | 1.
 */
#ifndef VMM_GUEST_ABI_H
#define VMM_GUEST_ABI_H

#include <stdint.h>

#define GUEST_PORT_EXIT	  0x00f4
#define GUEST_PORT_REPORT 0x00f8
#define GUEST_PORT_PARK	  0x00fc
#define GUEST_SERIAL_BASE 0x03f8

/* Guest-physical layout the VMM writes before the first vCPU runs. */
#define GUEST_GDT_GPA	   0x1000
#define GUEST_PML4_GPA	   0x2000
#define GUEST_PDPT_GPA	   0x3000
#define GUEST_BOOTINFO_GPA 0x8000
#define GUEST_PD_GPA	   0x10000 /* GUEST_PD_PAGES pages, one per GiB of RAM */
#define GUEST_PD_PAGES	   128
#define GUEST_LOW_END	   0x100000 /* images load at or above 1 MiB */
#define GUEST_MAX_MEM	   ((uint64_t)GUEST_PD_PAGES << 30)
#define GUEST_LOW_MEM_MAX  (3ULL << 30) /* RAM below the hole */
#define GUEST_HIGH_GPA	   (4ULL << 30) /* where the rest of RAM starts */
/*
 * The guest's per-vCPU arrays and stacks (entry.S MAX_CPUS, 16 KiB each, in
 * its bss) are this big; 64 would push the image past 2 MiB and move the
 * workload's start (first 2 MiB boundary above it), hence every checksum.
 */
#define GUEST_MAX_CPUS 32

/* Bytes of RAM below the hole, at guest-physical 0. */
static inline uint64_t guest_low_size(uint64_t mem_size)
{
	return mem_size < GUEST_LOW_MEM_MAX ? mem_size : GUEST_LOW_MEM_MAX;
}

#define GUEST_BOOTINFO_MAGIC   0x42564350u /* "PCVB" */
#define GUEST_BOOTINFO_VERSION 1
#define GUEST_CMDLINE_MAX      1024

struct guest_bootinfo {
	uint32_t magic;
	uint32_t version;
	uint64_t mem_size;		 /* bytes of RAM, from guest-virtual 0 */
	uint32_t nr_cpus;		 /* vCPUs started, all at the entry */
	uint32_t tsc_khz;		 /* 0 if unknown */
	char cmdline[GUEST_CMDLINE_MAX]; /* NUL-terminated */
};

/*
 * Guest exit statuses other than 0 (done): 2 bad command line, 3 not enough
 * RAM, 4 bad boot information, and this one: a vCPU saw its TSC go
 * backwards (a migration or restore that did not carry guest time).
 */
#define GUEST_EXIT_TSC_BACKWARDS 5
/* The largest status the guest may exit with. */
#define GUEST_EXIT_MAX 63

#define GUEST_REPORT_MAGIC 0x54525047u /* "GPRT" */

enum guest_report_kind {
	GUEST_REPORT_START = 1,	   /* workload configured; value = pages in use */
	GUEST_REPORT_PROGRESS = 2, /* one iteration done */
	GUEST_REPORT_DONE = 3,	   /* final checksum; exit follows */
	GUEST_REPORT_ERROR = 4,	   /* value = error code; exit follows */
};

struct guest_report {
	uint32_t magic;
	uint32_t kind;
	uint32_t cpu;
	uint32_t workload; /* enum guest_workload */
	uint64_t iter;	   /* iterations completed */
	uint64_t ops;	   /* memory operations completed */
	uint64_t checksum; /* running checksum (deterministic for a command line) */
	uint64_t value;
};

enum guest_workload {
	GUEST_WL_SEQ = 1,
	GUEST_WL_RANDOM = 2,
	GUEST_WL_HOTSET = 3,
	GUEST_WL_IDLE = 4,
};

#endif /* VMM_GUEST_ABI_H */
