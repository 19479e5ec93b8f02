// SPDX-License-Identifier: GPL-2.0
/*
 * ram: guest RAM's life cycle and the back-end choice.  The page record
 * is record.c, the fault loop fault.c, the back ends one per file beside.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/*
 * The order "auto" tries.  uffd (UFFDIO_COPY) before uffd-move: measured
 * here (bench-backends), a copy plus reusing one bounce page costs less per
 * delivered page than a move that must allocate a fresh page each time, and
 * the fault round trip is no faster with MOVE (docs/vmm.md).
 */
static const struct ram_backend_ops *const backends[] = {
	&ram_backend_userfault, &ram_backend_uffd, &ram_backend_uffd_move,
	&ram_backend_kvm_exit, /* by name only: auto skips own-thread faults */
};

int ram_backend_find(const char *name, const struct ram_backend_ops **out)
{
	bool any = !strcmp(name, "auto");
	int last = -EOPNOTSUPP;

	for (size_t i = 0; i < ARRAY_SIZE(backends); i++) {
		int r;

		if (any ? backends[i]->own_thread_faults : strcmp(name, backends[i]->name) != 0)
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

const struct ram_backend_ops *ram_backend_named(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
		if (!strcmp(name, backends[i]->name))
			return backends[i];
	return NULL;
}

int ram_create(uint64_t size, const struct ram_backend_ops *ops, struct ram **out)
{
	struct ram *ram = calloc(1, sizeof(*ram));
	int r;

	if (!ram)
		return -ENOMEM;
	pthread_mutex_init(&ram->zero.lock, NULL);
	ram->fd = ram->kick_fd = -1;
	ram->size = size;
	ram->nr_pages = size >> PAGE_SHIFT;
	ram->host = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (ram->host == MAP_FAILED) {
		ram->host = NULL;
		r = -ENOMEM;
		goto fail;
	}
	/*
	 * Not in a child of fork(), as QEMU does with guest RAM: a fork makes
	 * private memory copy-on-write under the running vCPUs.  In the nested
	 * nodes that corrupts the guest (a triple fault within some thousand
	 * forks, docs/vmm.md), and no child of a VMM has a use for guest RAM.
	 */
	if (madvise(ram->host, size, MADV_DONTFORK) < 0) {
		r = -errno;
		goto fail;
	}
	if (!ops) {
		/* Plain RAM: huge pages make the first touch cheaper. */
		madvise(ram->host, size, MADV_HUGEPAGE);
		ram->nr_present = ram->nr_pages;
		*out = ram;
		return 0;
	}
	/* Zeroed: every page MISSING.  Pages of it are allocated as they are touched. */
	ram->pages = calloc(ram->nr_pages, sizeof(*ram->pages));
	if (!ram->pages) {
		r = -ENOMEM;
		goto fail;
	}
	ram->t0 = now_ns() - 1; /* a stamped time is never 0 */
	/* Lazy RAM is installed page by page: keep it 4 KiB. */
	madvise(ram->host, size, MADV_NOHUGEPAGE);
	ram->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ram->kick_fd < 0) {
		r = -errno;
		goto fail;
	}
	ram->ops = ops;
	r = ops->arm(ram);
	if (r < 0) {
		ram->ops = NULL;
		goto fail;
	}
	*out = ram;
	return 0;
fail:
	ram_destroy(ram);
	return r;
}

void ram_set_on_error(struct ram *ram, void (*fn)(void *arg, int err), void *arg)
{
	ram->on_error = fn;
	ram->on_error_arg = arg;
}

void ram_disarm(struct ram *ram)
{
	ram_cancel_waits(ram); /* a thread waiting on its own fault returns */
	if (ram->ops)
		ram->ops->disarm(ram);
	ram->ops = NULL;
}

int ram_reset(struct ram *ram)
{
	uint64_t kicks;

	if (!ram->ops)
		return -EINVAL;
	if (ram->thread_started || ram->source)
		return -EBUSY;
	/* No other thread touches the record now: as ram_create()'s calloc. */
	memset((void *)ram->pages, 0, ram->nr_pages * sizeof(*ram->pages));
	atomic_store(&ram->nr_present, 0);
	atomic_store(&ram->nr_requested, 0);
	memset(&ram->st, 0, sizeof(ram->st));
	atomic_store(&ram->error, 0);
	atomic_store(&ram->stop, false);
	atomic_store(&ram->waits.cancelled, false);
	ram_blocktime_free(ram);
	ram->t0 = now_ns() - 1; /* a stamped time is never 0 */
	/* Kicks (ram_kick_faults()) left for a fault thread that never ran. */
	if (read(ram->kick_fd, &kicks, sizeof(kicks)) < 0) {
		/* EAGAIN: there were none */
	}
	return 0;
}

void ram_destroy(struct ram *ram)
{
	if (!ram)
		return;
	ram_stop_faults(ram);
	ram_disarm(ram);
	if (ram->source && ram->source->destroy)
		ram->source->destroy(ram->source);
	if (ram->host)
		munmap(ram->host, ram->size);
	if (ram->kick_fd >= 0)
		close(ram->kick_fd);
	ram_blocktime_free(ram);
	if (ram->zero.src)
		munmap(ram->zero.src, RAM_ZERO_SRC_BYTES);
	pthread_mutex_destroy(&ram->zero.lock);
	free((void *)ram->pages);
	free(ram);
}

uint8_t *ram_host(const struct ram *ram)
{
	return ram->host;
}

uint64_t ram_bytes(const struct ram *ram)
{
	return ram->size;
}

uint64_t ram_nr_pages(const struct ram *ram)
{
	return ram->nr_pages;
}

bool ram_is_lazy(const struct ram *ram)
{
	return ram->ops != NULL;
}

const struct ram_backend_ops *ram_backend(const struct ram *ram)
{
	return ram->ops;
}

bool ram_has_record(const struct ram *ram)
{
	return ram->pages != NULL;
}

bool ram_owns_source(const struct ram *ram, const struct ram_source *src)
{
	return ram->source == src;
}
