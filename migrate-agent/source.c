// SPDX-License-Identifier: GPL-2.0
/*
 * The source side of postcopy (its files, phases and locking order:
 * source.h).  mig_source_run() is the whole migration on the caller's
 * thread: a new struct src, everything before the switch-over, the
 * switch-over, then the urgent and push threads until COMPLETE, with a
 * recovery after each broken link.  Here too: how the source stops, breaks
 * the link, gives up or is cancelled, and what a failure reports.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "source.h"

/* ---- Stopping: a broken link, a fatal error ---- */

/*
 * The link is lost (fatal 0: recoverable after the switch-over) or the
 * migration cannot go on (fatal 1: a protocol error, the peer's ERROR).
 * The first cause is the one reported; both connections are shut down so
 * that every thread blocked on them returns.
 */
void src_set_break(struct src *s, int fatal, const char *why)
{
	mig_lock(&s->lock, MIG_RANK_SRC);
	if (!s->broken && !s->fatal)
		snprintf(s->why, sizeof(s->why), "%s", why);
	if (fatal)
		s->fatal = 1;
	else
		s->broken = 1;
	pthread_cond_broadcast(&s->cond);
	mig_unlock(&s->lock);
	mig_conn_kick(s->links.urg);
	mig_links_kick_bulk(&s->links);
}

/* Whether the threads must stop: a break or a fatal error (lock-free, for their loops). */
int src_stopped(struct src *s)
{
	return __atomic_load_n(&s->broken, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->fatal, __ATOMIC_ACQUIRE);
}

/* A failure on a link the watchdog (or a thread) broke: report that cause. */
void src_link_cause(struct src *s, char *err, size_t errlen)
{
	mig_lock(&s->lock, MIG_RANK_SRC);
	if (s->broken || s->fatal)
		snprintf(err, errlen, "%s", s->why);
	mig_unlock(&s->lock);
}

/* ---- Cancelling and giving up, before the switch-over ---- */

/* Whether the caller asked to cancel (and the switch-over has not refused it). */
int src_cancel_asked(struct src *s)
{
	return s->o->ctl &&
	       __atomic_load_n(&s->o->ctl->cancel, __ATOMIC_ACQUIRE) == MIG_CANCEL_ASKED;
}

/* A request was published: wake the library's waits for one (src_ctl_wait()). */
static void ctl_asked(struct mig_ctl *c)
{
	__atomic_add_fetch(&c->asked, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &c->asked, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

uint32_t src_ctl_seen(const struct mig_ctl *c)
{
	return __atomic_load_n(&c->asked, __ATOMIC_ACQUIRE);
}

void src_ctl_wait(struct mig_ctl *c, uint32_t seen, int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	/* EAGAIN at once when a request came after `seen`: no wake-up is lost. */
	syscall(SYS_futex, &c->asked, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

/* The caller's side of the race with src_no_more_cancel() (migrate/migrate.h). */
int mig_ctl_cancel(struct mig_ctl *c)
{
	int none = MIG_CANCEL_NONE;

	if (__atomic_compare_exchange_n(&c->cancel, &none, MIG_CANCEL_ASKED, false,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		ctl_asked(c);
		return 0;
	}
	return none == MIG_CANCEL_ASKED ? 0 : -EBUSY;
}

void mig_ctl_start_postcopy(struct mig_ctl *c)
{
	__atomic_store_n(&c->start_postcopy, 1, __ATOMIC_RELEASE);
	ctl_asked(c);
}

/* The caller's migrate-continue; src_switch_over() waits for it (pre_switchover()). */
int mig_ctl_continue(struct mig_ctl *c)
{
	if (__atomic_load_n(&c->phase, __ATOMIC_ACQUIRE) != MIG_PHASE_PRE_SWITCHOVER)
		return -EINVAL;
	__atomic_store_n(&c->go_on, 1, __ATOMIC_RELEASE);
	ctl_asked(c);
	return 0;
}

/* The caller's migrate-pause; the watchdog acts on it (src_pause_asked()). */
int mig_ctl_pause(struct mig_ctl *c)
{
	int phase = __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE);

	if (phase != MIG_PHASE_POSTCOPY && phase != MIG_PHASE_RECOVERING)
		return -EINVAL;
	__atomic_store_n(&c->pause, 1, __ATOMIC_RELEASE);
	ctl_asked(c);
	return 0;
}

/*
 * The caller's migrate {resume: true}: the URI is written before the
 * request is published, and only while no resume is in flight, so the
 * library (await_resume_command()) reads a whole one.  A resume is in
 * flight from the request until the phase is back to paused: asked and not
 * yet taken (phase still paused), then connecting (recover-setup); both
 * are -EBUSY, whichever the caller happens to see.
 */
int mig_ctl_resume(struct mig_ctl *c, const char *uri)
{
	int phase = __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE);

	if (phase == MIG_PHASE_RECOVER_SETUP)
		return -EBUSY;
	if (phase != MIG_PHASE_RECOVER)
		return -EINVAL;
	if (__atomic_load_n(&c->resume, __ATOMIC_ACQUIRE) != MIG_RESUME_NONE)
		return -EBUSY;
	snprintf(c->resume_uri, sizeof(c->resume_uri), "%s", uri);
	__atomic_store_n(&c->resume, MIG_RESUME_ASKED, __ATOMIC_RELEASE);
	ctl_asked(c);
	return 0;
}

/*
 * The switch-over's point of no return: from here a cancel is refused.
 * 0, or -ECANCELED when a cancel came first.
 */
int src_no_more_cancel(struct src *s)
{
	int none = MIG_CANCEL_NONE;

	if (!s->o->ctl)
		return 0;
	if (__atomic_compare_exchange_n(&s->o->ctl->cancel, &none, MIG_CANCEL_TOO_LATE, false,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return 0;
	return -ECANCELED;
}

/*
 * Giving up before the switch-over, asked to or because the VM ended: the
 * destination hears why and gives up at once rather than waiting out its
 * recovery deadline.  -ECANCELED with why in err.
 */
int src_give_up(struct src *s, const char *why, char *err, size_t errlen)
{
	struct mig_error e = { .code = MIG_ERR_CANCELLED, .msg_len = (uint32_t)strlen(why) };

	if (s->links.urg->fd >= 0)
		mig_conn_send(s->links.urg, MIG_MSG_ERROR, &e, sizeof(e), why, e.msg_len);
	snprintf(err, errlen, "%s", why);
	return -ECANCELED;
}

/* A cancel honoured: src_give_up() with the cancel's message. */
int src_cancelled(struct src *s, char *err, size_t errlen)
{
	return src_give_up(s, "the migration was cancelled at the source", err, errlen);
}

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
	pthread_mutex_init(&s->link_lock, NULL);
	pthread_mutex_init(&s->hint_lock, NULL);
	src_prepage_init(&s->pp, o->prepage, !o->prepage_fixed);
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
	if (mig_random_bytes(&s->session, sizeof(s->session), err, errlen) ||
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
	mig_auth_wipe(s->secret, sizeof(s->secret));
	free(s->blob);
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
