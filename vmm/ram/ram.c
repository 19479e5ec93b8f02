// SPDX-License-Identifier: GPL-2.0
/*
 * ram: guest RAM, the present/requested bitmaps, the fault thread and the
 * back-end choice.  The back ends themselves live one per file beside this.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmm/ram.h"
#include "vmm/util.h"

/*
 * The order "auto" tries.  uffd (UFFDIO_COPY) before uffd-move: measured
 * here (bench-backends), a copy plus reusing one bounce page costs less per
 * delivered page than a move that must allocate a fresh page each time, and
 * the fault round trip is no faster with MOVE (docs/vmm.md).
 */
static const struct ram_backend_ops *const backends[] = {
	&ram_backend_userfault,
	&ram_backend_uffd,
	&ram_backend_uffd_move,
};

int ram_backend_find(const char *name, const struct ram_backend_ops **out)
{
	bool any = !strcmp(name, "auto");
	int last = -EOPNOTSUPP;

	for (size_t i = 0; i < ARRAY_SIZE(backends); i++) {
		int r;

		if (!any && strcmp(name, backends[i]->name))
			continue;
		r = backends[i]->probe();
		if (r == 0) {
			*out = backends[i];
			return 0;
		}
		if (!any)
			return r;
		last = r;
	}
	return any ? last : -EINVAL;
}

static bool test_and_set(_Atomic uint64_t *map, uint64_t pg)
{
	uint64_t bit = 1ULL << (pg % 64);

	return atomic_fetch_or(&map[pg / 64], bit) & bit;
}

static void mark_present(struct ram *ram, uint64_t off, uint64_t len)
{
	for (uint64_t pg = off >> PAGE_SHIFT; pg < (off + len) >> PAGE_SHIFT; pg++)
		if (!test_and_set(ram->present, pg))
			atomic_fetch_add(&ram->nr_present, 1);
}

int ram_init(struct ram *ram, uint64_t size, const struct ram_backend_ops *ops)
{
	uint64_t words;
	int r;

	memset(ram, 0, sizeof(*ram));
	ram->fd = ram->stop_fd = -1;
	ram->size = size;
	ram->nr_pages = size >> PAGE_SHIFT;
	words = (ram->nr_pages + 63) / 64;
	ram->present = calloc(words, sizeof(uint64_t));
	ram->requested = calloc(words, sizeof(uint64_t));
	if (!ram->present || !ram->requested) {
		r = -ENOMEM;
		goto fail;
	}
	ram->host = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (ram->host == MAP_FAILED) {
		ram->host = NULL;
		r = -ENOMEM;
		goto fail;
	}
	if (!ops) {
		/* Plain RAM: huge pages make the first touch cheaper. */
		madvise(ram->host, size, MADV_HUGEPAGE);
		for (uint64_t i = 0; i < words; i++)
			ram->present[i] = ~0ULL;
		ram->nr_present = ram->nr_pages;
		return 0;
	}
	/* Lazy RAM is installed page by page: keep it 4 KiB. */
	madvise(ram->host, size, MADV_NOHUGEPAGE);
	ram->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ram->stop_fd < 0) {
		r = -errno;
		goto fail;
	}
	ram->ops = ops;
	r = ops->arm(ram);
	if (r < 0) {
		ram->ops = NULL;
		goto fail;
	}
	return 0;
fail:
	ram_exit(ram);
	return r;
}

void ram_disarm(struct ram *ram)
{
	if (ram->ops)
		ram->ops->disarm(ram);
	ram->ops = NULL;
}

void ram_exit(struct ram *ram)
{
	ram_stop_faults(ram);
	ram_disarm(ram);
	if (ram->source && ram->source->destroy)
		ram->source->destroy(ram->source);
	ram->source = NULL;
	if (ram->host)
		munmap(ram->host, ram->size);
	ram->host = NULL;
	if (ram->stop_fd >= 0)
		close(ram->stop_fd);
	ram->stop_fd = -1;
	free(ram->present);
	free(ram->requested);
	ram->present = ram->requested = NULL;
}

static int retry(int (*op)(struct ram *, uint64_t, void *), struct ram *ram, uint64_t off,
		 void *arg)
{
	for (;;) {
		int r = op(ram, off, arg);

		if (r != -EAGAIN)
			return r;
		sched_yield();
	}
}

static int do_install(struct ram *ram, uint64_t off, void *page)
{
	return ram->ops->install(ram, off, page);
}

static int do_zero(struct ram *ram, uint64_t off, void *unused)
{
	return ram->ops->zero(ram, off, PAGE_SIZE);
}

static int finish(struct ram *ram, uint64_t off, int r)
{
	if (r == 0) {
		mark_present(ram, off, PAGE_SIZE);
		return 0;
	}
	if (r != -EEXIST)
		return r;
	/* Someone else put it there; a faulting thread may still sleep. */
	atomic_fetch_add(&ram->st.eexist, 1);
	mark_present(ram, off, PAGE_SIZE);
	r = ram->ops->wake(ram, off, PAGE_SIZE);
	return r < 0 ? r : 1;
}

int ram_install(struct ram *ram, uint64_t off, void *page)
{
	int r;

	if (off >= ram->size || off % PAGE_SIZE)
		return -EINVAL;
	if (ram_present(ram, off) || !ram->ops)
		return 1;
	r = finish(ram, off, retry(do_install, ram, off, page));
	if (r == 0)
		atomic_fetch_add(&ram->st.installed, 1);
	return r;
}

int ram_install_run(struct ram *ram, uint64_t off, void *pages, uint64_t n)
{
	uint64_t len = n * PAGE_SIZE, i;
	int r, existed = 0;

	if (off % PAGE_SIZE || off >= ram->size || len > ram->size - off)
		return -EINVAL;
	if (!ram->ops)
		return (int)n;
	for (i = 0; i < n && !ram_present(ram, off + i * PAGE_SIZE); i++)
		;
	if ((pages ? !ram->ops->install_run : !ram->ops->zero_run) || i < n || n == 1) {
		for (i = 0; i < n; i++) {
			uint64_t o = off + i * PAGE_SIZE;

			r = pages ? ram_install(ram, o, (char *)pages + i * PAGE_SIZE)
				  : ram_install_zero(ram, o);
			if (r < 0)
				return r;
			existed += r;
		}
		return existed;
	}
	r = pages ? ram->ops->install_run(ram, off, pages, len) : ram->ops->zero_run(ram, off, len);
	if (r < 0)
		return r;
	mark_present(ram, off, len);
	atomic_fetch_add(pages ? &ram->st.installed : &ram->st.zeroed, n - (uint64_t)r);
	atomic_fetch_add(&ram->st.eexist, (uint64_t)r);
	return r;
}

int ram_install_zero(struct ram *ram, uint64_t off)
{
	int r;

	if (off >= ram->size || off % PAGE_SIZE)
		return -EINVAL;
	if (ram_present(ram, off) || !ram->ops)
		return 1;
	r = finish(ram, off, retry(do_zero, ram, off, NULL));
	if (r == 0)
		atomic_fetch_add(&ram->st.zeroed, 1);
	return r;
}

void ram_get_stats(struct ram *ram, struct ram_stats *st)
{
	st->faults = atomic_load(&ram->st.faults);
	st->requests = atomic_load(&ram->st.requests);
	st->dup_faults = atomic_load(&ram->st.dup_faults);
	st->late_faults = atomic_load(&ram->st.late_faults);
	st->installed = atomic_load(&ram->st.installed);
	st->zeroed = atomic_load(&ram->st.zeroed);
	st->eexist = atomic_load(&ram->st.eexist);
}

static int serve(struct ram *ram, uint64_t off)
{
	uint64_t pg = off >> PAGE_SHIFT;

	atomic_fetch_add(&ram->st.faults, 1);
	if (ram_present(ram, off)) {
		atomic_fetch_add(&ram->st.late_faults, 1);
		return ram->ops->wake(ram, off, PAGE_SIZE);
	}
	if (test_and_set(ram->requested, pg)) {
		atomic_fetch_add(&ram->st.dup_faults, 1);
		return 0;
	}
	atomic_fetch_add(&ram->st.requests, 1);
	return ram->source->request(ram->source, ram, off);
}

/*
 * The fault loop.  Ordering hazards it handles:
 *  - a fault message for a page installed meanwhile (background push, or
 *    a second vCPU's fault already served): the page is present, so only
 *    wake its range; waking a range with no waiter is harmless;
 *  - several vCPUs faulting on one page: one request (the requested bit),
 *    every waiter is woken by the single install;
 *  - an install racing with ours: EEXIST, handled in ram_install as
 *    success plus a wake.
 * Deliberately ignored: a source that never installs a pending page (the
 *   vCPU waits; the migration agent owns timeouts and recovery).
 */
static void *fault_thread(void *arg)
{
	struct ram *ram = arg;
	struct pollfd pfd[2] = {
		{ .fd = ram->ops->fault_fd(ram), .events = POLLIN },
		{ .fd = ram->stop_fd, .events = POLLIN },
	};
	uint64_t offs[64];
	int r = 0;

	while (!atomic_load_explicit(&ram->stop, memory_order_relaxed)) {
		int n = ram->ops->read_faults(ram, offs, (int)ARRAY_SIZE(offs));

		if (n == 0 || n == -EAGAIN) {
			if (ram->busy_poll)
				continue;
			if (poll(pfd, 2, -1) < 0 && errno != EINTR) {
				r = -errno;
				break;
			}
			continue;
		}
		if (n < 0) {
			r = n;
			break;
		}
		for (int i = 0; i < n && r >= 0; i++)
			r = serve(ram, offs[i]);
		if (r < 0)
			break;
	}
	if (r < 0) {
		atomic_store(&ram->error, r);
		if (ram->on_error)
			ram->on_error(ram->on_error_arg, r);
	}
	return NULL;
}

int ram_start_faults(struct ram *ram, struct ram_source *src, bool busy_poll)
{
	int r;

	if (!ram->ops || ram->thread_started)
		return -EINVAL;
	ram->source = src;
	ram->busy_poll = busy_poll;
	atomic_store(&ram->stop, false);
	r = pthread_create(&ram->thread, NULL, fault_thread, ram);
	if (r)
		return -r;
	ram->thread_started = true;
	return 0;
}

void ram_stop_faults(struct ram *ram)
{
	uint64_t one = 1;

	if (!ram->thread_started)
		return;
	atomic_store(&ram->stop, true);
	if (write(ram->stop_fd, &one, sizeof(one)) < 0) {
		/* cannot fail for an eventfd with one pending write */
	}
	pthread_join(ram->thread, NULL);
	ram->thread_started = false;
}
