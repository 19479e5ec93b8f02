// SPDX-License-Identifier: GPL-2.0
/*
 * vmm-api-test: the VM API as the migration agent uses it, in one process.
 *
 *   0. kvm-exit only: a thread that reads a missing page dies of SIGBUS, and
 *      the guard says which page (in a child, before any VM runs);
 *   1. reference: a plain VM runs the guest to the end;
 *   2. a child of fork() has no guest RAM (MADV_DONTFORK); then
 *      VM A runs the same guest, is paused and resumed many times (pause
 *      latency measured), then paused once more: its state blob (memory
 *      only, no files) and a copy of its RAM are taken, and it runs on;
 *   3. the blob is checked: peek, a flipped byte, a truncation, another
 *      version are all rejected;
 *   4. VM B (lazy RAM, the back end given) loads the blob and starts at once
 *      with every page missing; its page source is asynchronous: request()
 *      only queues the page, a server thread installs it, and a pusher
 *      thread installs every page in order meanwhile (background push,
 *      racing with the server), each claiming its page in the page record
 *      first, as the migration agent does: one of them installs it;
 *   5. A and B both finish with the reference checksum; every page of B is
 *      present, none was installed twice;
 *   6. VM C starts from the blob with a source that never answers: it makes
 *      no progress, and vm_destroy() still returns promptly.
 *
 * usage: vmm-api-test GUEST_ELF [BACKEND]     exit 0 pass, 1 fail, 77 skip
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ram/record.h"
#include "vmm/state.h"
#include "vmm/util.h"
#include "vmm/vm.h"

#define MEM (16ULL << 20)
/*
 * The guest must still be running at A's switch-over pause, about 110 ms
 * after it starts: on this host 1500 iterations take about a second.  A
 * nested node is ten times slower and passes a smaller count (argv[3]).
 */
#define CMDLINE_FMT   "workload=random ops=40000 iters=%u seed=21 quiet=1"
#define DEFAULT_ITERS 1500u
static char cmdline[96];

static const char *guest;
static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL: " __VA_ARGS__);                                     \
			fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                         \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static struct vm *new_vm(const struct ram_backend_ops *lazy, void *staging)
{
	struct vm_config cfg = { .mem_size = MEM, .nr_vcpus = 2, .console_fd = -1, .lazy = lazy };
	const char *why;
	struct vm *vm;
	int r = vm_create(&cfg, &vm, &why);

	if (r < 0) {
		fprintf(stderr, "vm_create: %s: %s\n", why, strerror(-r));
		exit(1);
	}
	if (staging || !lazy) {
		r = vm_boot_image(vm, guest, cmdline, staging, &why);
		if (r < 0) {
			fprintf(stderr, "vm_boot_image: %s: %s\n", why, strerror(-r));
			exit(1);
		}
	}
	return vm;
}

/*
 * Hang guards, not timings: the test must pass on a machine as busy as CI's
 * can get, so anything that waits waits on progress, bounded only by this.
 */
#define HANG_GUARD_MS 300000

/* Waits (bounded by HANG_GUARD_MS) until *counter, read under lock, is non-zero. */
static int wait_nonzero(pthread_mutex_t *lock, const uint64_t *counter)
{
	uint64_t t0 = now_ns();

	for (;;) {
		uint64_t v;

		pthread_mutex_lock(lock);
		v = *counter;
		pthread_mutex_unlock(lock);
		if (v)
			return 0;
		if (now_ns() - t0 > HANG_GUARD_MS * 1000000ULL)
			return -1;
		usleep(1000);
	}
}

static uint64_t finish(struct vm *vm, const char *name)
{
	struct guest_report rep;
	int status = -1;

	if (vm_wait(vm, HANG_GUARD_MS, &status) != 1) {
		fprintf(stderr, "FAIL: %s did not finish in %d s\n", name, HANG_GUARD_MS / 1000);
		exit(1);
	}
	CHECK(vm_is_stopped(vm), "%s: finished but not stopped", name);
	vm_last_report(vm, &rep, NULL);
	CHECK(status == 0, "%s: guest status %d", name, status);
	CHECK(rep.kind == GUEST_REPORT_DONE, "%s: last report kind %u", name, rep.kind);
	printf("%s: checksum 0x%016" PRIx64 "\n", name, rep.checksum);
	return rep.checksum;
}

/* ---- the asynchronous page source ---- */

struct async_source {
	struct ram_source src;
	const uint8_t *image; /* RAM of A at the switch-over */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t queue[4096];
	unsigned int head, tail;
	bool stop;
	uint64_t requested, served, pushed, already;
};

static int async_request(struct ram_source *src, struct ram *ram, uint64_t pg)
{
	struct async_source *s = container_of(src, struct async_source, src);

	pthread_mutex_lock(&s->lock);
	if (s->tail - s->head == 4096) {
		pthread_mutex_unlock(&s->lock);
		return -ENOSPC;
	}
	s->queue[s->tail++ % 4096] = pg;
	s->requested++;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* 0 installed, 1 already there or being installed (claimed by the other thread), -errno. */
static int install_from(struct async_source *s, struct ram *ram, uint8_t *bounce, uint64_t pg)
{
	unsigned from = RAM_FROM(RAM_PAGE_MISSING) | RAM_FROM(RAM_PAGE_REQUESTED);
	uint64_t old;
	int r;

	if (!ram_claim(ram, pg, from, RAM_PAGE_INSTALLING, RAM_BY_SOURCE, false, &old))
		return 1;
	memcpy(bounce, s->image + pg * PAGE_SIZE, PAGE_SIZE);
	r = ram_install_claimed(ram, pg, page_is_zero(bounce) ? NULL : bounce, 1, RAM_BY_SOURCE,
				NULL);
	if (r < 0)
		ram_unclaim(ram, pg, old);
	return r;
}

struct worker {
	struct async_source *s;
	struct ram *ram;
	int err;
};

static void *server_thread(void *arg)
{
	struct worker *w = arg;
	struct async_source *s = w->s;
	uint8_t *bounce =
	    mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	for (;;) {
		uint64_t pg;
		int r;

		pthread_mutex_lock(&s->lock);
		while (s->head == s->tail && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->head == s->tail) {
			pthread_mutex_unlock(&s->lock);
			break;
		}
		pg = s->queue[s->head++ % 4096];
		pthread_mutex_unlock(&s->lock);
		r = install_from(s, w->ram, bounce, pg);
		if (r < 0) {
			w->err = r;
			break;
		}
		__atomic_fetch_add(r == 0 ? &s->served : &s->already, 1, __ATOMIC_RELAXED);
	}
	munmap(bounce, PAGE_SIZE);
	return NULL;
}

static void *pusher_thread(void *arg)
{
	struct worker *w = arg;
	uint8_t *bounce =
	    mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	usleep(20000); /* let demand faults come first */
	for (uint64_t pg = 0; pg < ram_nr_pages(w->ram); pg++) {
		int r;

		if (ram_present(w->ram, pg))
			continue;
		r = install_from(w->s, w->ram, bounce, pg);
		if (r < 0) {
			w->err = r;
			break;
		}
		__atomic_fetch_add(r == 0 ? &w->s->pushed : &w->s->already, 1, __ATOMIC_RELAXED);
	}
	munmap(bounce, PAGE_SIZE);
	return NULL;
}

/*
 * kvm-exit: a thread that reads a missing page without ensuring it first
 * dies of SIGBUS, and the guard says why.  A child reads it, from a VM of
 * its own armed as B's will be, and the child is forked before any VM of
 * this process runs: a fork() while vCPUs run makes their RAM copy-on-write
 * under them (QEMU makes guest RAM MADV_DONTFORK for that reason), and this
 * check used to fork while VM A ran.
 */
static void check_sigbus_guard(const struct ram_backend_ops *ops)
{
	struct rlimit no_core = { 0, 0 };
	char msg[600] = "";
	int pfd[2], status = 0;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	CHECK(pipe(pfd) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		struct vm *vm;

		setrlimit(RLIMIT_CORE, &no_core);
		dup2(pfd[1], 2);
		vm = new_vm(ops, NULL);
		(void)*(volatile uint8_t *)(ram_host(vm_ram(vm)) + MEM - PAGE_SIZE);
		_exit(0); /* it read the page: no guard */
	}
	close(pfd[1]);
	while (got < sizeof(msg) - 1 && (n = read(pfd[0], msg + got, sizeof(msg) - 1 - got)) > 0)
		got += (size_t)n;
	close(pfd[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
	      "a read of a missing page did not end in SIGBUS (status %#x)", status);
	CHECK(strstr(msg,
		     "vmm: SIGBUS: a VMM thread touched guest RAM at offset 0x0000000000fff000 "
		     "whose page has not arrived") != NULL,
	      "the SIGBUS guard said: '%s'", msg);
	printf("SIGBUS guard: %s", msg);
}

/*
 * A child of fork() has no guest RAM (MADV_DONTFORK): a fork while vCPUs
 * run would otherwise make their RAM copy-on-write under them, which in
 * the nested nodes ends in a triple fault within some thousand forks.
 * Forked before the VM runs, for the same reason.
 */
static void check_no_ram_in_child(struct vm *vm)
{
	struct rlimit no_core = { 0, 0 };
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		setrlimit(RLIMIT_CORE, &no_core);
		(void)*(volatile uint8_t *)ram_host(vm_ram(vm));
		_exit(0); /* it read guest RAM: inherited */
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
	      "a child of fork() read guest RAM (status %#x): MADV_DONTFORK missing", status);
}

/* ---- blob checks ---- */

static void check_blob(struct vm *vm, uint8_t *blob, size_t len)
{
	uint8_t *bad = malloc(len);
	struct vm_state_header h;
	uint64_t mem;
	unsigned int n;

	CHECK(vm_state_peek(blob, len, &mem, &n) == 0 && mem == MEM && n == 2,
	      "peek of a good blob");
	memcpy(bad, blob, len);
	bad[len / 2] ^= 0x40;
	CHECK(vm_state_peek(bad, len, NULL, NULL) == -EBADMSG, "flipped byte accepted");
	CHECK(vm_state_load(vm, bad, len, NULL, 0) == -EBADMSG, "load of a flipped blob");
	CHECK(vm_state_peek(blob, len - 8, NULL, NULL) == -EBADMSG, "truncated blob accepted");
	memcpy(bad, blob, len);
	memcpy(&h, bad, sizeof(h));
	h.version = 99;
	memcpy(bad, &h, sizeof(h));
	CHECK(vm_state_peek(bad, len, NULL, NULL) == -EPROTONOSUPPORT, "other version accepted");
	CHECK(vm_state_save(vm, bad, 100) == -ENOSPC, "save into a short buffer");
	free(bad);
}

int main(int argc, char **argv)
{
	const struct ram_backend_ops *ops;
	struct async_source as = { .src.request = async_request };
	struct worker server = { .s = &as }, pusher = { .s = &as };
	pthread_t ts, tp;
	uint64_t ref, sum_a, sum_b, worst = 0, total = 0;
	struct ram_stats st;
	struct vm *vm0, *a, *b;
	uint8_t *image, *blob;
	ssize_t len;
	int r;

	if (argc < 2) {
		fprintf(stderr, "usage: vmm-api-test GUEST_ELF [BACKEND [ITERS]]\n");
		return 2;
	}
	guest = argv[1];
	snprintf(cmdline, sizeof(cmdline), CMDLINE_FMT,
		 argc > 3 ? (unsigned int)strtoul(argv[3], NULL, 10) : DEFAULT_ITERS);
	if (access("/dev/kvm", R_OK | W_OK)) {
		fprintf(stderr, "skip: no usable /dev/kvm\n");
		return 77;
	}
	r = ram_backend_find(argc > 2 ? argv[2] : "auto", &ops);
	if (r < 0) {
		fprintf(stderr, "skip: back end %s: %s\n", argc > 2 ? argv[2] : "auto",
			strerror(-r));
		return 77;
	}
	pthread_mutex_init(&as.lock, NULL);
	pthread_cond_init(&as.cond, NULL);

	if (ops->own_thread_faults)
		check_sigbus_guard(ops);

	/* 1. reference */
	vm0 = new_vm(NULL, NULL);
	CHECK(vm_start(vm0) == 0, "start reference");
	ref = finish(vm0, "reference");
	vm_destroy(vm0);

	/* 2. A: pause/resume cycles, then the switch-over */
	a = new_vm(NULL, NULL);
	check_no_ram_in_child(a);
	CHECK(vm_start(a) == 0, "start A");
	for (int i = 0; i < 40; i++) {
		uint64_t t0 = now_ns(), dt;

		usleep(2000);
		t0 = now_ns();
		CHECK(vm_pause(a) == 0, "pause A");
		dt = now_ns() - t0;
		total += dt;
		worst = dt > worst ? dt : worst;
		CHECK(vm_resume(a) == 0, "resume A");
	}
	printf("vm_pause: mean %.1f us, max %.1f us over 40 pauses (2 vCPUs)\n", total / 40 / 1e3,
	       worst / 1e3);
	usleep(30000);
	CHECK(vm_pause(a) == 0, "pause A for the switch-over");
	len = vm_state_size(a);
	CHECK(len > (ssize_t)sizeof(struct vm_state_header), "state size %zd", len);
	blob = malloc((size_t)len);
	CHECK(vm_state_save(a, blob, (size_t)len) == len, "state save");
	image = malloc(MEM);
	memcpy(image, ram_host(vm_ram(a)), MEM);
	CHECK(vm_resume(a) == 0, "resume A after the switch-over");

	/* 3. the blob */
	b = new_vm(ops, NULL);
	check_blob(b, blob, (size_t)len);

	/* 4. B: lazy RAM, asynchronous source, background push */
	as.image = image;
	server.ram = pusher.ram = vm_ram(b);
	CHECK(vm_state_load(b, blob, (size_t)len, NULL, 0) == 0, "state load into B");
	CHECK(ram_start_faults(vm_ram(b), &as.src, false) == 0, "fault thread");
	if (pthread_create(&ts, NULL, server_thread, &server)) {
		fprintf(stderr, "FAIL: cannot start the page server thread\n");
		exit(1); /* a test that cannot run, not one that ran */
	}
	CHECK(vm_start(b) == 0, "start B");
	if (pthread_create(&tp, NULL, pusher_thread, &pusher)) {
		fprintf(stderr, "FAIL: cannot start the pusher thread\n");
		exit(1);
	}

	/* 5. both finish with the reference checksum */
	sum_a = finish(a, "A (paused 41 times)");
	sum_b = finish(b, "B (lazy, async source)");
	pthread_join(tp, NULL);
	pthread_mutex_lock(&as.lock);
	as.stop = true;
	pthread_cond_signal(&as.cond);
	pthread_mutex_unlock(&as.lock);
	pthread_join(ts, NULL);
	ram_get_stats(vm_ram(b), &st);
	printf("B (%s): %" PRIu64 " faults, %" PRIu64 " requested, %" PRIu64
	       " served on demand, %" PRIu64 " pushed, %" PRIu64 " already there, %" PRIu64
	       "/%" PRIu64 " present\n",
	       ops->name, st.faults, as.requested, as.served, as.pushed, as.already,
	       ram_nr_present(vm_ram(b)), ram_nr_pages(vm_ram(b)));
	CHECK(server.err == 0 && pusher.err == 0, "install errors %d %d", server.err, pusher.err);
	CHECK(sum_a == ref, "A checksum %#" PRIx64 " != reference %#" PRIx64, sum_a, ref);
	CHECK(sum_b == ref, "B checksum %#" PRIx64 " != reference %#" PRIx64, sum_b, ref);
	CHECK(as.requested > 0, "no page was requested on demand");
	CHECK(ram_nr_present(vm_ram(b)) == ram_nr_pages(vm_ram(b)), "not every page present");
	CHECK(as.served + as.pushed == ram_nr_pages(vm_ram(b)),
	      "pages installed %" PRIu64 " + %" PRIu64 " != %" PRIu64 " (some twice or never)",
	      as.served, as.pushed, ram_nr_pages(vm_ram(b)));
	CHECK(st.installed + st.zeroed == ram_nr_pages(vm_ram(b)),
	      "RAM counted %" PRIu64 " installs", st.installed + st.zeroed);

	vm_destroy(a);
	vm_destroy(b);

	/*
	 * 6. a source that stops answering: the vCPUs wait on missing pages,
	 * and vm_destroy still returns (on 6.1 only by disarming lazy RAM).
	 */
	{
		struct async_source dead = { .src.request = async_request };
		struct vm *c = new_vm(ops, NULL);
		uint64_t t0;

		pthread_mutex_init(&dead.lock, NULL);
		pthread_cond_init(&dead.cond, NULL);
		CHECK(vm_state_load(c, blob, (size_t)len, NULL, 0) == 0, "state load into C");
		CHECK(ram_start_faults(vm_ram(c), &dead.src, false) == 0, "fault thread C");
		CHECK(vm_start(c) == 0, "start C");
		CHECK(wait_nonzero(&dead.lock, &dead.requested) == 0, "C asked for no page");
		CHECK(vm_wait(c, 0, NULL) == 0, "C ran without its pages");
		CHECK(!vm_is_stopped(c), "C stopped without its pages");
		t0 = now_ns();
		vm_destroy(c);
		printf("C (source never answers): %" PRIu64
		       " pages requested, destroyed in %.1f ms\n",
		       dead.requested, (now_ns() - t0) / 1e6);
		CHECK(now_ns() - t0 < HANG_GUARD_MS * 1000000ULL, "vm_destroy hung");
	}
	free(blob);
	free(image);
	if (failures)
		return 1;
	printf("vmm-api-test: all checks passed\n");
	return 0;
}
