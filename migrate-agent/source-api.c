// SPDX-License-Identifier: GPL-2.0
/*
 * The source side of postcopy (its files, phases and locking order:
 * source.h).  mig_source_run() is the whole migration on the caller's
 * thread: a new struct src, everything before the switch-over, the
 * switch-over, then the urgent and push threads until COMPLETE, with a
 * recovery after each broken link; and what a failure reports.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "source.h"

/* ---- The whole run ---- */

/*
 * Postcopy, until COMPLETE: the urgent and push threads until they stop,
 * then, for a broken link, a recovery and the threads again.  0, or -errno
 * with err: after the switch-over a failure loses the VM.
 */
static int run_postcopy(struct src *s, char *err, size_t errlen)
{
	for (;;) {
		pthread_t ut, pt[MIG_MAX_CHANNELS];
		int r = pthread_create(&ut, NULL, src_urgent_thread, s);
		if (r) { /* nothing started: nothing to join */
			snprintf(err, errlen, "cannot start the urgent thread: %s", strerror(r));
			return -r;
		}
		unsigned npush = src_start_push(s, pt);
		pthread_join(ut, NULL);
		for (unsigned k = 0; k < npush; k++)
			pthread_join(pt[k], NULL);
		if (s->complete)
			return 0;
		if (s->fatal) {
			snprintf(err, errlen, "%s", s->why);
			return -EPROTO;
		}
		if (!s->broken) {
			snprintf(err, errlen, "internal: threads ended without a result");
			return -EIO;
		}
		r = src_recover_link(s, err, errlen);
		if (r)
			return r;
	}
}

/*
 * What a new source needs of neither the network nor randomness: its page
 * record, features, locks and closed channels.  0 or -ENOMEM; s zeroed.
 * source-fuzz builds its sources with it too.
 */
int src_init(struct src *s, struct mig_source_vm *vm, const struct mig_opts *o)
{
	s->nr_pages = vm->ram_size / PAGE_SIZE;
	s->sent = calloc((s->nr_pages + 63) / 64, 8);
	if (!s->sent || mig_links_alloc(&s->links, o->channels)) {
		free(s->sent);
		return -ENOMEM;
	}
	s->vm = vm;
	s->o = o;
	s->stamps = mig_stamps_new(s->nr_pages); /* NULL: no stamps, nothing else lost */
	s->features = (o->compress ? MIG_FEAT_ZSTD : 0) | (o->push_runs ? MIG_FEAT_RUNS : 0);
	if (mig_opts_tls(o)) /* the AEAD checks every byte (wire.h) */
		s->features |= MIG_FEAT_NO_PAYLOAD_CRC;
	s->features &= ~o->features_off;
	s->times.t_start = now_ns();
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are now_ns() */
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->live.lock, NULL);
	pthread_mutex_init(&s->hint.lock, NULL);
	src_prepage_init(&s->hint.pp, o->prepage, !o->prepage_fixed);
	return 0;
}

/* A new source for vm and o; NULL with a message. */
static struct src *src_new(struct mig_source_vm *vm, const struct mig_opts *o, char *err,
			   size_t errlen)
{
	if (vm->ram_size == 0 || vm->ram_size % PAGE_SIZE) {
		snprintf(err, errlen, "RAM size %llu is not a multiple of the page size",
			 (unsigned long long)vm->ram_size);
		return NULL;
	}
	if (o->channels < 1 || o->channels > MIG_MAX_CHANNELS) {
		snprintf(err, errlen, "%u bulk channels: 1 to %u", o->channels, MIG_MAX_CHANNELS);
		return NULL;
	}
	if (o->recover_ms == MIG_RECOVER_BY_COMMAND && !o->ctl) {
		snprintf(err, errlen,
			 "recovery by command needs a caller that can resume (mig_ctl)");
		return NULL;
	}
	if (o->precopy_rounds && !(vm->dirty_start && vm->dirty_fetch && vm->dirty_stop)) {
		snprintf(err, errlen, "precopy rounds need dirty logging, which this VMM lacks");
		return NULL;
	}
	struct src *s = calloc(1, sizeof(*s));
	if (!s || src_init(s, vm, o)) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (mig_random_bytes(&s->sess.id, sizeof(s->sess.id), err, errlen) ||
	    mig_addr_parse(o->addr, &s->sa, err, errlen) || src_tls_client(s, err, errlen)) {
		mig_tls_ctx_free(s->tls);
		mig_stamps_free(s->stamps);
		mig_links_free(&s->links);
		free(s->sent);
		free(s);
		return NULL;
	}
	return s;
}

/* Everything src_new() and the run left: dirty logging off, threads joined. */
static void src_free(struct src *s)
{
	if (s->precopy.dirty_on) /* a failed precopy, pause or state save: logging off */
		s->vm->dirty_stop(s->vm->ctx);
	src_stop_watch(s);
	mig_links_free(&s->links);
	mig_tls_ctx_free(s->tls);
	mig_auth_wipe(s->sess.secret, sizeof(s->sess.secret));
	free(s->state.blob);
	free(s->precopy.precopy_carry);
	free(s->sent);
	mig_stamps_free(s->stamps);
	free(s);
}

/* A migration that failed before it had a struct src (bad options). */
static void failed_early(const struct mig_opts *o, const char *err)
{
	if (!o->ctl)
		return;
	snprintf(o->ctl->error, sizeof(o->ctl->error), "%s", err);
	__atomic_store_n(&o->ctl->phase, MIG_PHASE_FAILED, __ATOMIC_RELEASE);
	if (o->ctl->phase_changed)
		o->ctl->phase_changed(o->ctl->arg, MIG_PHASE_FAILED);
}

/* The whole outgoing migration (migrate/migrate.h); phases: source.h. */
int mig_source_run(struct mig_source_vm *vm, const struct mig_opts *opts, int *switched, char *err,
		   size_t errlen)
{
	struct mig_opts o = *opts;
	mig_opts_defaults(&o);
	*switched = 0;
	err[0] = 0;
	struct src *s = src_new(vm, &o, err, errlen);
	if (!s) {
		failed_early(&o, err);
		return -EINVAL;
	}
	if (o.ctl) {
		src_ctl_put(&o.ctl->t_start_ns, s->times.t_start);
		src_ctl_put(&o.ctl->pages_total, s->nr_pages);
	}
	src_set_phase(s, MIG_PHASE_SETUP);
	int r = src_before_switch(s, err, errlen);
	if (!r)
		r = src_switch_over(s, err, errlen);
	if (!r) {
		*switched = 1;
		src_set_phase(s, MIG_PHASE_POSTCOPY);
		s->times.t_push_start = now_ns();
		r = run_postcopy(s, err, errlen);
		if (o.progress && r == 0)
			mig_progress("migrate: complete 100%%  %llu pages  %llu demand  %llu "
				     "pushed  %.1f ms",
				     (unsigned long long)s->nr_pages,
				     (unsigned long long)s->counts.pages_demand,
				     (unsigned long long)s->counts.pages_pushed,
				     (double)(s->times.t_complete - s->times.t_start) / 1e6);
		if (o.progress)
			mig_progress_end();
		if (r == 0)
			src_write_report(s);
	}
	if (r == 0)
		src_set_phase(s, MIG_PHASE_COMPLETED);
	else if (!*switched && src_cancel_asked(s)) {
		src_set_phase(s, MIG_PHASE_CANCELLED);
	} else {
		if (o.ctl) {
			snprintf(o.ctl->error, sizeof(o.ctl->error), "%s", err);
			__atomic_store_n(&o.ctl->vm_lost, *switched, __ATOMIC_RELAXED);
		}
		src_set_phase(s, MIG_PHASE_FAILED);
	}
	src_free(s);
	return r;
}
