// SPDX-License-Identifier: GPL-2.0
/*
 * The urgent thread at the source: the destination's frames on the urgent
 * channel.  PAGE_REQUEST is answered on the same channel with each page not
 * sent yet (a hint for the pusher: pre-paging after the fault), RUNNING
 * starts the downtime's end, COMPLETE is believed only against the source's
 * own record of what was sent, ERROR and anything unexpected are fatal.
 */
#include <stdlib.h>
#include <string.h>

#include "source.h"

/*
 * A request for page (sent: the push had claimed it already) into the
 * fault history; for a page served here, its pre-paging window becomes a
 * hint: the pusher walks it next (newest first).
 */
static void add_hint(struct src *s, uint64_t page, int sent)
{
	unsigned k = src_owner(s, page); /* the push thread whose share holds it */
	mig_lock(&s->hint.lock, MIG_RANK_SRC_HINT);
	struct src_window w = src_prepage_fault(&s->hint.pp, page, sent, s->nr_pages);
	if (!sent && w.count) {
		if (s->hint.n[k] == NHINTS) {
			memmove(s->hint.win[k], s->hint.win[k] + 1,
				(NHINTS - 1) * sizeof(s->hint.win[k][0]));
			s->hint.n[k]--;
		}
		s->hint.win[k][s->hint.n[k]++] = w;
	}
	mig_unlock(&s->hint.lock);
}

/*
 * Pages claimed as sent, by the source's one record of it (s->sent).  A
 * COMPLETE is believed only when this is every page: a destination cannot
 * have what was never sent.
 */
uint64_t src_count_sent(struct src *s)
{
	uint64_t n = 0;
	for (uint64_t w = 0; w < (s->nr_pages + 63) / 64; w++)
		n += (uint64_t)__builtin_popcountll(__atomic_load_n(&s->sent[w], __ATOMIC_ACQUIRE));
	return n;
}

/*
 * Answer a PAGE_REQUEST: each page not sent yet goes out now on the urgent
 * channel (buf: room for one frame); one already claimed by the push is on
 * its way, so the push is told to flush instead.  0, or -1 when the link
 * broke (the page is lost in flight: RESUME will tell).
 */
static int serve_request(struct src *s, const uint8_t *p, uint8_t *buf)
{
	uint64_t t_rx = now_ns();
	struct mig_page_request q;
	memcpy(&q, p, sizeof(q));
	for (uint32_t k = 0; k < q.count; k++) {
		uint64_t addr;
		memcpy(&addr, p + sizeof(q) + 8 * k, 8);
		uint64_t i = addr / PAGE_SIZE;
		mig_stamp(s->stamps, i, MIG_STEP_REQ_RX, t_rx);
		s->counts.req_addrs++;
		if (bit_test_and_set(s->sent, i)) {
			s->counts.req_in_flight++;
			__atomic_store_n(&s->flush_now, 1, __ATOMIC_RELEASE);
			add_hint(s, i, 1);
			continue;
		}
		__atomic_fetch_add(&s->counts.sent_count, 1, __ATOMIC_RELAXED);
		size_t n = src_put_page(s, s->links.urg, buf, i, MIG_PAGEF_DEMAND, NULL);
		mig_lock(&s->links.urg->tx_lock, MIG_RANK_CONN_TX);
		mig_stamp(s->stamps, i, MIG_STEP_PAGE_SENT, now_ns());
		int r = mig_conn_write(s->links.urg, buf, n);
		mig_unlock(&s->links.urg->tx_lock);
		if (r) {
			src_set_break(s, 0, "urgent channel: send failed");
			return -1;
		}
		s->counts.pages_demand++;
		add_hint(s, i, 0);
	}
	return 0;
}

/*
 * COMPLETE: believed only when the source's own record says every page was
 * sent.  1 (done) or -1 (a broken or lying destination: fatal).
 */
static int take_complete(struct src *s, const uint8_t *p)
{
	uint64_t unsent = s->nr_pages - src_count_sent(s);
	if (unsent) {
		char err[200];
		snprintf(err, sizeof(err),
			 "destination claimed COMPLETE although %llu of %llu pages were never "
			 "sent: a broken or lying destination",
			 (unsigned long long)unsent, (unsigned long long)s->nr_pages);
		src_set_break(s, 1, err);
		return -1;
	}
	memcpy(&s->heard.complete, p, sizeof(s->heard.complete));
	s->times.t_complete = now_ns();
	if (s->o->ctl) {
		src_ctl_put(&s->o->ctl->faults, s->heard.complete.faults);
		src_ctl_put(&s->o->ctl->fault_lat_p50_ns, s->heard.complete.fault_lat_p50_ns);
		src_ctl_put(&s->o->ctl->fault_lat_p99_ns, s->heard.complete.fault_lat_p99_ns);
	}
	mig_lock(&s->lock, MIG_RANK_SRC);
	s->complete = 1;
	pthread_cond_broadcast(&s->cond);
	mig_unlock(&s->lock);
	mig_links_kick_bulk(&s->links);
	return 1;
}

/* One checked frame from the destination: 0 to go on, 1 when the urgent thread is done. */
int src_urgent_frame(struct src *s, const struct mig_frame_hdr *h, const uint8_t *p, uint8_t *buf)
{
	char err[300];
	switch (h->type) {
	case MIG_MSG_PAGE_REQUEST:
		return serve_request(s, p, buf) ? 1 : 0;
	case MIG_MSG_RUNNING:
		/* Repeated after a recovery: the first one counts. */
		if (!s->heard.running_seen) {
			memcpy(&s->heard.running, p, sizeof(s->heard.running));
			s->times.t_running = now_ns();
			mig_lock(&s->lock, MIG_RANK_SRC);
			__atomic_store_n(&s->heard.running_seen, 1, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&s->cond);
			mig_unlock(&s->lock);
			src_publish(s);
		}
		return 0;
	case MIG_MSG_LAYOUT:
		return 0; /* the acknowledgement of a LAYOUT sent again by src_recover_link() */
	case MIG_MSG_COMPLETE:
		take_complete(s, p);
		return 1;
	case MIG_MSG_ERROR: {
		mig_peer_error(err, sizeof(err), p, "destination reported an error");
		src_set_break(s, 1, err);
		return 1;
	}
	}
	snprintf(err, sizeof(err), "urgent channel: unexpected %s from destination",
		 mig_msg_name(h->type));
	src_set_break(s, 1, err);
	return 1;
}

/* The urgent thread: the destination's frames until COMPLETE, a fatal frame or a break. */
void *src_urgent_thread(void *arg)
{
	struct src *s = arg;
	uint8_t *buf = malloc(MIG_PAGE_FRAME_MAX);
	char err[300];
	mig_thread_urgent();
	while (buf && !src_stopped(s)) {
		struct mig_frame_hdr h;
		const uint8_t *p;
		int r = mig_conn_recv(s->links.urg, &h, &p, err, sizeof(err));
		if (r) {
			src_set_break(s, !mig_link_error(r), err);
			break;
		}
		if (src_urgent_frame(s, &h, p, buf))
			break;
	}
	if (!buf)
		src_set_break(s, 1, "urgent channel: out of memory");
	free(buf);
	return NULL;
}
