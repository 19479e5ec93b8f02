// SPDX-License-Identifier: GPL-2.0
/*
 * Link breaks: the supervisor thread waits (up to recover_ms) for the
 * source to reconnect, sends RESUME with the bitmap of pages this side has
 * and repeats the outstanding requests; a break before STATE asks for the
 * state again (MIG_RESUME_NEED_STATE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dest.h"

/*
 * RESUME on a recovered urgent channel: the bitmap of pages this side has,
 * read from the page record (present, being installed, or staged and still
 * valid).  flags: MIG_RESUME_NEED_STATE when the state never arrived.
 */
static int send_resume(struct mig_dest *d, struct mig_conn *urg, uint32_t flags)
{
	size_t bytes = (d->nr_pages + 7) / 8;
	uint8_t *bm = calloc(1, bytes);
	if (!bm)
		return -ENOMEM;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		enum ram_page_state st = ram_word_state(ram_page_word(d->ram, i));
		if (st == RAM_PAGE_PRESENT || st == RAM_PAGE_STAGED || st == RAM_PAGE_INSTALLING)
			wire_bit_set(bm, i);
	}
	struct mig_resume rs = { .nr_pages = d->nr_pages, .flags = flags };
	int r = mig_conn_send(urg, MIG_MSG_RESUME, &rs, sizeof(rs), bm, bytes);
	free(bm);
	return r;
}

/* Stop the receivers and retire the broken connections. */
static void retire_links(struct mig_dest *d)
{
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	d->link_ok = 0;
	mig_unlock(&d->req_lock);
	dest_kick_links(d);
	dest_loop_detach(d);
	dest_join_receivers(d);
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	dest_links_free(d);
	mig_unlock(&d->req_lock);
}

/*
 * Wait until deadline for a reconnection that takes RESUME (flags as for
 * send_resume()); a reconnection that fails before RESUME went out is
 * dropped and the wait goes on.  0 with the channels in *l, or
 * -ETIMEDOUT.
 */
static int reconnect(struct mig_dest *d, uint64_t deadline, uint32_t flags, struct mig_links *l)
{
	char err[320];
	for (;;) {
		if (dest_accept_pair(d, deadline, l, err, sizeof(err)))
			return -ETIMEDOUT;
		int r = send_resume(d, l->urg, flags);
		if (!r)
			return 0;
		pr_mig("the reconnected source went away before RESUME (%s); waiting on\n",
		       strerror(-r));
		dest_free_conn(l->urg);
		dest_free_conns(l->bulk, MIG_MAX_CHANNELS);
	}
}

/*
 * When a broken link's wait ends, counted from t0: recover_ms later, or,
 * when recovery is by command, never in postcopy (0: dest_accept_pair()'s
 * "forever") and the default's 10 s before STATE, where the VM still runs
 * at the source and QEMU's destination would simply fail.
 */
static uint64_t recover_deadline(const struct mig_dest *d, uint64_t t0, int postcopy)
{
	int ms = d->o.recover_ms;

	if (ms == MIG_RECOVER_BY_COMMAND && postcopy)
		return 0;
	if (ms == MIG_RECOVER_BY_COMMAND)
		ms = 10000;
	return t0 + (uint64_t)ms * 1000000ull;
}

/* How long the postcopy wait may be, for the break's messages ("up to N ms"). */
static void wait_text(const struct mig_dest *d, const char *up_to, char *buf, size_t len)
{
	if (d->o.recover_ms == MIG_RECOVER_BY_COMMAND)
		snprintf(buf, len,
			 "with no deadline (migrate-recover, or the source's migrate resume)");
	else
		snprintf(buf, len, "%s %d ms", up_to, d->o.recover_ms);
}

/* The reconnected channels become the link (under req_lock). */
static void link_up(struct mig_dest *d, struct mig_links *l)
{
	d->links = *l;
	d->link_ok = 1;
	d->times.t_link_ns = now_ns();
}

/* RUNNING: the vCPUs run here since resume_rt. */
void dest_send_running(struct mig_dest *d, struct mig_conn *urg)
{
	struct mig_running m = {
		.resume_realtime_ns = d->times.resume_rt,
		.dest_downtime_ns = (int64_t)(d->times.resume_rt - d->times.pause_rt),
	};
	mig_conn_send(urg, MIG_MSG_RUNNING, &m, sizeof(m), NULL, 0);
}

/* On a recovered link: repeat every outstanding request, and RUNNING.  Under req_lock. */
static uint64_t repeat_requests(struct mig_dest *d, struct mig_conn *urg)
{
	uint64_t again = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		if (ram_word_state(ram_page_word(d->ram, i)) != RAM_PAGE_REQUESTED)
			continue;
		struct mig_page_request q = { .count = 1 };
		uint64_t addr = i * PAGE_SIZE;
		mig_conn_send(urg, MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8);
		again++;
	}
	if (d->times.t_resumed)
		dest_send_running(d, urg); /* it may have been lost with the old link */
	return again;
}

/*
 * The break's line: where the pages not yet present are (staged here and
 * not yet installed, being installed, or still to come from the source),
 * so that a stall on this side is told apart from one at the source.
 */
static void report_break(struct mig_dest *d)
{
	uint64_t n[RAM_PAGE_PRESENT] = { 0 };
	char wait[100], cause[sizeof(d->why)];
	wait_text(d, "up to", wait, sizeof(wait));
	mig_lock(&d->lock, MIG_RANK_DEST); /* a failure may be rewriting it */
	snprintf(cause, sizeof(cause), "%s", d->why);
	mig_unlock(&d->lock);
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		enum ram_page_state st = ram_word_state(ram_page_word(d->ram, i));
		if (st < RAM_PAGE_PRESENT)
			n[st]++;
	}
	pr_mig("link to the source broken during postcopy (%s); %llu pages missing (%llu "
	       "to come, %llu requested, %llu staged, %llu being installed), faulting vCPUs "
	       "wait; waiting %s for the source to reconnect to %s\n",
	       cause,
	       (unsigned long long)(n[RAM_PAGE_MISSING] + n[RAM_PAGE_REQUESTED] +
				    n[RAM_PAGE_STAGED] + n[RAM_PAGE_INSTALLING]),
	       (unsigned long long)n[RAM_PAGE_MISSING], (unsigned long long)n[RAM_PAGE_REQUESTED],
	       (unsigned long long)n[RAM_PAGE_STAGED], (unsigned long long)n[RAM_PAGE_INSTALLING],
	       wait, d->o.addr);
}

static int recover_postcopy(struct mig_dest *d)
{
	uint64_t t0 = now_ns();
	report_break(d);
	retire_links(d);
	struct mig_links l;
	if (reconnect(d, recover_deadline(d, t0, 1), 0, &l)) {
		char cause[sizeof(d->why)], wait[100];
		mig_lock(&d->lock, MIG_RANK_DEST);
		snprintf(cause, sizeof(cause), "%s", d->why);
		mig_unlock(&d->lock);
		wait_text(d, "within", wait, sizeof(wait));
		dest_fail(d,
			  "source did not reconnect %s after the link broke (%s); "
			  "stopping: %llu pages never arrived, the VM must not run on",
			  wait, cause, (unsigned long long)(d->nr_pages - ram_nr_present(d->ram)));
		return -ETIMEDOUT;
	}
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	link_up(d, &l);
	uint64_t again = repeat_requests(d, l.urg);
	mig_unlock(&d->req_lock);
	mig_lock(&d->lock, MIG_RANK_DEST);
	dest_phase_enter(d, DEST_POSTCOPY); /* unless it failed meanwhile */
	d->listen.recover_asked = 0; /* a later break is paused until its own migrate-recover */
	d->counts.recoveries++;
	d->times.t_broken_ns += now_ns() - t0;
	mig_unlock(&d->lock);
	dest_loop_attach(d, l.urg);
	dest_start_receivers(d);
	pr_mig("link recovered after %.1f ms; %llu outstanding requests repeated\n",
	       (double)(now_ns() - t0) / 1e6, (unsigned long long)again);
	dest_try_complete(d);
	return 0;
}

void *dest_supervisor_thread(void *arg)
{
	struct mig_dest *d = arg;
	for (;;) {
		enum dest_phase ph = dest_phase(d);
		/*
		 * Not over while COMPLETE is being sent: a send that fails falls
		 * back to POSTCOPY or RECOVERING (send_complete()), and then
		 * this thread is the one to recover the link.
		 */
		if (ph == DEST_COMPLETE || ph == DEST_FAILED || dest_stopping(d))
			return NULL;
		if (ph == DEST_RECOVERING) {
			if (recover_postcopy(d))
				return NULL;
			continue;
		}
		/*
		 * The source reconnected (authenticated) before this side noticed
		 * the break: it knows the old link is dead.
		 */
		mig_lock(&d->lock, MIG_RANK_DEST);
		if (dest_pending_complete(d) && d->phase == DEST_POSTCOPY) {
			dest_phase_break(d, "the source reconnected");
		} else {
			struct timespec ts = dest_mono_in_ms(100);
			pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		}
		mig_unlock(&d->lock);
	}
}

/*
 * The page record after a break before STATE: staged pages may have been
 * dirtied since (their PRECOPY_DIRTY may be lost), so they are forgotten;
 * installed pages stay installed (RESUME lists them); the source starts
 * the switch-over again (DONE(0)).
 */
void dest_forget_staged(struct mig_dest *d)
{
	uint64_t old;
	for (uint64_t i = 0; i < d->nr_pages; i++)
		ram_claim(d->ram, i, RAM_FROM(RAM_PAGE_STAGED), RAM_PAGE_MISSING, RAM_BY_NONE,
			  false, &old);
}

void dest_reset_before_state(struct mig_dest *d)
{
	dest_forget_staged(d);
	mig_lock(&d->lock, MIG_RANK_DEST);
	dest_set_done0(d, false);
	if (d->phase == DEST_PRECOPY_BROKEN) /* else the incoming thread saw the break first */
		dest_phase_enter(d, DEST_PRECOPY);
	mig_unlock(&d->lock);
}

/*
 * A source that gives up sends ERROR on the urgent channel, then closes
 * every channel: a bulk channel's close can be seen first, and looks like
 * a break.  -ECANCELED with the source's reason if its ERROR is already
 * here (a kicked socket still yields what it had received), else 0.
 */
static int source_gave_up(struct mig_dest *d, char *err, size_t errlen)
{
	struct mig_conn *urg = d->links.urg;
	struct mig_frame_hdr h;
	const uint8_t *p;
	char why[320];

	while (urg && urg->fd >= 0 && mig_conn_recv_ready(urg, &h, &p, why, sizeof(why)) == 0)
		if (h.type == MIG_MSG_ERROR) {
			mig_peer_error(err, errlen, p, "source reported an error");
			return -ECANCELED;
		}
	return 0;
}

/*
 * A break before STATE: drop what precopy staged (its dirty bitmap may be
 * lost), wait for the source's RECOVER connection and send RESUME with
 * MIG_RESUME_NEED_STATE.  0 with a new d->links.urg and d->links.bulk[], or -errno with err.
 */
int dest_incoming_reconnect(struct mig_dest *d, char *err, size_t errlen)
{
	char cause[sizeof(d->why)];
	dest_kick_links(d);
	dest_join_receivers(d);
	if (source_gave_up(d, err, errlen))
		return -ECANCELED;
	mig_lock(&d->lock, MIG_RANK_DEST);
	snprintf(cause, sizeof(cause), "%s", d->phase == DEST_PRECOPY_BROKEN ? d->why : err);
	mig_unlock(&d->lock);
	uint64_t t0 = now_ns(), deadline = recover_deadline(d, t0, 0);
	pr_mig("link to the source broken before the VM state arrived (%s); waiting up to %llu ms "
	       "for the source to reconnect to %s\n",
	       cause, (unsigned long long)((deadline - t0) / 1000000), d->o.addr);
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	d->link_ok = 0;
	dest_links_free(d);
	mig_unlock(&d->req_lock);
	dest_reset_before_state(d);
	struct mig_links l;
	if (reconnect(d, deadline, MIG_RESUME_NEED_STATE, &l)) {
		snprintf(err, errlen,
			 "source did not reconnect within %llu ms after the link broke (%s)",
			 (unsigned long long)((deadline - t0) / 1000000), cause);
		return -ETIMEDOUT;
	}
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	link_up(d, &l);
	mig_unlock(&d->req_lock);
	d->counts.recoveries++;
	pr_mig("source reconnected; asked for the VM state again\n");
	return 0;
}
