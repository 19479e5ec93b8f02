// SPDX-License-Identifier: GPL-2.0
/*
 * kvm-userfault: a KVM guest whose RAM is MADV_USERFAULT memory claimed by
 * an article-protocol userfaultfd.
 *
 * A real-mode guest reads three bytes from two data pages that are missing
 * and writes each to an I/O port.  Its first access blocks inside KVM (the
 * vCPU thread sleeps in the fault, no exit to user space); the handler reads
 * the fault address from the userfaultfd, moves a page holding the expected
 * data in with remap_anon_pages() and wakes it; the guest continues and
 * reports exactly the data moved in.  Then the first page is moved *out*
 * of the halted guest's RAM (remap_anon_pages() with guest RAM as source):
 * KVM must drop its mapping (mmu notifier), so the resumed guest's next read
 * of that page faults to the handler again and sees the new page moved in,
 * not the old one.
 *
 * Then the same guest on MADV_USERFAULT memory that nobody claims, with and
 * without an in-kernel irqchip (with one, KVM would try an asynchronous page
 * fault): each missing page ends KVM_RUN with EFAULT and exit reason
 * KVM_EXIT_MEMORY_FAULT naming the guest page; the VMM moves the page in and
 * runs the vCPU again, and the guest goes on.  The same for memory claimed
 * by a userfaultfd that cannot handle KVM's faults: an article fd created
 * with UFFD_USER_MODE_ONLY, and an ioctl fd with UFFD_FEATURE_SIGBUS
 * (kernel-patches 0005.1).  A KVM_RUN that does not come back in time is a
 * live-lock: the test interrupts it and fails.  Then claimed RAM (an article
 * fd that takes kernel faults) with an in-kernel irqchip and interrupts on,
 * where KVM may wait asynchronously: no exit until the pages are moved in
 * and woken; and accesses that fail otherwise (test_other_accesses(),
 * test_page_table(); tests/host/kvm-shadow-userfault.sh runs them again with
 * shadow paging).
 * Exit 77 without /dev/kvm.
 */
#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <time.h>

#include "compat/kvm-memory-fault.h" /* Linux 6.8's exit, which the series brings to 6.1 */
#include "kt.h"

#define CODE_GPA    0x1000
#define DATA_GPA    0x8000
#define DATA_PAGES  2
#define REPORT_PORT 0x10

/*
 * mov al, [0x8000]; out; mov al, [0x8abc]; out; mov al, [0x9123]; out; hlt;
 * then, resumed: mov al, [0x8000]; out; hlt
 */
static const uint8_t guest_code[] = {
	0xa0, 0x00, 0x80, 0xe6,	       REPORT_PORT, 0xa0, 0xbc, 0x8a, 0xe6, REPORT_PORT, 0xa0,
	0x23, 0x91, 0xe6, REPORT_PORT, 0xf4,	    0xa0, 0x00, 0x80, 0xe6, REPORT_PORT, 0xf4,
};
static const uint32_t read_offsets[] = { 0x0000, 0x0abc, 0x1123 };

/* The same reads, then out 0x11 (done) instead of hlt: with an in-kernel
 * irqchip hlt never exits to user space. */
#define DONE_PORT 0x11
static const uint8_t guest_code_done[] = {
	0xa0, 0x00, 0x80, 0xe6, REPORT_PORT, 0xa0, 0xbc,      0x8a, 0xe6, 0x10,
	0xa0, 0x23, 0x91, 0xe6, 0x10,	     0xe6, DONE_PORT, 0xeb, 0xfe,
};

struct vcpu {
	int fd;
	struct kvm_run *run;
	uint8_t out[8];
	volatile int nout;
	volatile int state; /* 0 running, 1 halted, 2 error */
};

static uint8_t data_byte(uint32_t off)
{
	return (uint8_t)(off * 13 + 7);
}

static void *vcpu_main(void *arg)
{
	struct vcpu *v = arg;
	int state = 2;

	for (int exits = 0; exits < 32; exits++) {
		if (ioctl(v->fd, KVM_RUN, 0) < 0) {
			perror("kvm-userfault: KVM_RUN");
			break;
		}
		if (v->run->exit_reason == KVM_EXIT_HLT) {
			state = 1;
			break;
		}
		if (v->run->exit_reason != KVM_EXIT_IO || v->run->io.port != REPORT_PORT ||
		    v->nout >= (int)sizeof(v->out)) {
			fprintf(stderr, "kvm-userfault: unexpected exit %u\n", v->run->exit_reason);
			break;
		}
		v->out[v->nout] = *((uint8_t *)v->run + v->run->io.data_offset);
		__atomic_store_n(&v->nout, v->nout + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&v->state, state, __ATOMIC_RELEASE);
	return NULL;
}

static int setup_vcpu(int kvm, int vm, struct vcpu *v)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	int size;

	v->fd = ioctl(vm, KVM_CREATE_VCPU, 0);
	size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (v->fd < 0 || size < (int)sizeof(*v->run))
		return -1;
	v->run = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
	if (v->run == MAP_FAILED || ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0)
		return -1;
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	sregs.ds.base = 0;
	sregs.ds.selector = 0;
	memset(&regs, 0, sizeof(regs));
	regs.rip = CODE_GPA;
	regs.rflags = 0x2;
	if (ioctl(v->fd, KVM_SET_SREGS, &sregs) < 0 || ioctl(v->fd, KVM_SET_REGS, &regs) < 0)
		return -1;
	return 0;
}

/*
 * The guest has read page 0.  Move it out of guest RAM, resume the guest and
 * check that its next read faults again and sees the page moved in then.
 */
static void move_out_and_back(struct vcpu *v, int uffd, uint8_t *data, long ps)
{
	uint8_t *out = anon_map(ps), *fresh = anon_map(ps);
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	uint64_t addr = 0;
	pthread_t th;

	CHECK(rap(out, data, ps, 0) == ps, "move page 0 out of the guest's RAM");
	CHECK(out[0] == data_byte(0), "the moved-out page is the guest's");
	__atomic_store_n(&v->state, 0, __ATOMIC_RELEASE);
	if (pthread_create(&th, NULL, vcpu_main, v))
		kt_fatal("pthread_create");
	if (poll(&pfd, 1, 60000) != 1 || read(uffd, &addr, 8) != 8) {
		CHECK(0, "the resumed guest's read of the moved-out page faults again");
		exit(kt_done()); /* the vCPU may still run on the stale mapping, or wait */
	}
	CHECK(addr == (uintptr_t)data, "fault at the moved-out page (%#llx)",
	      (unsigned long long)addr);
	memset(fresh, 0x5a, ps);
	CHECK(rap(data, fresh, ps, 0) == ps, "move a new page in");
	CHECK(uffd_range(uffd, data, data + ps, 0) == 16, "wake");
	pthread_join(th, NULL);
	CHECK(v->state == 1 && v->nout == 4, "the guest halted again after one more byte (%d)",
	      v->nout);
	CHECK(v->out[3] == 0x5a, "it read the new page (%#x), not the moved-out one (%#x)",
	      v->out[3], data_byte(0));
	munmap(out, ps);
	munmap(fresh, ps);
}

/*
 * Guest RAM claimed by an article userfaultfd: faults block in KVM until the
 * page is moved in and woken.  Non-zero if the vCPU may be stuck for good.
 */
static int test_claimed(int kvm)
{
	struct kvm_userspace_memory_region region;
	long ps = page_size();
	struct vcpu v = { 0 };
	uint8_t *code, *data, *staging;
	int vm, uffd, faults = 0;
	pthread_t th;

	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		kt_fatal("KVM_CREATE_VM");

	code = anon_map(ps);
	memcpy(code, guest_code, sizeof(guest_code));
	region = (struct kvm_userspace_memory_region){ .slot = 0,
						       .guest_phys_addr = CODE_GPA,
						       .memory_size = ps,
						       .userspace_addr = (uintptr_t)code };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION code");

	/* Guest data RAM: missing pages, faults reported to uffd. */
	data = anon_map(DATA_PAGES * ps);
	uffd = article_uffd(O_CLOEXEC);
	CHECK(uffd >= 0, "article userfaultfd");
	CHECK(madvise(data, DATA_PAGES * ps, MADV_USERFAULT) == 0, "MADV_USERFAULT guest RAM");
	CHECK(uffd_range(uffd, data, data + DATA_PAGES * ps, 1) == 16, "claim guest RAM");
	region = (struct kvm_userspace_memory_region){ .slot = 1,
						       .guest_phys_addr = DATA_GPA,
						       .memory_size = DATA_PAGES * ps,
						       .userspace_addr = (uintptr_t)data };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION data");
	if (setup_vcpu(kvm, vm, &v))
		kt_fatal("vcpu setup");
	if (pthread_create(&th, NULL, vcpu_main, &v))
		kt_fatal("pthread_create");

	/* The handler: one fault per data page, in the guest's order. */
	for (int page = 0; page < DATA_PAGES; page++) {
		uint64_t addr = 0;
		uint8_t *want = data + page * ps;

		struct pollfd pfd = { .fd = uffd, .events = POLLIN };

		/* Nested KVM under TCG is slow: be patient. */
		if (poll(&pfd, 1, 60000) != 1 || read(uffd, &addr, 8) != 8) {
			CHECK(0, "no fault for guest page %d", page);
			break;
		}
		faults++;
		CHECK(addr == (uintptr_t)want, "fault %d at guest page %d (%#llx, want %p)", faults,
		      page, (unsigned long long)addr, (void *)want);
		if (page == 0) {
			usleep(200 * 1000);
			CHECK(__atomic_load_n(&v.nout, __ATOMIC_ACQUIRE) == 0 &&
				  __atomic_load_n(&v.state, __ATOMIC_ACQUIRE) == 0,
			      "the guest's first access blocks");
		}
		staging = anon_map(ps);
		for (long i = 0; i < ps; i++)
			staging[i] = data_byte((uint32_t)(page * ps + i));
		CHECK(rap((void *)(uintptr_t)addr, staging, ps, 0) == ps, "move the page in");
		CHECK(uffd_range(uffd, (void *)(uintptr_t)addr, (uint8_t *)(uintptr_t)addr + ps,
				 0) == 16,
		      "wake");
		munmap(staging, ps);
	}
	if (faults != DATA_PAGES || kt_failures) {
		/* The vCPU may be stuck in a fault nobody will resolve. */
		CHECK(faults == DATA_PAGES, "%d faults, want %d", faults, DATA_PAGES);
		return 1;
	}
	pthread_join(th, NULL);

	CHECK(faults == DATA_PAGES, "%d faults, want %d", faults, DATA_PAGES);
	CHECK(v.state == 1, "guest halted");
	CHECK(v.nout == 3, "guest reported %d bytes, want 3", v.nout);
	for (int i = 0; i < 3 && i < v.nout; i++)
		CHECK(v.out[i] == data_byte(read_offsets[i]), "byte %d: %#x, want %#x", i, v.out[i],
		      data_byte(read_offsets[i]));
	if (!kt_failures)
		move_out_and_back(&v, uffd, data, ps);
	close(uffd);
	return 0;
}

/* ---- unclaimed MADV_USERFAULT guest RAM ---- */

static void on_sigusr1(int sig)
{
	(void)sig;
}

struct watchdog {
	pthread_t vcpu_thread;
	volatile int armed;
	int fired;
};

/* Interrupt a KVM_RUN that has not returned in 60 s (SIGUSR1: EINTR). */
static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;

	for (int ms = 0; ms < 60000 && __atomic_load_n(&w->armed, __ATOMIC_ACQUIRE); ms += 10)
		usleep(10000);
	if (__atomic_load_n(&w->armed, __ATOMIC_ACQUIRE)) {
		w->fired = 1;
		while (__atomic_load_n(&w->armed, __ATOMIC_ACQUIRE)) {
			pthread_kill(w->vcpu_thread, SIGUSR1);
			usleep(100000);
		}
	}
	return NULL;
}

/* KVM_RUN once under the watchdog; -1 with errno as KVM_RUN left it. */
static int run_guarded(int vcpu_fd, int *livelock)
{
	struct watchdog w = { .vcpu_thread = pthread_self(), .armed = 1 };
	pthread_t th;
	int r, err;

	if (pthread_create(&th, NULL, watchdog_main, &w))
		kt_fatal("pthread_create");
	r = ioctl(vcpu_fd, KVM_RUN, 0);
	err = errno;
	__atomic_store_n(&w.armed, 0, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	*livelock = w.fired;
	errno = err;
	return r;
}

/*
 * Who owns the guest data RAM of test_unclaimed(): nobody, or a userfaultfd
 * that cannot handle KVM's faults, whose faults fail just the same.
 */
enum owner {
	UNCLAIMED,   /* MADV_USERFAULT, no userfaultfd */
	USER_ONLY,   /* MADV_USERFAULT claimed by an article fd, UFFD_USER_MODE_ONLY */
	SIGBUS_UFFD, /* plain memory registered with an ioctl fd, UFFD_FEATURE_SIGBUS */
};

/* Make @data's missing pages fail kernel faults as @owner says; the fd or -1. */
static int own(enum owner owner, uint8_t *data, size_t len, const char *how)
{
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_SIGBUS };
	struct uffdio_register reg = { .range = { (uintptr_t)data, len },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };
	int fd = -1;

	if (owner != SIGBUS_UFFD)
		CHECK(madvise(data, len, MADV_USERFAULT) == 0, "%s: MADV_USERFAULT", how);
	if (owner == USER_ONLY) {
		fd = article_uffd(O_CLOEXEC | UFFD_USER_MODE_ONLY);
		CHECK(fd >= 0 && uffd_range(fd, data, data + len, 1) == 16, "%s: claim guest RAM",
		      how);
	} else if (owner == SIGBUS_UFFD) {
		fd = syscall(__NR_userfaultfd, O_CLOEXEC);
		CHECK(fd >= 0 && ioctl(fd, UFFDIO_API, &api) == 0 &&
			  ioctl(fd, UFFDIO_REGISTER, &reg) == 0,
		      "%s: register guest RAM", how);
	}
	return fd;
}

static void test_unclaimed(int kvm, int with_irqchip, enum owner owner)
{
	static const char *const names[][2] = {
		{ "unclaimed, no irqchip", "unclaimed, in-kernel irqchip" },
		{ "UFFD_USER_MODE_ONLY claim, no irqchip",
		  "UFFD_USER_MODE_ONLY claim, in-kernel irqchip" },
		{ "UFFD_FEATURE_SIGBUS, no irqchip", "UFFD_FEATURE_SIGBUS, in-kernel irqchip" },
	};
	const char *how = names[owner][with_irqchip];
	struct kvm_userspace_memory_region region;
	struct compat_memory_fault mf;
	uint8_t *code, *data, *staging;
	long ps = page_size();
	struct vcpu v = { 0 };
	int vm, moved = 0, livelock = 0, done = 0, fd;

	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		kt_fatal("KVM_CREATE_VM");
	if (with_irqchip && ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0)
		kt_fatal("KVM_CREATE_IRQCHIP");
	code = anon_map(ps);
	memcpy(code, guest_code_done, sizeof(guest_code_done));
	region = (struct kvm_userspace_memory_region){ .slot = 0,
						       .guest_phys_addr = CODE_GPA,
						       .memory_size = ps,
						       .userspace_addr = (uintptr_t)code };
	data = anon_map(DATA_PAGES * ps);
	fd = own(owner, data, DATA_PAGES * ps, how);
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION code");
	region = (struct kvm_userspace_memory_region){ .slot = 1,
						       .guest_phys_addr = DATA_GPA,
						       .memory_size = DATA_PAGES * ps,
						       .userspace_addr = (uintptr_t)data };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION data");
	if (setup_vcpu(kvm, vm, &v))
		kt_fatal("vcpu setup");
	if (with_irqchip) {
		struct kvm_regs regs;

		/* Interrupts on: KVM may now try an asynchronous page fault. */
		if (ioctl(v.fd, KVM_GET_REGS, &regs) < 0)
			kt_fatal("KVM_GET_REGS");
		regs.rflags |= 0x200;
		if (ioctl(v.fd, KVM_SET_REGS, &regs) < 0)
			kt_fatal("KVM_SET_REGS");
	}

	for (int exits = 0; exits < 16 && !done; exits++) {
		if (run_guarded(v.fd, &livelock) == 0) {
			if (v.run->exit_reason == KVM_EXIT_IO && v.run->io.port == DONE_PORT) {
				done = 1;
			} else if (v.run->exit_reason == KVM_EXIT_IO &&
				   v.run->io.port == REPORT_PORT && v.nout < (int)sizeof(v.out)) {
				v.out[v.nout++] = *((uint8_t *)v.run + v.run->io.data_offset);
			} else {
				CHECK(0, "%s: unexpected exit %u", how, v.run->exit_reason);
				break;
			}
			continue;
		}
		if (livelock) {
			CHECK(0,
			      "%s: KVM_RUN did not come back in 60 s: the guest retries a "
			      "page nobody will provide",
			      how);
			break;
		}
		mf = compat_memory_fault(v.run);
		CHECK(errno == EFAULT && v.run->exit_reason == KVM_EXIT_MEMORY_FAULT,
		      "%s: KVM_RUN fails with EFAULT and KVM_EXIT_MEMORY_FAULT (exit %u)", how,
		      v.run->exit_reason);
		if (errno != EFAULT || v.run->exit_reason != KVM_EXIT_MEMORY_FAULT ||
		    moved == DATA_PAGES)
			break;
		CHECK(mf.gpa == DATA_GPA + (uint64_t)moved * ps && mf.size == (uint64_t)ps &&
			  mf.flags == 0,
		      "%s: it names guest page %#llx+%llu (want %#llx+%ld)", how,
		      (unsigned long long)mf.gpa, (unsigned long long)mf.size,
		      (unsigned long long)(DATA_GPA + moved * ps), ps);
		staging = anon_map(ps);
		for (long i = 0; i < ps; i++)
			staging[i] = data_byte((uint32_t)(moved * ps + i));
		CHECK(rap(data + moved * ps, staging, ps, 0) == ps, "%s: move page %d in", how,
		      moved);
		munmap(staging, ps);
		moved++;
	}
	CHECK(done && moved == DATA_PAGES, "%s: the guest finished after %d pages were moved in",
	      how, moved);
	CHECK(v.nout == 3, "%s: guest reported %d bytes, want 3", how, v.nout);
	for (int i = 0; i < 3 && i < v.nout; i++)
		CHECK(v.out[i] == data_byte(read_offsets[i]), "%s: byte %d: %#x, want %#x", how, i,
		      v.out[i], data_byte(read_offsets[i]));
	close(v.fd);
	close(vm);
	if (fd >= 0)
		close(fd);
	munmap(code, ps);
	munmap(data, DATA_PAGES * ps);
}

/*
 * Claimed guest RAM (an article fd that takes kernel faults) with an
 * in-kernel irqchip and interrupts on: KVM may make the fault asynchronous
 * (a kworker waits in the fault, the vCPU halts in the kernel).  Either way
 * nothing exits to user space until the page is moved in and woken, and the
 * guest then reads the moved data.
 */
struct irqchip_vcpu {
	struct vcpu v;
	uint8_t out[4];
	int nout, done, err; /* done, err: atomic */
};

static void *irqchip_vcpu_main(void *arg)
{
	struct irqchip_vcpu *c = arg;
	int livelock = 0;

	for (int exits = 0; exits < 8; exits++) {
		if (run_guarded(c->v.fd, &livelock) < 0) {
			__atomic_store_n(&c->err, livelock ? -1 : errno, __ATOMIC_RELEASE);
			return NULL;
		}
		if (c->v.run->exit_reason == KVM_EXIT_IO && c->v.run->io.port == DONE_PORT)
			break;
		if (c->v.run->exit_reason != KVM_EXIT_IO || c->v.run->io.port != REPORT_PORT ||
		    c->nout >= (int)sizeof(c->out)) {
			__atomic_store_n(&c->err, 1000 + (int)c->v.run->exit_reason,
					 __ATOMIC_RELEASE);
			return NULL;
		}
		c->out[c->nout++] = *((uint8_t *)c->v.run + c->v.run->io.data_offset);
	}
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_claimed_irqchip(int kvm)
{
	struct kvm_userspace_memory_region region;
	struct irqchip_vcpu c = { 0 };
	struct kvm_regs regs;
	long ps = page_size();
	uint8_t *code, *data, *staging;
	int vm, uffd, faults = 0;
	pthread_t th;

	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0 || ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0)
		kt_fatal("KVM_CREATE_VM + KVM_CREATE_IRQCHIP");
	code = anon_map(ps);
	memcpy(code, guest_code_done, sizeof(guest_code_done));
	region = (struct kvm_userspace_memory_region){ .slot = 0,
						       .guest_phys_addr = CODE_GPA,
						       .memory_size = ps,
						       .userspace_addr = (uintptr_t)code };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION code");
	data = anon_map(DATA_PAGES * ps);
	uffd = article_uffd(O_CLOEXEC);
	CHECK(uffd >= 0 && madvise(data, DATA_PAGES * ps, MADV_USERFAULT) == 0 &&
		  uffd_range(uffd, data, data + DATA_PAGES * ps, 1) == 16,
	      "irqchip, claimed: claim guest RAM");
	region = (struct kvm_userspace_memory_region){ .slot = 1,
						       .guest_phys_addr = DATA_GPA,
						       .memory_size = DATA_PAGES * ps,
						       .userspace_addr = (uintptr_t)data };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION data");
	if (setup_vcpu(kvm, vm, &c.v) || ioctl(c.v.fd, KVM_GET_REGS, &regs) < 0)
		kt_fatal("vcpu setup");
	regs.rflags |= 0x200;
	if (ioctl(c.v.fd, KVM_SET_REGS, &regs) < 0)
		kt_fatal("KVM_SET_REGS");
	if (pthread_create(&th, NULL, irqchip_vcpu_main, &c))
		kt_fatal("pthread_create");

	for (int page = 0; page < DATA_PAGES; page++) {
		struct pollfd pfd = { .fd = uffd, .events = POLLIN };
		uint64_t addr = 0;

		if (poll(&pfd, 1, 60000) != 1 || read(uffd, &addr, 8) != 8) {
			CHECK(0, "irqchip, claimed: no fault for guest page %d", page);
			break;
		}
		faults++;
		CHECK(addr == (uintptr_t)(data + page * ps),
		      "irqchip, claimed: fault %d at page %d", faults, page);
		CHECK(!__atomic_load_n(&c.done, __ATOMIC_ACQUIRE) &&
			  !__atomic_load_n(&c.err, __ATOMIC_ACQUIRE),
		      "irqchip, claimed: KVM_RUN waits, no exit to user space");
		staging = anon_map(ps);
		for (long i = 0; i < ps; i++)
			staging[i] = data_byte((uint32_t)(page * ps + i));
		CHECK(rap(data + page * ps, staging, ps, 0) == ps &&
			  uffd_range(uffd, data + page * ps, data + (page + 1) * ps, 0) == 16,
		      "irqchip, claimed: move page %d in and wake", page);
		munmap(staging, ps);
	}
	if (faults != DATA_PAGES)
		exit(kt_done()); /* the vCPU may wait for good */
	pthread_join(th, NULL);
	CHECK(c.done && !c.err, "irqchip, claimed: the guest finished (error %d)", c.err);
	CHECK(c.nout == 3, "irqchip, claimed: guest reported %d bytes, want 3", c.nout);
	for (int i = 0; i < 3 && i < c.nout; i++)
		CHECK(c.out[i] == data_byte(read_offsets[i]), "irqchip, claimed: byte %d: %#x", i,
		      c.out[i]);
	close(c.v.fd);
	close(vm);
	close(uffd);
	munmap(code, ps);
	munmap(data, DATA_PAGES * ps);
}

/*
 * Two accesses of KVM to unclaimed missing guest RAM that do not end in
 * KVM_EXIT_MEMORY_FAULT (docs/kernel-interfaces.md, "KVM guests"):
 *  - an instruction KVM emulates (outsb: string I/O is emulated) reads its
 *    memory operand from the missing page: the emulator takes the address
 *    for MMIO and exits with KVM_EXIT_MMIO for it; the data user space
 *    answers is what the guest outputs;
 *  - kvmclock (MSR_KVM_SYSTEM_TIME_NEW) pointed at a missing page: KVM's
 *    update of it fails silently, KVM_RUN goes on and the page stays
 *    missing.
 */
#define MSR_KVM_SYSTEM_TIME_NEW 0x4b564d01

/* mov si, 0x8000; mov dx, 0x10; outsb; out 0x11, al; jmp $ */
static const uint8_t guest_code_outsb[] = { 0xbe, 0x00, 0x80,	   0xba, 0x10, 0x00,
					    0x6e, 0xe6, DONE_PORT, 0xeb, 0xfe };

static void test_other_accesses(int kvm)
{
	struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry e;
	} msrs = { .hdr = { .nmsrs = 1 },
		   .e = { .index = MSR_KVM_SYSTEM_TIME_NEW, .data = DATA_GPA + 0x1000 + 1 } };
	struct kvm_userspace_memory_region region;
	long ps = page_size();
	struct vcpu v = { 0 };
	uint8_t *code, *data;
	int vm, livelock = 0, mmio = 0, out = -1, done = 0;

	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		kt_fatal("KVM_CREATE_VM");
	code = anon_map(ps);
	memcpy(code, guest_code_outsb, sizeof(guest_code_outsb));
	region = (struct kvm_userspace_memory_region){ .slot = 0,
						       .guest_phys_addr = CODE_GPA,
						       .memory_size = ps,
						       .userspace_addr = (uintptr_t)code };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION code");
	data = anon_map(DATA_PAGES * ps);
	CHECK(madvise(data, DATA_PAGES * ps, MADV_USERFAULT) == 0, "other: MADV_USERFAULT");
	region = (struct kvm_userspace_memory_region){ .slot = 1,
						       .guest_phys_addr = DATA_GPA,
						       .memory_size = DATA_PAGES * ps,
						       .userspace_addr = (uintptr_t)data };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION data");
	if (setup_vcpu(kvm, vm, &v))
		kt_fatal("vcpu setup");
	CHECK(ioctl(v.fd, KVM_SET_MSRS, &msrs) == 1, "kvmclock at the missing guest page %#x",
	      DATA_GPA + 0x1000);

	for (int exits = 0; exits < 8 && !done; exits++) {
		if (run_guarded(v.fd, &livelock) < 0) {
			CHECK(0, "other: KVM_RUN failed (exit %u%s)", v.run->exit_reason,
			      livelock ? ", stuck" : "");
			break;
		}
		if (v.run->exit_reason == KVM_EXIT_MMIO) {
			mmio++;
			CHECK(v.run->mmio.phys_addr == DATA_GPA && v.run->mmio.len == 1 &&
				  !v.run->mmio.is_write,
			      "emulated outsb: KVM_EXIT_MMIO reads the missing RAM page (%#llx+%u "
			      "w%u)",
			      (unsigned long long)v.run->mmio.phys_addr, v.run->mmio.len,
			      v.run->mmio.is_write);
			v.run->mmio.data[0] = 0xab;
		} else if (v.run->exit_reason == KVM_EXIT_IO && v.run->io.port == REPORT_PORT) {
			out = *((uint8_t *)v.run + v.run->io.data_offset);
		} else if (v.run->exit_reason == KVM_EXIT_IO && v.run->io.port == DONE_PORT) {
			done = 1;
		} else {
			CHECK(0, "other: unexpected exit %u", v.run->exit_reason);
			break;
		}
	}
	CHECK(mmio == 1, "emulated outsb: one KVM_EXIT_MMIO (%d)", mmio);
	CHECK(out == 0xab, "emulated outsb: the guest output what user space answered (%#x)", out);
	CHECK(done, "the guest finished: no exit for the kvmclock page");
	CHECK(resident(data) == 0 && resident(data + ps) == 0,
	      "the missing pages stayed missing (kvmclock update skipped)");
	close(v.fd);
	close(vm);
	munmap(code, ps);
	munmap(data, DATA_PAGES * ps);
}

/*
 * Guest page tables in unclaimed missing RAM.  A 32-bit paging guest whose
 * page directory is the missing page DATA_GPA fetches its first instruction:
 * - with TDP (NPT/EPT), the hardware walk faults on the page directory's
 *   guest physical page: KVM_EXIT_MEMORY_FAULT names DATA_GPA; the VMM moves
 *   in a directory mapping 0-4 MiB (one 4 MiB page), then the guest's read
 *   of the missing DATA_GPA + 0x1000 names that page, and the guest ends;
 * - with shadow paging (kvm_amd.npt=0, kvm_intel.ept=0), KVM's software
 *   walk cannot read the directory and injects a #PF into the guest, which
 *   has no IDT: a triple fault, KVM_EXIT_SHUTDOWN, no KVM_EXIT_MEMORY_FAULT.
 */
/* mov al, [0x9000]; out 0x10, al; out 0x11, al; jmp $ (32-bit code) */
static const uint8_t guest_code_pg32[] = { 0xa0,	0x00, 0x90,	 0x00, 0x00, 0xe6,
					   REPORT_PORT, 0xe6, DONE_PORT, 0xeb, 0xfe };

static int tdp_enabled(void)
{
	static const char *const params[] = { "/sys/module/kvm_amd/parameters/npt",
					      "/sys/module/kvm_intel/parameters/ept" };

	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(params[i], "r");
		int c = f ? fgetc(f) : EOF;

		if (f)
			fclose(f);
		if (c != EOF)
			return c == 'Y' || c == '1';
	}
	return 1;
}

static void test_page_table(int kvm)
{
	const int tdp = tdp_enabled();
	const char *how = tdp ? "page tables, TDP" : "page tables, shadow paging";
	struct kvm_userspace_memory_region region;
	struct compat_memory_fault mf;
	struct kvm_sregs sregs;
	long ps = page_size();
	struct vcpu v = { 0 };
	uint8_t *code, *data, *staging;
	uint64_t faults[4];
	int vm, nfaults = 0, livelock = 0, done = 0, shutdown = 0, out = -1;

	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		kt_fatal("KVM_CREATE_VM");
	code = anon_map(ps);
	memcpy(code, guest_code_pg32, sizeof(guest_code_pg32));
	region = (struct kvm_userspace_memory_region){ .slot = 0,
						       .guest_phys_addr = CODE_GPA,
						       .memory_size = ps,
						       .userspace_addr = (uintptr_t)code };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION code");
	data = anon_map(DATA_PAGES * ps);
	CHECK(madvise(data, DATA_PAGES * ps, MADV_USERFAULT) == 0, "%s: MADV_USERFAULT", how);
	region = (struct kvm_userspace_memory_region){ .slot = 1,
						       .guest_phys_addr = DATA_GPA,
						       .memory_size = DATA_PAGES * ps,
						       .userspace_addr = (uintptr_t)data };
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		kt_fatal("KVM_SET_USER_MEMORY_REGION data");
	if (setup_vcpu(kvm, vm, &v) || ioctl(v.fd, KVM_GET_SREGS, &sregs) < 0)
		kt_fatal("vcpu setup");
	/* Flat 32-bit protected mode, paging with 4 MiB pages, no IDT. */
	sregs.cs = (struct kvm_segment){ .base = 0,
					 .limit = 0xffffffff,
					 .selector = 8,
					 .type = 0xb,
					 .present = 1,
					 .s = 1,
					 .db = 1,
					 .g = 1 };
	sregs.ds = (struct kvm_segment){ .base = 0,
					 .limit = 0xffffffff,
					 .selector = 16,
					 .type = 0x3,
					 .present = 1,
					 .s = 1,
					 .db = 1,
					 .g = 1 };
	sregs.es = sregs.fs = sregs.gs = sregs.ss = sregs.ds;
	sregs.idt.base = 0;
	sregs.idt.limit = 0;
	sregs.cr3 = DATA_GPA;
	sregs.cr4 = 0x10;	/* PSE */
	sregs.cr0 = 0x80000011; /* PG, ET, PE */
	sregs.efer = 0;
	if (ioctl(v.fd, KVM_SET_SREGS, &sregs) < 0)
		kt_fatal("KVM_SET_SREGS");

	for (int exits = 0; exits < 8 && !done && !shutdown; exits++) {
		if (run_guarded(v.fd, &livelock) == 0) {
			if (v.run->exit_reason == KVM_EXIT_IO && v.run->io.port == REPORT_PORT)
				out = *((uint8_t *)v.run + v.run->io.data_offset);
			else if (v.run->exit_reason == KVM_EXIT_IO && v.run->io.port == DONE_PORT)
				done = 1;
			else if (v.run->exit_reason == KVM_EXIT_SHUTDOWN)
				shutdown = 1;
			else {
				CHECK(0, "%s: unexpected exit %u", how, v.run->exit_reason);
				break;
			}
			continue;
		}
		if (livelock || errno != EFAULT || v.run->exit_reason != KVM_EXIT_MEMORY_FAULT ||
		    nfaults == 4) {
			CHECK(0, "%s: KVM_RUN failed (exit %u%s)", how, v.run->exit_reason,
			      livelock ? ", stuck" : "");
			break;
		}
		mf = compat_memory_fault(v.run);
		faults[nfaults++] = mf.gpa;
		staging = anon_map(ps);
		if (mf.gpa == DATA_GPA)
			*(uint32_t *)staging = 0x83; /* PDE 0: 4 MiB page at 0, present, rw */
		else
			memset(staging, 0x6c, ps);
		CHECK(mf.gpa >= DATA_GPA && mf.gpa < DATA_GPA + (uint64_t)DATA_PAGES * ps &&
			  rap(data + (mf.gpa - DATA_GPA), staging, ps, 0) == ps,
		      "%s: move guest page %#llx in", how, (unsigned long long)mf.gpa);
		munmap(staging, ps);
	}
	if (tdp) {
		CHECK(nfaults == 2 && faults[0] == DATA_GPA && faults[1] == DATA_GPA + 0x1000,
		      "%s: KVM_EXIT_MEMORY_FAULT for the page directory, then the data page (%d)",
		      how, nfaults);
		CHECK(done && out == 0x6c, "%s: the guest read the moved data page (%#x)", how,
		      out);
	} else {
		CHECK(nfaults == 0 && shutdown,
		      "%s: no KVM_EXIT_MEMORY_FAULT (%d), the #PF KVM injected shut the guest down",
		      how, nfaults);
	}
	printf("kvm-userfault: %s: %d memory faults, %s\n", how, nfaults,
	       done	  ? "guest done"
	       : shutdown ? "guest shut down"
			  : "neither");
	close(v.fd);
	close(vm);
	munmap(code, ps);
	munmap(data, DATA_PAGES * ps);
}

/* usage: kvm-userfault [other]   (other: only test_other_accesses(), test_page_table()) */
int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_sigusr1 };
	int kvm;

	kt_name = "kvm-userfault";
	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		kt_skip("no /dev/kvm");
	sigaction(SIGUSR1, &sa, NULL);
	if (argc > 1 && !strcmp(argv[1], "other")) {
		test_other_accesses(kvm);
		test_page_table(kvm);
		return kt_done();
	}
	if (test_claimed(kvm))
		return kt_done();
	CHECK(ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_MEMORY_FAULT_INFO) == 1,
	      "KVM_CAP_MEMORY_FAULT_INFO");
	test_unclaimed(kvm, 0, UNCLAIMED);
	test_unclaimed(kvm, 1, UNCLAIMED);
	/* Claimed, but by a userfaultfd that fails every fault KVM takes. */
	test_unclaimed(kvm, 0, USER_ONLY);
	test_unclaimed(kvm, 1, USER_ONLY);
	test_unclaimed(kvm, 1, SIGBUS_UFFD);
	test_claimed_irqchip(kvm);
	test_other_accesses(kvm);
	test_page_table(kvm);
	return kt_done();
}
