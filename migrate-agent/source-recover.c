// SPDX-License-Identifier: GPL-2.0
/*
 * Recovery at the source, when the link breaks after the switch-over: the
 * destination keeps listening, so the source reconnects (proving the
 * session's secret) until recover_ms, takes RESUME and resends whatever the
 * destination's bitmap lacks, the state too when it never arrived.
 */
#include <errno.h>
#include <string.h>

#include "source.h"

/*
 * Wait for RESUME on a reconnected pair, within idle_ms and by the
 * recovery's deadline (heartbeats extend neither): 0 with *h and *p,
 * -ETIMEDOUT or another -errno with err.
 */
static int await_resume(struct src *s, uint64_t deadline, struct mig_frame_hdr *h,
			const uint8_t **p, char *err, size_t errlen)
{
	uint64_t by = now_ns() + (uint64_t)s->o->idle_ms * 1000000ull;
	mig_conn_set_deadline(s->links.urg, by < deadline ? by : deadline);
	int r = mig_conn_recv(s->links.urg, h, p, err, errlen);
	mig_conn_set_deadline(s->links.urg, 0);
	if (r == -ETIMEDOUT)
		snprintf(err, errlen, "destination sent no RESUME within %d ms of the reconnection",
			 s->o->idle_ms);
	if (!r && h->type != MIG_MSG_RESUME) {
		snprintf(err, errlen, "recovery: expected RESUME, got %s", mig_msg_name(h->type));
		r = -EPROTO;
	}
	return r;
}

/*
 * Reconnect and take RESUME before deadline.  A reconnection whose RESUME
 * does not come within idle_ms is dropped and tried again: a destination
 * that only sends heartbeats cannot hold the source past the deadline.
 */
static int reconnect_for_resume(struct src *s, uint64_t deadline, struct mig_frame_hdr *h,
				const uint8_t **p, char *err, size_t errlen)
{
	for (;;) {
		int r = src_connect_pair(s, 1, deadline, err, errlen);
		if (r)
			return r;
		src_set_link_up(s, 1);
		r = await_resume(s, deadline, h, p, err, errlen);
		if (!r)
			return 0;
		src_set_link_up(s, 0);
		mig_conn_close(s->links.urg);
		mig_links_close_bulk(&s->links);
		if (now_ns() > deadline)
			return r;
		pr_mig("reconnected, but no RESUME (%s); trying again\n", err);
	}
}

/*
 * Before reconnecting: the watchdog leaves the link alone, the connections'
 * bytes go into the totals, and both close.
 */
static void drop_link(struct src *s)
{
	src_set_link_up(s, 0);
	s->counts.bytes_total_prev += s->links.urg->tx_bytes + mig_links_bulk_tx(&s->links, 0);
	s->counts.hdr_total_prev += s->links.urg->tx_hdr + mig_links_bulk_tx(&s->links, 1);
	mig_conn_close(s->links.urg);
	mig_links_close_bulk(&s->links);
}

/*
 * The destination's bitmap (RESUME) is the truth: every page it lacks is
 * no longer claimed as sent, so the push sends it again.  The pages it has.
 */
static uint64_t forget_lost(struct src *s, const uint8_t *bm)
{
	uint64_t have = 0;
	for (uint64_t i = 0; i < s->nr_pages; i++) {
		int got = wire_bit(bm, i);
		if (got) {
			have++;
		} else if (bit_test(s->sent, i)) {
			bit_clear(s->sent, i);
			s->counts.pages_resent++;
		}
	}
	s->counts.sent_count = have;
	return have;
}

/*
 * RESUME with NEED_STATE: the state never arrived, so the switch-over
 * again (LAYOUT, DONE(0), STATE), with the same pause and the kept blob.
 */
static int resend_state(struct src *s, char *err, size_t errlen)
{
	struct mig_layout l;
	struct mig_state_hdr sh = { .pause_realtime_ns = s->times.pause_rt,
				    .blob_len = s->state.len };
	src_layout(s, &l);
	int r = mig_conn_send(s->links.urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	if (!r)
		r = src_send_done0(s);
	if (!r)
		r = mig_conn_send(s->links.urg, MIG_MSG_STATE, &sh, sizeof(sh), s->state.blob,
				  s->state.len);
	if (r) {
		snprintf(err, errlen, "recovery: cannot send the state again: %s", strerror(-r));
		return r;
	}
	pr_mig("destination lost the VM state with the link: sent it again\n");
	return 0;
}

/*
 * Recovery by the source itself: re-dial the address until recover_ms
 * after the break.  0 with RESUME in *h, *p, or -errno with err.
 */
static int recover_by_redial(struct src *s, struct mig_frame_hdr *h, const uint8_t **p, char *err,
			     size_t errlen)
{
	uint64_t deadline = now_ns() + (uint64_t)s->o->recover_ms * 1000000ull;
	pr_mig("link to destination broken during postcopy (%s); reconnecting to %s for up to "
	       "%d ms\n",
	       s->why, s->sa.text, s->o->recover_ms);
	src_set_phase(s, MIG_PHASE_RECOVER_SETUP);
	int r = reconnect_for_resume(s, deadline, h, p, err, errlen);
	if (r) {
		char e2[300];
		snprintf(e2, sizeof(e2), "%s", err);
		snprintf(err, errlen,
			 "destination unreachable for %d ms after the link broke (%s); giving up",
			 s->o->recover_ms, e2);
	}
	return r;
}

/*
 * The operator's migrate {resume: true}, waited for in postcopy-paused
 * with no deadline (woken by the request; the VM's end is seen within
 * SRC_CTL_LOOK_MS): its URI into s->sa.  0, or -ECANCELED with err when
 * the VM stopped meanwhile.
 */
static int await_resume_command(struct src *s, char *err, size_t errlen)
{
	struct mig_ctl *c = s->o->ctl;
	for (;;) {
		uint32_t seen = src_ctl_seen(c);
		if (__atomic_load_n(&c->resume, __ATOMIC_ACQUIRE) == MIG_RESUME_ASKED) {
			struct mig_addr a;
			char e[200];
			__atomic_store_n(&c->resume, MIG_RESUME_TAKEN, __ATOMIC_RELEASE);
			if (!mig_addr_parse(c->resume_uri, &a, e, sizeof(e))) {
				s->sa = a;
				return 0;
			}
			pr_mig("migrate resume: %s; still paused\n", e);
			__atomic_store_n(&c->resume, MIG_RESUME_NONE, __ATOMIC_RELEASE);
		}
		if (s->vm->stopped && s->vm->stopped(s->vm->ctx)) {
			snprintf(err, errlen, "the VM was stopped while its postcopy was paused");
			return -ECANCELED;
		}
		src_ctl_wait(c, seen, SRC_CTL_LOOK_MS);
	}
}

/*
 * Recovery by command: postcopy-paused until migrate {resume: true}, then
 * one attempt at its URI (connect_ms); a failed attempt goes back to
 * postcopy-paused, as QEMU's.  0 with RESUME in *h, *p, or -errno.
 */
static int recover_by_command(struct src *s, struct mig_frame_hdr *h, const uint8_t **p, char *err,
			      size_t errlen)
{
	pr_mig("link to destination broken during postcopy (%s); paused until migrate "
	       "{resume: true}\n",
	       s->why);
	for (;;) {
		int r = await_resume_command(s, err, errlen);
		if (r)
			return r;
		src_set_phase(s, MIG_PHASE_RECOVER_SETUP);
		uint64_t deadline = now_ns() + (uint64_t)s->o->connect_ms * 1000000ull;
		r = reconnect_for_resume(s, deadline, h, p, err, errlen);
		__atomic_store_n(&s->o->ctl->resume, MIG_RESUME_NONE, __ATOMIC_RELEASE);
		if (!r)
			return 0;
		pr_mig("migrate resume to %s failed (%s); paused again\n", s->sa.text, err);
		src_set_phase(s, MIG_PHASE_RECOVER);
	}
}

/*
 * After a break in postcopy (the urgent and push threads have ended):
 * reconnect, by the source itself within recover_ms or when the operator
 * says where, and take RESUME; then postcopy goes on with whatever the
 * destination lacks.  0, or -errno with err (the migration fails: the VM
 * is lost).
 */
int src_recover_link(struct src *s, char *err, size_t errlen)
{
	struct mig_frame_hdr h;
	const uint8_t *p;
	int r;

	src_set_phase(s, MIG_PHASE_RECOVER);
	drop_link(s);
	if (s->o->ctl) /* a pause asked before this break is spent by it */
		__atomic_store_n(&s->o->ctl->pause, 0, __ATOMIC_RELEASE);
	if (s->o->recover_ms == MIG_RECOVER_BY_COMMAND && s->o->ctl)
		r = recover_by_command(s, &h, &p, err, errlen);
	else
		r = recover_by_redial(s, &h, &p, err, errlen);
	if (r)
		return r;
	src_set_phase(s, MIG_PHASE_RECOVERING);
	struct mig_resume rs;
	memcpy(&rs, p, sizeof(rs));
	uint64_t have = forget_lost(s, p + sizeof(struct mig_resume));
	memset(s->hint.n, 0, sizeof(s->hint.n));
	if (rs.flags & MIG_RESUME_NEED_STATE) {
		r = resend_state(s, err, errlen);
		if (r)
			return r;
	}
	if (!s->heard.running_seen)
		s->counts.recoveries_before_running = 1;
	/* Under s->lock like every write of it (source.h); no other lock is held here. */
	mig_lock(&s->lock, MIG_RANK_SRC);
	s->broken = 0;
	mig_unlock(&s->lock);
	s->counts.recoveries++;
	src_set_phase(s, MIG_PHASE_POSTCOPY);
	pr_mig("link recovered: destination has %llu of %llu pages, %llu lost in flight will be "
	       "sent again\n",
	       (unsigned long long)have, (unsigned long long)s->nr_pages,
	       (unsigned long long)(s->nr_pages - have));
	return 0;
}
