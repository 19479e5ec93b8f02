// SPDX-License-Identifier: GPL-2.0
/*
 * The bottom of the source (its files, their order: source.h): how the
 * source stops, breaks the link, gives up or is cancelled, and the
 * control requests of struct mig_ctl; every other file of the source uses
 * these, and they use none of them.
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
