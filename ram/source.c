// SPDX-License-Identifier: GPL-2.0
/*
 * Synchronous page sources for lazy RAM: a file (e.g. the RAM part of a
 * snapshot written by `vmm run --save-after`) or a buffer (the staging
 * copy of a fresh boot image).  request() runs on the fault thread, or,
 * with a back end whose threads serve their own faults (kvm-exit), on
 * several vCPU threads at once: one bounce page per source, under its
 * lock.  All-zero pages are installed as zero pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/file-io.h"
#include "internal.h"

struct simple_source {
	struct ram_source src;
	int fd;
	uint64_t offset, size;
	const uint8_t *buf;
	uint8_t *page; /* private anonymous bounce page, under lock */
	pthread_mutex_t lock;
};

static int install_bounce(struct simple_source *s, struct ram *ram, uint64_t pg)
{
	int r = page_is_zero(s->page) ? ram_install_zero(ram, pg) : ram_install(ram, pg, s->page);

	return r < 0 ? r : 0;
}

static int file_request(struct ram_source *src, struct ram *ram, uint64_t pg)
{
	struct simple_source *s = container_of(src, struct simple_source, src);
	uint64_t off = pg << PAGE_SHIFT;
	int r;

	if (off + PAGE_SIZE > s->size)
		return ram_install_zero(ram, pg) < 0 ? -EIO : 0;
	pthread_mutex_lock(&s->lock);
	r = pread_full(s->fd, s->page, PAGE_SIZE, s->offset + off);
	if (r == 0)
		r = install_bounce(s, ram, pg);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int buffer_request(struct ram_source *src, struct ram *ram, uint64_t pg)
{
	struct simple_source *s = container_of(src, struct simple_source, src);
	uint64_t off = pg << PAGE_SHIFT;
	int r;

	if (off + PAGE_SIZE > s->size)
		return ram_install_zero(ram, pg) < 0 ? -EIO : 0;
	pthread_mutex_lock(&s->lock);
	memcpy(s->page, s->buf + off, PAGE_SIZE);
	r = install_bounce(s, ram, pg);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static void simple_destroy(struct ram_source *src)
{
	struct simple_source *s = container_of(src, struct simple_source, src);

	if (s->fd >= 0)
		close(s->fd);
	munmap(s->page, PAGE_SIZE);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static struct simple_source *simple_new(void)
{
	struct simple_source *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	s->page = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->page == MAP_FAILED) {
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	s->src.destroy = simple_destroy;
	return s;
}

int ram_source_file_create(int fd, uint64_t offset, uint64_t size, struct ram_source **out)
{
	struct simple_source *s = simple_new();

	if (!s)
		return -ENOMEM;
	s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (s->fd < 0) {
		int r = -errno;

		simple_destroy(&s->src);
		return r;
	}
	s->offset = offset;
	s->size = size;
	s->src.request = file_request;
	*out = &s->src;
	return 0;
}

int ram_source_buffer_create(const void *buf, uint64_t size, struct ram_source **out)
{
	struct simple_source *s = simple_new();

	if (!s)
		return -ENOMEM;
	s->buf = buf;
	s->size = size;
	s->src.request = buffer_request;
	*out = &s->src;
	return 0;
}
