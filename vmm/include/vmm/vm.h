/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The VM: KVM VM + guest RAM + vCPU threads + port-I/O devices.
 * Migration-independent: the migration glue (vmm/migrate/) uses the calls
 * below and never the structs' fields; vmm-api-test links these objects
 * alone (VMM_LIB_SRCS in vmm/build.mk).
 *
 * Life cycle:
 *   vm_create()              RAM (plain or lazy), vCPUs, devices
 *   vm_boot_image() | vm_state_load()   initial state
 *   ram_start_faults()       (lazy RAM) before the vCPUs run
 *   vm_start()               vCPU threads run
 *   vm_pause()/vm_resume()   vCPUs out of / back into the guest
 *   vm_wait()                until the guest exits or vm_stop()
 *   vm_destroy()
 * All functions return 0 or -errno and print nothing, except where noted.
 */
#ifndef VMM_VM_H
#define VMM_VM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ram/backend.h"
#include "ram/ram.h"
#include "vmm/guest-abi.h"

struct vm;
struct vcpu;

struct vm_config {
	uint64_t mem_size;		    /* bytes, page aligned, <= GUEST_MAX_MEM */
	unsigned int nr_vcpus;		    /* 1 .. GUEST_MAX_CPUS */
	const struct ram_backend_ops *lazy; /* NULL: plain RAM */
	int console_fd;			    /* serial output; -1 discards it */
	bool trace_reports;		    /* print each guest report to stderr */
};

/* ---- Devices (port I/O) ---- */

/*
 * A port-I/O device.  io() handles one access of `size` bytes (1, 2, 4);
 * for IN it fills data.  save()/load() carry its state in the VM state
 * blob under `state_id` (save returns bytes written, or the size needed
 * when buf is NULL).  flush(), if set, writes out what the device holds
 * back (vm_pause(): a paused VM's output is complete); destroy(), if set,
 * frees it (vm_destroy(), after the vCPUs ended, last registered first).
 */
struct pio_device {
	const char *name;
	uint16_t base, len;
	uint32_t state_id;
	void *priv;
	void (*io)(struct vcpu *vcpu, struct pio_device *dev, uint16_t port, bool out, void *data,
		   int size);
	size_t (*save)(struct pio_device *dev, void *buf, size_t len);
	int (*load)(struct pio_device *dev, const void *buf, size_t len);
	void (*flush)(struct pio_device *dev);
	void (*destroy)(struct pio_device *dev);
};

#define VM_MAX_DEVICES 8

/* From a device, on the vCPU's thread: the vCPU halts for good. */
void vcpu_park(struct vcpu *vcpu);

/* Registers a device (at creation time only). */
int vm_register_pio(struct vm *vm, struct pio_device *dev);

/* ---- The VM (fields are private to the VM's own files: vmm/migrate/ uses the calls) ---- */

enum vcpu_state {
	VCPU_RUNNING,
	VCPU_PARKED,
	VCPU_HALTED,
	VCPU_EXITED
};

struct vcpu {
	struct vm *vm;
	unsigned int id;
	int fd;
	/*
	 * KVM's binary statistics of this vCPU (KVM_GET_STATS_FD, Linux 5.14+;
	 * -1 without), opened at creation: the ioctl takes the vCPU's mutex,
	 * which KVM_RUN holds, so asking for it while the vCPU runs waits
	 * for its next exit to user space; reading the fd takes no lock.
	 */
	int stats_fd;
	struct kvm_run *run;
	size_t run_size;
	pthread_t thread;
	bool thread_started;
	uint32_t tid;	       /* its thread's id: set by the thread before any KVM_RUN, atomic */
	enum vcpu_state state; /* under vm->lock */
	/*
	 * The CPUID KVM holds for this vCPU, read back once it was set at
	 * creation (x86_vcpu_init): KVM refuses a different one after the first
	 * KVM_RUN, so it only changes by a state load, which updates it.
	 */
	struct kvm_cpuid2 *cpuid;
	/*
	 * KVM copies REGS, SREGS and EVENTS to run->s.regs whenever KVM_RUN
	 * returns (KVM_CAP_SYNC_REGS: run->kvm_valid_regs, set at creation
	 * where the host has it).  regs_synced: that copy is the vCPU's state
	 * (set by the vCPU thread after KVM_RUN, cleared by a state load), so a
	 * save, inside a migration's downtime, needs no GET ioctl for them.
	 */
	bool regs_synced;
	bool tsc_offset_attr; /* KVM_VCPU_TSC_OFFSET is there (probed at creation) */
};

struct vm {
	struct vm_config cfg;
	int kvm_fd, vm_fd;
	struct ram *ram; /* NULL until vm_create() reserved it */
	unsigned int nr_vcpus;
	struct vcpu vcpus[GUEST_MAX_CPUS];
	struct pio_device *devs[VM_MAX_DEVICES];
	unsigned int nr_devs;
	struct kvm_cpuid2 *cpuid;
	uint32_t *msr_list; /* MSRs saved in the state blob */
	unsigned int nr_msrs;
	int xsave_size;
	uint32_t tsc_khz;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool pause_req;
	bool pause_spins; /* vm_pause() may spin: the vCPUs leave it a CPU of its own */
	bool stopped;	  /* vm_stop() called */
	int exit_status;  /* valid once stopped: guest status or -errno */
	int event_fd;	  /* eventfd, readable once stopped */

	/* Guest port device state. */
	struct guest_report last_report;
	uint64_t nr_reports;
	struct pio_device guest_port;
};

/* *why: a static description of the step that failed. */
int vm_create(const struct vm_config *cfg, struct vm **out, const char **why);
void vm_destroy(struct vm *vm);

static inline struct ram *vm_ram(struct vm *vm)
{
	return vm->ram;
}

/*
 * Loads an ELF64 x86-64 image and boot structures (page tables, GDT, boot
 * info with `cmdline`) and points every vCPU at the entry.  The memory is
 * written through `mem` (the guest RAM if NULL; with lazy RAM, a staging
 * buffer of mem_size bytes that then serves as the page source).
 * -ENOEXEC for a bad image, -EFBIG if it does not fit, -E2BIG for a long
 * command line.  *why gets a static description of what was wrong.
 */
int vm_boot_image(struct vm *vm, const char *path, const char *cmdline, void *mem,
		  const char **why);

/*
 * Start the vCPU threads not started yet.  After vm_pause() they start
 * parked, until vm_resume() (an incoming migration creates them before the
 * state arrives, so that its switch-over only wakes them).
 */
int vm_start(struct vm *vm);
/*
 * The vCPU whose thread has id tid, -1 for none (a thread that is no
 * vCPU, or a vCPU thread that never ran).  Any thread.
 */
int vm_vcpu_of_thread(struct vm *vm, uint32_t tid);
/*
 * Every vCPU out of the guest with pending I/O completed; state is stable.
 * -ESHUTDOWN when the VM is stopped before, or while a vCPU cannot leave.
 */
int vm_pause(struct vm *vm);
int vm_resume(struct vm *vm);
/* Ends the VM: vCPU threads return; status is what vm_wait reports. */
void vm_stop(struct vm *vm, int status);
/* 1 once stopped (status in *status), 0 on timeout (ms, -1 = forever). */
int vm_wait(struct vm *vm, int timeout_ms, int *status);
/*
 * One line per vCPU on stderr: the state the VMM keeps and where its thread
 * is in the kernel (vmm/vm-report.c).  For a VM stopped from outside.
 */
void vm_report_vcpus(struct vm *vm);
/*
 * True once vm_stop() was called (the guest exited, failed, or was told to
 * stop).  Any thread; takes no lock and never blocks, so a loop may ask it
 * between sends (the migration source asks whether the guest ended).
 */
bool vm_is_stopped(struct vm *vm);
/* eventfd that becomes readable when the VM stops (for poll loops). */
static inline int vm_event_fd(struct vm *vm)
{
	return vm->event_fd;
}
/* The guest's last report (kind 0 if none yet); thread safe. */
void vm_last_report(struct vm *vm, struct guest_report *out, uint64_t *count);

/*
 * Guest RAM as guest-physical regions (guest-abi.h): the RAM object's bytes
 * [offset, offset + size) appear at gpa.  Below 3 GiB one region, else two
 * (the second at 4 GiB).  Fills out[VM_MAX_RAM_REGIONS], returns how many.
 */
#define VM_MAX_RAM_REGIONS 2
struct vm_ram_region {
	uint64_t gpa, size, offset;
};
unsigned int vm_ram_regions(const struct vm *vm, struct vm_ram_region *out);

/* KVM's dirty log of guest RAM (for precopy): on or off. */
int vm_dirty_log_set(struct vm *vm, bool on);
/* ORs the pages dirtied since the last fetch into @bitmap (a bit a RAM page). */
int vm_dirty_log_fetch(struct vm *vm, uint64_t *bitmap);

/* ---- State (vmm/state.c, layout in docs/vmm.md) ---- */

/* Bytes vm_state_save will need (VM paused or not started). */
ssize_t vm_state_size(struct vm *vm);
/* Writes the versioned, checksummed blob; returns its length. Paused VM. */
ssize_t vm_state_save(struct vm *vm, void *buf, size_t len);
/*
 * Loads a blob into a VM created with the blob's geometry, not running.
 * On failure *why (why_len bytes, may be NULL) says what was refused; a
 * host that cannot give the guest the CPUID or TSC rate it had gets
 * -EOPNOTSUPP.
 */
int vm_state_load(struct vm *vm, const void *buf, size_t len, char *why, size_t why_len);
/* Validates a blob and returns its geometry, to create the VM for it. */
int vm_state_peek(const void *buf, size_t len, uint64_t *mem_size, unsigned int *nr_vcpus);

#endif /* VMM_VM_H */
