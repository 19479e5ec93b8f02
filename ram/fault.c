// SPDX-License-Identifier: GPL-2.0
/*
 * The fault loop: one thread per VM reads missing-page faults from the back
 * end, asks the page source for each page the fault moved to REQUESTED (or
 * that is STAGED) by the page record (record.c), and, for a source whose
 * replies come on a descriptor, takes the replies and installs them too.
 */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "internal.h"

/*
 * One fault message (or, from wait.c, a thread's own fault).  Ordering
 * hazards it handles:
 *  - a fault message for a page installed meanwhile (background push, or
 *    a second vCPU's fault already served): the page is present, so only
 *    wake its range; waking a range with no waiter is harmless;
 *  - several vCPUs faulting on one page: one request (the claim to
 *    REQUESTED), every waiter is woken by the single install;
 *  - a page being installed (INSTALLING): its install wakes the range.
 * Deliberately ignored: a source that never installs a pending page (the
 *   vCPU waits; the migration agent owns timeouts and recovery).
 */
int ram_serve_fault(struct ram *ram, uint64_t off, uint32_t tid)
{
	uint64_t pg = off >> PAGE_SHIFT, w;

	atomic_fetch_add(&ram->st.faults, 1);
	ram_blocktime_begin(ram, pg, tid); /* before the page can come */
	if (ram_claim(ram, pg, RAM_FROM(RAM_PAGE_MISSING), RAM_PAGE_REQUESTED, RAM_BY_NONE, false,
		      &w)) {
		atomic_fetch_add(&ram->st.requests, 1);
		return ram->source->request(ram->source, ram, pg);
	}
	switch (ram_word_state(w)) {
	case RAM_PAGE_PRESENT:
		atomic_fetch_add(&ram->st.late_faults, 1);
		return ram->ops->wake(ram, off, PAGE_SIZE);
	case RAM_PAGE_STAGED:
		return ram->source->staged ? ram->source->staged(ram->source, ram, pg) : -EPROTO;
	default:
		atomic_fetch_add(&ram->st.dup_faults, 1);
		return 0;
	}
}

/*
 * Waits (timeout_ms, -1: until something happens) for faults, a kick or
 * the source's replies, and takes the replies.  0, or a fatal -errno.
 */
static int wait_events(struct ram *ram, int timeout_ms)
{
	struct ram_source *src = ram->source;
	struct pollfd pfd[3] = {
		{ .fd = ram->ops->fault_fd(ram), .events = POLLIN },
		{ .fd = ram->kick_fd, .events = POLLIN },
		{ .fd = src->reply_fd ? src->reply_fd(src) : -1, .events = POLLIN },
	};
	uint64_t kicks;

	if (poll(pfd, 3, timeout_ms) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[1].revents && read(ram->kick_fd, &kicks, sizeof(kicks)) < 0) {
		/* another turn empties it */
	}
	if (pfd[2].revents)
		return src->replies(src, ram);
	return 0;
}

/*
 * The loop: every fault pending is served before the thread waits again;
 * after faults it only looks (timeout 0) for replies before reading more,
 * so a burst of faults does not starve the replies nor the other way.
 */
static void *fault_thread(void *arg)
{
	struct ram *ram = arg;
	uint64_t offs[64];
	uint32_t tids[ARRAY_SIZE(offs)];
	int r = 0;

	while (r >= 0 && !atomic_load_explicit(&ram->stop, memory_order_relaxed)) {
		int n = ram->ops->read_faults(ram, offs, tids, (int)ARRAY_SIZE(offs));

		if (n < 0 && n != -EAGAIN) {
			r = n;
			break;
		}
		for (int i = 0; i < n && r >= 0; i++)
			r = ram_serve_fault(ram, offs[i], tids[i]);
		if (r >= 0)
			r = wait_events(ram, n > 0 || ram->busy_poll ? 0 : -1);
	}
	if (r < 0)
		ram_set_error(ram, r);
	return NULL;
}

/* The fault thread and the threads serving their own faults (wait.c) may both fail. */
void ram_set_error(struct ram *ram, int err)
{
	int none = 0;

	if (atomic_compare_exchange_strong(&ram->error, &none, err) && ram->on_error)
		ram->on_error(ram->on_error_arg, err);
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

int ram_fault_error(const struct ram *ram)
{
	return atomic_load(&ram->error);
}

void ram_kick_faults(struct ram *ram)
{
	uint64_t one = 1;

	if (ram->kick_fd >= 0 && write(ram->kick_fd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread has kicks to read anyway */
	}
}

void ram_stop_faults(struct ram *ram)
{
	if (!ram->thread_started)
		return;
	atomic_store(&ram->stop, true);
	ram_kick_faults(ram);
	pthread_join(ram->thread, NULL);
	ram->thread_started = false;
}

/*
 * Faults served on the faulting thread: the kvm-exit back end reports no
 * fault to the fault thread, so the thread that met the missing page (a
 * vCPU back from KVM_RUN, a VMM thread about to read guest RAM) serves it
 * itself with the fault thread's serve step, then waits (wait.c).
 */
int ram_fault_wait(struct ram *ram, uint64_t pg, uint32_t tid)
{
	int r;

	if (!ram->pages)
		return 0; /* plain RAM: every page is there */
	if (pg >= ram->nr_pages)
		return -EINVAL;
	if (ram_word_state(ram_page_word(ram, pg)) == RAM_PAGE_PRESENT)
		return 0;
	if (atomic_load(&ram->waits.cancelled) || !ram->ops)
		return -ECANCELED;
	if (!ram->source)
		return -ENXIO; /* ram_start_faults() not called: nothing could bring it */
	atomic_fetch_add(&ram->st.own_thread, 1);
	r = ram_serve_fault(ram, pg << PAGE_SHIFT, tid);
	if (r < 0) {
		ram_set_error(ram, r);
		return r;
	}
	return ram_wait_present(ram, pg);
}

int ram_ensure(struct ram *ram, uint64_t pg, uint64_t n, uint32_t tid)
{
	const struct ram_backend_ops *ops = ram->ops;

	if (!ops || !ops->own_thread_faults)
		return 0;
	if (pg > ram->nr_pages || n > ram->nr_pages - pg)
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++) {
		int r = ram_fault_wait(ram, pg + i, tid);

		if (r < 0)
			return r;
	}
	return 0;
}
