// SPDX-License-Identifier: GPL-2.0
/*
 * mig_dest_incoming(): the page record for the VM's RAM, the source's first
 * set of channels (urgent and every bulk one), LAYOUT, the end of precopy (DONE(0) on the bulk channel),
 * then STATE, loaded into the VM; a break before STATE is recovered
 * (dest-recover.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dest.h"

static int layout_matches_vm(struct mig_dest *d, const struct mig_layout *l, char *err,
			     size_t errlen)
{
	struct mig_dest_vm *vm = d->vm;
	if (!vm->nr_regions)
		return 0;
	if (l->nr_regions != vm->nr_regions)
		goto bad;
	for (unsigned i = 0; i < l->nr_regions; i++)
		if (l->regions[i].gpa != vm->regions[i].gpa ||
		    l->regions[i].size != vm->regions[i].size)
			goto bad;
	return 0;
bad:
	snprintf(err, errlen,
		 "the source's RAM layout (%u regions, first at 0x%llx size 0x%llx) differs "
		 "from this VM's (%u regions, first at 0x%llx size 0x%llx)",
		 l->nr_regions, (unsigned long long)l->regions[0].gpa,
		 (unsigned long long)l->regions[0].size, vm->nr_regions,
		 (unsigned long long)vm->regions[0].gpa, (unsigned long long)vm->regions[0].size);
	return -EINVAL;
}

/* The next frame on c, which must be a want; the source's ERROR is reported as such. */
static int expect_frame(struct mig_conn *c, uint16_t want, struct mig_frame_hdr *h,
			const uint8_t **p, char *err, size_t errlen)
{
	int r = mig_conn_recv(c, h, p, err, errlen);
	if (r)
		return r;
	if (h->type == MIG_MSG_ERROR) {
		mig_peer_error(err, errlen, *p, "source reported an error");
		return -ECANCELED;
	}
	if (h->type != want) {
		snprintf(err, errlen, "%s channel: expected %s, got %s", c->name,
			 mig_msg_name(want), mig_msg_name(h->type));
		return -EPROTO;
	}
	return 0;
}

/* The staging buffer and the stamps for vm's RAM, whose page record is the RAM's. */
int dest_incoming_alloc(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen)
{
	d->vm = vm;
	d->ram = vm->ram;
	if (!ram_has_record(d->ram)) {
		snprintf(err, errlen, "an incoming migration needs lazy RAM");
		return -EINVAL;
	}
	d->nr_pages = ram_nr_pages(d->ram);
	d->stamps = mig_stamps_new(d->nr_pages);
	d->stage = mmap(NULL, ram_bytes(d->ram), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->stage == MAP_FAILED)
		d->stage = NULL; /* what dest_incoming_free() unmaps */
	d->loop.run.buf = mmap(NULL, RUN_MAX * PAGE_SIZE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (d->loop.run.buf == MAP_FAILED)
		d->loop.run.buf = NULL;
	if (!d->stage || !d->loop.run.buf) {
		snprintf(err, errlen, "out of memory for %llu pages",
			 (unsigned long long)d->nr_pages);
		return -ENOMEM;
	}
	return 0;
}

/* What dest_incoming_alloc() allocated. */
void dest_incoming_free(struct mig_dest *d)
{
	if (d->stage)
		munmap(d->stage, ram_bytes(d->ram));
	if (d->loop.run.buf)
		munmap(d->loop.run.buf, RUN_MAX * PAGE_SIZE);
	mig_stamps_free(d->stamps);
}

/* Accept connections; wait (until stopped) for the source's first pair. */
static int incoming_first_pair(struct mig_dest *d, char *err, size_t errlen)
{
	struct mig_links l;
	int r = dest_start_accepting(d, err, errlen);
	if (!r)
		r = dest_accept_pair(d, 0, &l, err, errlen);
	if (r)
		return r;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	d->links = l;
	mig_unlock(&d->req_lock);
	d->link_ok = 1;
	d->times.t_link_ns = now_ns();
	if (dest_start_watch(d)) {
		snprintf(err, errlen, "cannot start the watchdog thread");
		return -EAGAIN;
	}
	return 0;
}

/*
 * LAYOUT (after any precopy), acknowledged by echoing it, then STATE right
 * after the source paused: 0 with *p at STATE's payload (valid until the
 * next receive on urg).  *code: the ERROR code for a refusal.  (Busy-
 * polling for STATE was tried: on two shared cores it steals the CPU the
 * source needs to pause, and the downtime grew fivefold.)  A stalled source
 * is caught by the watchdog (idle_ms), which breaks the link.
 */
static int receive_switch_over(struct mig_dest *d, const uint8_t **p, uint32_t *code, char *err,
			       size_t errlen)
{
	struct mig_frame_hdr h;
	int r = expect_frame(d->links.urg, MIG_MSG_LAYOUT, &h, p, err, errlen);
	*code = MIG_ERR_PROTOCOL;
	if (!r) {
		struct mig_layout l;
		memcpy(&l, *p, sizeof(l));
		r = layout_matches_vm(d, &l, err, errlen);
		if (r)
			*code = MIG_ERR_LAYOUT;
		else
			r = mig_conn_send(d->links.urg, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	}
	if (!r)
		r = expect_frame(d->links.urg, MIG_MSG_STATE, &h, p, err, errlen);
	return r;
}

/*
 * The source has switched over: from here a broken link is recovered, not
 * fatal.  Precopy pages are usable once the bulk channel delivered DONE(0)
 * (after PRECOPY_DIRTY); if the link broke before that, none of the staged
 * pages can be trusted: drop them, RESUME will ask for them again.
 */
static int wait_bulk_done(struct mig_dest *d, char *err, size_t errlen)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	/* A bulk channel that broke before STATE is recovered after it now. */
	if (d->phase != DEST_FAILED)
		dest_phase_enter(d, d->phase == DEST_PRECOPY_BROKEN ? DEST_SWITCHING_BROKEN
								    : DEST_SWITCHING);
	while (!dest_done0(d) && d->phase == DEST_SWITCHING)
		pthread_cond_wait(&d->cond, &d->lock);
	if (!dest_done0(d) && d->phase == DEST_SWITCHING_BROKEN) {
		dest_forget_staged(d);
		dest_set_done0(d, true);
	}
	int failed = d->phase == DEST_FAILED;
	if (failed)
		snprintf(err, errlen, "%s", d->why);
	mig_unlock(&d->lock);
	d->times.t_phase0 = now_ns();
	return failed ? -EPROTO : 0;
}

/*
 * Load the state (STATE's payload p): the last step before the vCPUs may
 * run.  Everything else postcopy needs is started after they run
 * (start_postcopy_threads()), off the downtime.
 */
static int load_state(struct mig_dest *d, const uint8_t *p, char *err, size_t errlen)
{
	struct mig_state_hdr sh;
	memcpy(&sh, p, sizeof(sh));
	int r = d->vm->load_state(d->vm->ctx, p + sizeof(sh), sh.blob_len);
	if (r) {
		snprintf(err, errlen, "cannot load the VM state sent by the source: %s",
			 strerror(-r));
		dest_send_error(d->links.urg, MIG_ERR_STATE, err);
		return r;
	}
	d->times.t_state = now_ns();
	return 0;
}

int mig_dest_incoming(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen)
{
	int r = dest_incoming_alloc(d, vm, err, errlen);
	if (!r)
		r = incoming_first_pair(d, err, errlen);
	if (r)
		return r;
	const uint8_t *p;
	for (;;) {
		uint32_t code;
		dest_start_receivers(d);
		r = receive_switch_over(d, &p, &code, err, errlen);
		if (!r)
			break;
		enum dest_phase ph = dest_phase(d);
		/* -ECANCELED: the source's ERROR, its verdict even if a channel closed first. */
		if (r != -ECANCELED && (mig_link_error(r) || ph == DEST_PRECOPY_BROKEN) &&
		    ph != DEST_FAILED) {
			/*
			 * The link broke before STATE arrived; the source may
			 * already have paused its VM and sent it.  Wait for it to
			 * reconnect and ask for the state again.
			 */
			r = dest_incoming_reconnect(d, err, errlen);
			if (r)
				goto fail;
			continue;
		}
		/* The bulk channel may have failed first: report the cause. */
		mig_lock(&d->lock, MIG_RANK_DEST);
		if (d->phase == DEST_FAILED)
			snprintf(err, errlen, "%s", d->why);
		mig_unlock(&d->lock);
		dest_send_error(d->links.urg, code, err);
		goto fail;
	}
	struct mig_state_hdr sh;
	memcpy(&sh, p, sizeof(sh));
	d->times.pause_rt = sh.pause_realtime_ns;
	d->times.t_state_rx = now_ns();
	r = wait_bulk_done(d, err, errlen);
	if (!r)
		r = load_state(d, p, err, errlen);
	if (!r)
		return 0;
fail:
	dest_request_stop(d);
	dest_kick_links(d);
	dest_join_receivers(d);
	return r;
}
