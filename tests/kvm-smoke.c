// SPDX-License-Identifier: GPL-2.0
/*
 * kvm-smoke: the smallest useful KVM guest. Proves that /dev/kvm works where
 * it runs (this host, or nested inside a QEMU node): a real-mode guest
 * writes a value computed from its input to an I/O port, then halts.
 *
 * Exit 0 when the guest reported the expected value and halted, 1 on any
 * wrong exit, 77 when there is no /dev/kvm.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUEST_PHYS  0x1000
#define REPORT_PORT 0x10

/*
 * mov al, [0x1100]; add al, al; out 0x10, al; hlt
 * The operand lives in guest memory so the guest really reads RAM.
 */
static const uint8_t guest_code[] = {
	0xa0, 0x00,	   0x11, /* mov al, [0x1100] */
	0x00, 0xc0,		 /* add al, al */
	0xe6, REPORT_PORT,	 /* out 0x10, al */
	0xf4,			 /* hlt */
};

static int fail(const char *what)
{
	fprintf(stderr, "kvm-smoke: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(void)
{
	struct kvm_userspace_memory_region region;
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	struct kvm_run *run;
	int kvm, vm, vcpu, run_size, reported = -1;
	uint8_t *mem;

	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		fprintf(stderr, "kvm-smoke: no /dev/kvm: %s\n", strerror(errno));
		return errno == ENOENT ? 77 : 1;
	}
	if (ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) {
		fprintf(stderr, "kvm-smoke: KVM API version mismatch\n");
		return 1;
	}
	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		return fail("KVM_CREATE_VM");

	mem = mmap(NULL, 0x2000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return fail("mmap");
	memcpy(mem, guest_code, sizeof(guest_code));
	mem[0x100] = 21;

	region = (struct kvm_userspace_memory_region){
		.slot = 0,
		.guest_phys_addr = GUEST_PHYS,
		.memory_size = 0x2000,
		.userspace_addr = (uintptr_t)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return fail("KVM_SET_USER_MEMORY_REGION");

	vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0)
		return fail("KVM_CREATE_VCPU");
	run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (run_size < (int)sizeof(*run))
		return fail("KVM_GET_VCPU_MMAP_SIZE");
	run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
	if (run == MAP_FAILED)
		return fail("mmap kvm_run");

	if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0)
		return fail("KVM_GET_SREGS");
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	sregs.ds.base = 0;
	sregs.ds.selector = 0;
	if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0)
		return fail("KVM_SET_SREGS");
	memset(&regs, 0, sizeof(regs));
	regs.rip = GUEST_PHYS;
	regs.rflags = 0x2;
	if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0)
		return fail("KVM_SET_REGS");

	for (int exits = 0; exits < 16; exits++) {
		if (ioctl(vcpu, KVM_RUN, 0) < 0)
			return fail("KVM_RUN");
		switch (run->exit_reason) {
		case KVM_EXIT_IO:
			if (run->io.direction != KVM_EXIT_IO_OUT || run->io.port != REPORT_PORT ||
			    run->io.size != 1) {
				fprintf(stderr, "kvm-smoke: unexpected I/O exit port %#x\n",
					run->io.port);
				return 1;
			}
			reported = *((uint8_t *)run + run->io.data_offset);
			break;
		case KVM_EXIT_HLT:
			if (reported != 42) {
				fprintf(stderr,
					"kvm-smoke: guest halted after reporting %d, want 42\n",
					reported);
				return 1;
			}
			printf("kvm-smoke: guest computed %d and halted\n", reported);
			return 0;
		default:
			fprintf(stderr, "kvm-smoke: unexpected exit reason %u\n", run->exit_reason);
			return 1;
		}
	}
	fprintf(stderr, "kvm-smoke: guest did not halt\n");
	return 1;
}
