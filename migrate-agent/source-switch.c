// SPDX-License-Identifier: GPL-2.0
/*
 * The switch-over at the source, and everything before it on the main
 * thread: the connections, the watchdog, precopy, LAYOUT and its
 * acknowledgement, DONE(0); then the pause, the saved state and STATE.
 * Any failure up to STATE resumes the VM here.
 */
#include <errno.h>
#include <string.h>

#include "source.h"

/*
 * LAYOUT's payload: the RAM's size and regions.  One function, because a
 * recovery that sends the switch-over again must send the same LAYOUT.
 */
void src_layout(struct src *s, struct mig_layout *l)
{
	memset(l, 0, sizeof(*l));
	l->ram_size = s->vm->ram_size;
	l->page_size = PAGE_SIZE;
	l->nr_regions = s->vm->nr_regions;
	memcpy(l->regions, s->vm->regions, sizeof(l->regions));
}

/*
 * LAYOUT, last before the pause, and its acknowledgement: a destination
 * that refuses it must be known while the VM can still go on here.
 */
static int send_layout(struct src *s, char *err, size_t errlen)
{
	struct mig_layout l;
	src_layout(s, &l);
	int r = mig_conn_send(s->links.urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	if (r) {
		snprintf(err, errlen, "cannot send LAYOUT: %s", strerror(-r));
		return r;
	}
	struct mig_frame_hdr h;
	const uint8_t *p;
	/* The acknowledgement within idle_ms: heartbeats are not an answer. */
	mig_conn_set_deadline(s->links.urg, now_ns() + (uint64_t)s->o->idle_ms * 1000000ull);
	r = mig_conn_recv(s->links.urg, &h, &p, err, errlen);
	mig_conn_set_deadline(s->links.urg, 0);
	if (r == -ETIMEDOUT)
		snprintf(err, errlen, "destination did not acknowledge LAYOUT within %d ms",
			 s->o->idle_ms);
	if (!r && h.type == MIG_MSG_ERROR) {
		mig_peer_error(err, errlen, p, "destination refused the migration");
		r = -ECONNREFUSED;
	} else if (!r && h.type != MIG_MSG_LAYOUT) {
		snprintf(err, errlen, "urgent channel: expected the LAYOUT acknowledgement, got %s",
			 mig_msg_name(h.type));
		r = -EPROTO;
	}
	return r;
}

/*
 * DONE(0) on bulk: no more precopy pages.  Without precopy it goes before
 * LAYOUT: the destination's bulk receiver has read it by the time STATE
 * comes, so its wake-up is not part of the downtime (it was 0.03-2 ms
 * here), and it wakes during LAYOUT's round trip rather than at the pause,
 * where on two cores it took a CPU from the vCPU being kicked (pause step
 * 122 -> 100 us, medians of bench/ab's 5 runs).  After precopy it must follow PRECOPY_DIRTY, after the
 * pause.
 */
int src_send_done0(struct src *s)
{
	struct mig_done done0 = { .phase = 0 };
	return mig_conn_send(s->links.bulk[0], MIG_MSG_DONE, &done0, sizeof(done0), NULL, 0);
}

/*
 * The switch-over: pause, save the state, DONE(0) (after PRECOPY_DIRTY;
 * before the pause without precopy) on bulk and STATE on urgent.  From the
 * pause the downtime runs.  On failure the VM has been resumed here (the
 * destination has no whole state).
 */
/*
 * QEMU's pause-before-switchover: paused, in PRE_SWITCHOVER until the
 * caller's migrate-continue or a cancel (each wakes the wait), the guest's
 * end or a broken link (seen within SRC_CTL_LOOK_MS).  0, or -errno with
 * err (the caller resumes the VM).
 */
static int pre_switchover(struct src *s, char *err, size_t errlen)
{
	struct mig_ctl *c = s->o->ctl;
	uint32_t seen = src_ctl_seen(c);

	src_set_phase(s, MIG_PHASE_PRE_SWITCHOVER);
	while (!__atomic_exchange_n(&c->go_on, 0, __ATOMIC_ACQ_REL)) {
		if (src_cancel_asked(s))
			return src_cancelled(s, err, errlen);
		if (src_stopped(s)) {
			src_link_cause(s, err, errlen);
			return -EPIPE;
		}
		src_ctl_wait(c, seen, SRC_CTL_LOOK_MS);
		seen = src_ctl_seen(c);
	}
	src_set_phase(s, MIG_PHASE_SWITCHOVER);
	return 0;
}

int src_switch_over(struct src *s, char *err, size_t errlen)
{
	struct mig_source_vm *vm = s->vm;
	int pbs = ASKED(s, pause_before_switchover);
	if (!pbs && src_no_more_cancel(s))
		return src_cancelled(s, err, errlen);
	if (vm->stopped && vm->stopped(vm->ctx)) /* the guest ended during precopy */
		return src_give_up(s, "the VM stopped at the source before the switch-over", err,
				   errlen);
	src_set_phase(s, MIG_PHASE_SWITCHOVER);
	s->times.t_pause = now_ns();
	s->times.pause_rt = mig_realtime_ns();
	int r = vm->pause(vm->ctx);
	s->times.t_paused = now_ns();
	if (r) {
		snprintf(err, errlen, "cannot pause the VM: %s", strerror(-r));
		return r;
	}
	/* A cancel is still taken while paused before the switch-over, as QEMU's. */
	if (pbs) {
		r = pre_switchover(s, err, errlen);
		if (!r && src_no_more_cancel(s))
			r = src_cancelled(s, err, errlen);
		if (r) {
			vm->resume(vm->ctx);
			return r;
		}
	}
	r = vm->save_state(vm->ctx, &s->state.blob, &s->state.len);
	s->times.t_saved = now_ns();
	if (r) {
		snprintf(err, errlen, "cannot save the VM state: %s", strerror(-r));
		vm->resume(vm->ctx);
		return r;
	}
	if (s->o->precopy_rounds)
		r = src_precopy_finish(s, err, errlen);
	if (!r && s->o->precopy_rounds)
		r = src_send_done0(s);
	struct mig_state_hdr sh = { .pause_realtime_ns = s->times.pause_rt,
				    .blob_len = s->state.len };
	if (!r)
		r = mig_conn_send(s->links.urg, MIG_MSG_STATE, &sh, sizeof(sh), s->state.blob,
				  s->state.len);
	s->times.t_state_sent = now_ns();
	/* Off the downtime path: turning the log off rewrites the memslot. */
	if (s->precopy.dirty_on)
		vm->dirty_stop(vm->ctx);
	s->precopy.dirty_on = 0;
	s->counts.bytes_state = sizeof(sh) + s->state.len;
	if (r) {
		if (!err[0])
			snprintf(err, errlen, "cannot send the VM state: %s", strerror(-r));
		src_link_cause(s, err, errlen);
		vm->resume(vm->ctx);
	}
	return r;
}

/* Everything before the switch-over; on failure the VM goes on here. */
int src_before_switch(struct src *s, char *err, size_t errlen)
{
	int r =
	    src_connect_pair(s, 0, now_ns() + (uint64_t)s->o->connect_ms * 1000000ull, err, errlen);
	if (r)
		return r;
	src_start_watch(s);
	if (s->o->precopy_rounds) {
		src_set_phase(s, MIG_PHASE_PRECOPY);
		s->precopy.dirty_on = 1; /* src_precopy() turns it on; off on every way out */
		r = src_precopy(s, err, errlen);
	}
	if (!r && src_cancel_asked(s))
		r = src_cancelled(s, err, errlen);
	if (!r && !s->o->precopy_rounds) {
		r = src_send_done0(s);
		if (r)
			snprintf(err, errlen, "bulk channel: cannot send DONE: %s", strerror(-r));
	}
	if (!r)
		r = send_layout(s, err, errlen);
	if (r && r != -ECANCELED)
		src_link_cause(s, err, errlen);
	return r;
}
