// SPDX-License-Identifier: GPL-2.0
/*
 * The demand path at the destination, as the RAM's fault thread runs it:
 * the page source it is given (mig_dest_page_source()).  A fault the RAM
 * moved to REQUESTED goes out as PAGE_REQUEST; a STAGED one is installed
 * from the staging buffer; the
 * replies on the urgent channel are read and installed by the same thread,
 * which polls the channel beside the userfaultfd.  So a demand fault is
 * one thread's work from the fault message to the install: no receiver
 * thread to wake, no hand-over.  With a RAM back end whose threads serve
 * their own faults (kvm-exit), request() and staged() run on the faulting
 * vCPU thread instead, several at once: the sends are serialized by
 * req_lock (one request in flight per vCPU), and the replies are still
 * read and installed here, which wakes the vCPU through the page record.
 *
 * The urgent channel is the fault thread's while attached (d->loop.conn,
 * under d->loop.lock): from the resume until the link breaks or the
 * migration ends, and again on each recovered link.  Whoever frees the
 * channel detaches it first; a receive blocked inside a frame ends when
 * the link is kicked (dest_kick_links()), so the detach waits microseconds.
 */
#include <errno.h>
#include <stdlib.h>

#include "dest.h"

/* Ask the source for page i, which the fault moved to REQUESTED at fault_ns. */
static void request_page(struct mig_dest *d, uint64_t i, uint64_t fault_ns)
{
	mig_stamp(d->stamps, i, MIG_STEP_FAULT, fault_ns);
	struct mig_page_request q = { .count = 1 };
	uint64_t addr = i * PAGE_SIZE;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	mig_stamp(d->stamps, i, MIG_STEP_REQ_SENT, now_ns());
	if (d->link_ok &&
	    mig_conn_send(d->links.urg, MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8) == 0)
		d->counts.req_sent++;
	mig_unlock(&d->req_lock);
}

/*
 * A vCPU touched page i, which the fault moved to REQUESTED: a fault, with
 * its latency to come (counted when the page is installed, however it
 * comes).  The request goes out unless the page arrived meanwhile.
 */
static int fault_requested(struct mig_dest *d, uint64_t i)
{
	uint64_t w = ram_page_word(d->ram, i);
	__atomic_fetch_add(&d->counts.faults, 1, __ATOMIC_RELAXED);
	if (ram_word_state(w) == RAM_PAGE_REQUESTED)
		request_page(d, i, ram_word_time_ns(d->ram, w));
	return 0;
}

void dest_loop_attach(struct mig_dest *d, struct mig_conn *urg)
{
	mig_lock(&d->loop.lock, MIG_RANK_DEST_LOOP);
	d->loop.conn = urg;
	mig_unlock(&d->loop.lock);
	ram_kick_faults(d->ram); /* to poll it from now */
}

void dest_loop_detach(struct mig_dest *d)
{
	if (!d->ram)
		return;
	mig_lock(&d->loop.lock, MIG_RANK_DEST_LOOP);
	d->loop.conn = NULL;
	mig_unlock(&d->loop.lock);
	ram_kick_faults(d->ram); /* to poll its descriptor no more */
}

struct dest_source {
	struct ram_source src;
	struct mig_dest *d;
	int urgent; /* the fault thread took the urgent channel's priority */
};

static int source_request(struct ram_source *src, struct ram *ram, uint64_t pg)
{
	struct mig_dest *d = ((struct dest_source *)src)->d;
	return pg < ram_nr_pages(d->ram) ? fault_requested(d, pg) : -ERANGE;
}

static int source_staged(struct ram_source *src, struct ram *ram, uint64_t pg)
{
	struct mig_dest *d = ((struct dest_source *)src)->d;
	return pg < ram_nr_pages(d->ram) ? dest_install_staged(d, pg) : -ERANGE;
}

static int source_reply_fd(struct ram_source *src)
{
	struct dest_source *s = (struct dest_source *)src;
	struct mig_dest *d = s->d;
	int fd = -1;
	mig_lock(&d->loop.lock, MIG_RANK_DEST_LOOP);
	if (d->loop.conn && dest_phase(d) != DEST_FAILED && !dest_stopping(d))
		fd = d->loop.conn->fd;
	mig_unlock(&d->loop.lock);
	if (fd >= 0 && !s->urgent) {
		mig_thread_urgent(); /* it does what the urgent receiver did */
		s->urgent = 1;
	}
	return fd;
}

/* Never an error for the RAM: the migration's failures are the migration's. */
static int source_replies(struct ram_source *src, struct ram *ram)
{
	struct mig_dest *d = ((struct dest_source *)src)->d;
	mig_lock(&d->loop.lock, MIG_RANK_DEST_LOOP);
	if (d->loop.conn && dest_rx_ready(d, d->loop.conn, &d->loop.run))
		d->loop.conn = NULL; /* broken, failed or done: not read again */
	mig_unlock(&d->loop.lock);
	return 0;
}

static void source_destroy(struct ram_source *src)
{
	free(src);
}

struct ram_source *mig_dest_page_source(struct mig_dest *d)
{
	struct dest_source *s = malloc(sizeof(*s));
	if (s)
		*s = (struct dest_source){
			.src = { .request = source_request,
				 .staged = source_staged,
				 .reply_fd = source_reply_fd,
				 .replies = source_replies,
				 .destroy = source_destroy },
			.d = d,
		};
	return s ? &s->src : NULL;
}
