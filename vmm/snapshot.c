// SPDX-License-Identifier: GPL-2.0
/* Snapshot files: a state blob plus the RAM image (vmm/snapshot.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/memfault.h"
#include "vmm/snapshot.h"
#include "vmm/util.h"
#include "vmm/vm.h"

/* Header, blob and RAM into fd (a new, empty file): 0 or -errno. */
static int write_file(int fd, struct snapshot_header *h, const void *blob, struct ram *ram)
{
	int r = pwrite_full(fd, h, sizeof(*h), 0);

	if (!r)
		r = pwrite_full(fd, blob, h->state_size, h->state_offset);
	/* Zero pages stay holes: a fresh guest's RAM is mostly zero. */
	for (uint64_t off = 0; !r && off < ram_bytes(ram); off += PAGE_SIZE) {
		uint64_t end = off;

		while (end < ram_bytes(ram) && !page_is_zero(ram_host(ram) + end) &&
		       end - off < (1 << 20))
			end += PAGE_SIZE;
		if (end > off) {
			r = pwrite_full(fd, ram_host(ram) + off, end - off, h->ram_offset + off);
			off = end - PAGE_SIZE;
		}
	}
	if (!r && ftruncate(fd, (off_t)(h->ram_offset + h->ram_size)) < 0)
		r = -errno;
	return r;
}

/*
 * The file is written beside path under a name of its own and renamed over
 * path once whole: a save that fails part-way (a full disk) leaves path as
 * it was, even when it is the snapshot being restored, and nothing beside
 * it.  A symbolic link at path is followed (its target is replaced, with
 * its mode); anything there but a regular file is refused (-EINVAL).
 */
static int write_replacing(const char *path, struct snapshot_header *h, const void *blob,
			   struct ram *ram)
{
	char *real = realpath(path, NULL), *tmp;
	const char *dst = real ? real : path;
	struct stat st;
	int fd, r = 0, keep_mode = 0;

	if (real && !stat(real, &st)) {
		if (!S_ISREG(st.st_mode))
			r = -EINVAL;
		keep_mode = 1;
	}
	tmp = r ? NULL : malloc(strlen(dst) + 32);
	if (!r && !tmp)
		r = -ENOMEM;
	if (r) {
		free(real);
		return r;
	}
	snprintf(tmp, strlen(dst) + 32, "%s.%ld.partial", dst, (long)getpid());
	/* A new file's mode as before (0644 less the umask); a replaced one keeps its own. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, keep_mode ? 0600 : 0644);
	if (fd < 0) {
		r = -errno;
	} else {
		r = write_file(fd, h, blob, ram);
		if (!r && keep_mode && fchmod(fd, st.st_mode & 07777) < 0)
			r = -errno;
		/* On disk before the name moves: a crash then leaves one whole file. */
		if (!r && fsync(fd) < 0)
			r = -errno;
		if (close(fd) < 0 && !r)
			r = -errno;
		if (!r && rename(tmp, dst) < 0)
			r = -errno;
		if (r)
			unlink(tmp);
	}
	free(tmp);
	free(real);
	return r;
}

int snapshot_write(struct vm *vm, const char *path)
{
	struct snapshot_header h = { .magic = SNAPSHOT_MAGIC,
				     .version = SNAPSHOT_VERSION,
				     .header_size = sizeof(h) };
	struct ram *ram = vm_ram(vm);
	ssize_t size = vm_state_size(vm);
	void *blob;
	int r;

	if (size < 0)
		return (int)size;
	/* Every page is read below: the missing ones come first (kvm-exit; else a no-op). */
	r = vm_ram_ensure(vm, 0, ram_bytes(ram));
	if (r < 0)
		return r;
	blob = malloc((size_t)size);
	if (!blob)
		return -ENOMEM;
	size = vm_state_save(vm, blob, (size_t)size);
	if (size < 0) {
		free(blob);
		return (int)size;
	}
	h.state_offset = sizeof(h);
	h.state_size = (uint64_t)size;
	h.ram_offset = ALIGN_UP(h.state_offset + h.state_size, PAGE_SIZE);
	h.ram_size = ram_bytes(ram);
	r = write_replacing(path, &h, blob, ram);
	free(blob);
	return r;
}

int snapshot_read(int fd, struct snapshot_header *h, void **state)
{
	struct stat st;
	void *blob = NULL;
	int r;

	r = fstat(fd, &st) < 0 ? -errno : 0;
	if (!r)
		r = pread_full(fd, h, sizeof(*h), 0);
	if (r == -EIO)
		r = -EBADMSG;
	if (r)
		goto out;
	r = -EBADMSG;
	if (h->magic != SNAPSHOT_MAGIC || h->version != SNAPSHOT_VERSION ||
	    h->header_size != sizeof(*h) || h->state_offset != sizeof(*h) ||
	    h->state_size > (16 << 20) || h->ram_offset % PAGE_SIZE ||
	    h->ram_offset < h->state_offset + h->state_size ||
	    h->ram_offset > (uint64_t)st.st_size || /* no sum: it could wrap past 2^64 */
	    h->ram_size != (uint64_t)st.st_size - h->ram_offset)
		goto out;
	blob = malloc(h->state_size ? h->state_size : 1);
	if (!blob) {
		r = -ENOMEM;
		goto out;
	}
	r = pread_full(fd, blob, h->state_size, h->state_offset);
	if (!r)
		r = vm_state_peek(blob, h->state_size, NULL, NULL);
	if (r == -EIO)
		r = -EBADMSG;
	if (!r) {
		uint64_t mem;

		vm_state_peek(blob, h->state_size, &mem, NULL);
		if (mem != h->ram_size)
			r = -EBADMSG;
	}
out:
	if (r) {
		free(blob);
		return r;
	}
	*state = blob;
	return 0;
}
