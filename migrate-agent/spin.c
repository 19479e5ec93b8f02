// SPDX-License-Identifier: GPL-2.0
/* The spin policy of the fault path's receivers (spin.h). */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "migrate/net.h"
#include "spin.h"

int mig_spin_init(struct mig_spin *sp, unsigned us, bool wakeable)
{
	*sp = (struct mig_spin){ .us = us < MIG_SPIN_MAX_US ? us : MIG_SPIN_MAX_US, .wake_fd = -1 };
	if (wakeable && sp->us) {
		sp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (sp->wake_fd < 0)
			return -errno;
	}
	return 0;
}

void mig_spin_destroy(struct mig_spin *sp)
{
	if (sp->wake_fd >= 0)
		close(sp->wake_fd);
	sp->wake_fd = -1;
}

void mig_spin_request(struct mig_spin *sp)
{
	if (!sp->us)
		return;
	__atomic_fetch_add(&sp->outstanding, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sp->last_request_ns, mig_now_ns(), __ATOMIC_SEQ_CST);
	/* Pairs with mig_spin_block(): it sets sleeping, then looks at the request. */
	if (sp->wake_fd >= 0 && __atomic_exchange_n(&sp->sleeping, 0, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		ssize_t w = write(sp->wake_fd, &one, sizeof(one));
		(void)w; /* a full counter already wakes the receiver */
	}
}

void mig_spin_answered(struct mig_spin *sp)
{
	if (!sp->us)
		return;
	int n = __atomic_load_n(&sp->outstanding, __ATOMIC_RELAXED);
	while (n > 0 && !__atomic_compare_exchange_n(&sp->outstanding, &n, n - 1, 0,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	__atomic_store_n(&sp->last_answer_ns, mig_now_ns(), __ATOMIC_RELAXED);
}

bool mig_spin_wanted(struct mig_spin *sp, uint64_t now)
{
	uint64_t window = sp->us * 1000ull;
	uint64_t req = __atomic_load_n(&sp->last_request_ns, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&sp->outstanding, __ATOMIC_SEQ_CST) > 0 && now - req < window)
		return true;
	return now - __atomic_load_n(&sp->last_answer_ns, __ATOMIC_RELAXED) < window;
}

int mig_spin_block(struct mig_spin *sp, int fd)
{
	__atomic_store_n(&sp->sleeping, 1, __ATOMIC_SEQ_CST);
	if (mig_spin_wanted(sp, mig_now_ns())) {
		__atomic_store_n(&sp->sleeping, 0, __ATOMIC_RELAXED);
		return 0;
	}
	struct pollfd pfd[2] = { { .fd = fd, .events = POLLIN },
				 { .fd = sp->wake_fd, .events = POLLIN } };
	int n = poll(pfd, sp->wake_fd >= 0 ? 2 : 1, -1);
	int e = errno;
	__atomic_store_n(&sp->sleeping, 0, __ATOMIC_RELAXED);
	if (n < 0)
		return e == EINTR ? 0 : -e;
	if (sp->wake_fd >= 0 && (pfd[1].revents & POLLIN)) {
		uint64_t v;
		ssize_t r = read(sp->wake_fd, &v, sizeof(v));
		(void)r; /* non-blocking: empty is fine */
	}
	return 0;
}
