// SPDX-License-Identifier: GPL-2.0
/*
 * The destination side of postcopy (its files and locking order: dest.h).
 * mig_dest_incoming() accepts the two channels, stages precopy pages, loads
 * the STATE; the VMM then starts the vCPUs with every other page missing;
 * the RAM's fault thread runs the demand path (dest-fault.c).  Threads:
 *   fault       (the RAM's) faults -> PAGE_REQUEST; the urgent channel's
 *               replies (PAGE with MIG_PAGEF_DEMAND) -> install;
 *   acceptor    accepts connections, one handshake thread each (short-lived);
 *   rx-bulk     pushed pages -> install;
 *   stager      installs the pages precopy left in the staging buffer;
 *   supervisor  on a break it waits (up to recover_ms) for the source to
 *               reconnect, sends RESUME with the bitmap of pages received
 *               and repeats outstanding requests;
 *   watch       heartbeats out; silence or no progress in is a break.
 *
 * Each page has one word in the RAM's page record (ram/record.h), changed
 * only by compare-and-swap:
 *   MISSING -> REQUESTED (fault) -> INSTALLING -> PRESENT
 *   MISSING/STAGED -------------------> INSTALLING -> PRESENT
 * The INSTALLING claim makes "install" happen once per page whatever the
 * channel; a second arrival is a duplicate and is counted, never written.
 * Ordering hazard handled: a fault read from the kernel after its page was
 * installed (the install already woke the vCPU) finds PRESENT: woken only.
 * Deliberately ignored: a REQUESTED page whose request was lost with a
 * broken link stays REQUESTED; the supervisor re-sends every REQUESTED page
 * after RESUME, so it cannot be forgotten.
 *
 * The destination's phases (d->phase, dest-phase.c; every transition and
 * its maker: enum dest_phase in dest.h):
 *
 *   LISTENING -pair-> PRECOPY -STATE-> SWITCHING -resumed-> POSTCOPY -all PRESENT-> COMPLETE
 *                      |   ^                                  |   ^
 *                break v   | RESUME(NEED_STATE)         break v   | RESUME
 *                   (a new pair)                         RECOVERING
 *
 *   any phase --an error, mig_dest_abort(), no reconnection within recover_ms--> FAILED
 *
 * A break in PRECOPY forgets the staged pages (dest_reset_before_state())
 * and asks for the STATE again; a break in SWITCHING before DONE(0) forgets
 * them too and is recovered once the vCPUs run, in RECOVERING.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dest.h"

struct mig_dest *mig_dest_listen(const struct mig_opts *o, char *err, size_t errlen)
{
	struct mig_dest *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->o = *o;
	mig_opts_defaults(&d->o);
	d->times.t_start = now_ns();
	d->features = MIG_FEAT_KNOWN & ~d->o.features_off;
	pthread_mutex_init(&d->req_lock, NULL);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->lat_lock, NULL);
	pthread_mutex_init(&d->loop.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are now_ns() */
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (mig_random_bytes(d->admission.secret, sizeof(d->admission.secret), err, errlen)) {
		free(d);
		return NULL;
	}
	if (mig_addr_parse(o->addr, &d->sa, err, errlen) < 0) {
		free(d);
		return NULL;
	}
	/* Credentials are checked before anything listens. */
	if (mig_opts_tls(o) && mig_tls_ctx_new(&o->tls, true, &d->tls, err, errlen)) {
		free(d);
		return NULL;
	}
	d->listen.fd = mig_listen(&d->sa, err, errlen);
	if (d->listen.fd < 0) {
		mig_tls_ctx_free(d->tls);
		free(d);
		return NULL;
	}
	/* Accepted sockets inherit it: keeps the bulk queue (and its delay) short. */
	int rb = 256 << 10;
	setsockopt(d->listen.fd, SOL_SOCKET, SO_RCVBUF, &rb, sizeof(rb));
	return d;
}

/*
 * The postcopy threads, once the vCPUs run: a reply or a break that comes
 * first waits in the socket or in the phase (RECOVERING) for a few microseconds.
 */
static void start_postcopy_threads(struct mig_dest *d)
{
	dest_loop_attach(d, d->links.urg);
	if (dest_count_state(d, RAM_PAGE_STAGED)) {
		d->workers.stager_on =
		    pthread_create(&d->workers.stager, NULL, dest_stager_thread, d) == 0;
		if (!d->workers.stager_on)
			dest_fail(d, "cannot start the stager thread");
	} else {
		/* Nothing staged is valid (or there was no precopy): all of it goes. */
		madvise(d->stage, ram_bytes(d->ram), MADV_DONTNEED);
	}
	d->workers.sup_on = pthread_create(&d->workers.sup, NULL, dest_supervisor_thread, d) == 0;
	if (!d->workers.sup_on)
		dest_fail(d, "cannot start the supervisor thread");
}

void mig_dest_resumed(struct mig_dest *d)
{
	d->times.resume_rt = mig_realtime_ns();
	__atomic_store_n(&d->times.t_resumed, now_ns(), __ATOMIC_RELEASE);
	mig_lock(&d->lock, MIG_RANK_DEST);
	/* A break while the state loaded is recovered from here. */
	if (d->phase != DEST_FAILED)
		dest_phase_enter(d, d->phase == DEST_SWITCHING_BROKEN ? DEST_RECOVERING
								      : DEST_POSTCOPY);
	mig_unlock(&d->lock);
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	if (d->link_ok)
		dest_send_running(d, d->links.urg);
	mig_unlock(&d->req_lock);
	start_postcopy_threads(d);
	/* Every page may have arrived already (a small or idle guest). */
	dest_try_complete(d);
}

void mig_dest_abort(struct mig_dest *d, const char *why)
{
	if (dest_phase_over(dest_phase(d)))
		return;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	if (d->link_ok && d->links.urg)
		dest_send_error(d->links.urg, MIG_ERR_INTERNAL, why);
	mig_unlock(&d->req_lock);
	/*
	 * The failure first: a thread woken by the stop's broadcast (the
	 * incoming wait for a source) reports the cause it finds, and a stop
	 * without a failure reads "stopped" (migrate-signals saw it).
	 */
	dest_fail(d, "%s", why);
	dest_request_stop(d);
}

/*
 * QEMU's status of the incoming migration (d->lock held).  A broken link
 * before the vCPUs run is the phase it broke in (the source runs the VM);
 * a recovery asked for by migrate-recover is QEMU's postcopy-recover-setup.
 */
static enum mig_phase phase_locked(struct mig_dest *d)
{
	enum dest_phase ph = dest_phase(d);

	if (ph == DEST_RECOVERING && d->listen.recover_asked)
		return MIG_PHASE_RECOVER_SETUP;
	return dest_phase_status(ph);
}

enum mig_phase mig_dest_phase(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	enum mig_phase p = phase_locked(d);
	mig_unlock(&d->lock);
	return p;
}

/*
 * Every change of the phase broadcasts d->cond (dest-phase.c), which ends
 * this wait at once; ms bounds it, so that a change of the status made
 * otherwise (listen.recover_asked) is seen within ms.
 */
enum mig_phase mig_dest_phase_wait(struct mig_dest *d, enum mig_phase last, int ms)
{
	struct timespec ts = mig_mono_ts(now_ns() + (uint64_t)ms * 1000000ull);

	mig_lock(&d->lock, MIG_RANK_DEST);
	enum mig_phase p = phase_locked(d);
	while (p == last && pthread_cond_timedwait(&d->cond, &d->lock, &ts) != ETIMEDOUT)
		p = phase_locked(d);
	p = phase_locked(d);
	mig_unlock(&d->lock);
	return p;
}

/*
 * migrate-pause here: the link is broken as the watchdog breaks it, so the
 * usual recovery follows (dest-recover.c).  Only in postcopy: before the
 * switch-over a break fails the migration, and the VM runs on at the source.
 */
int mig_dest_pause(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	int r = dest_phase(d) == DEST_POSTCOPY ? 0 : -EINVAL;
	if (!r)
		dest_phase_break(d, "paused by migrate-pause");
	mig_unlock(&d->lock);
	if (!r)
		dest_kick_links(d);
	return r;
}

/*
 * migrate-recover: listen at addr too, for the source's reconnection.
 * Only while the link is broken after the switch-over (postcopy-paused).
 */
int mig_dest_listen_more(struct mig_dest *d, const char *addr, char *err, size_t errlen)
{
	struct mig_addr a;
	int r = mig_addr_parse(addr, &a, err, errlen);
	if (r < 0)
		return r;
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (dest_phase(d) != DEST_RECOVERING) {
		snprintf(err, errlen, "Migrate recover can only be run when postcopy is paused.");
		r = -EINVAL;
	} else if (d->listen.nr_more == DEST_MAX_LISTENERS) {
		snprintf(err, errlen, "already listening at %d recovery addresses",
			 DEST_MAX_LISTENERS);
		r = -ENOSPC;
	} else {
		int fd = mig_listen(&a, err, errlen);
		if (fd < 0) {
			r = fd;
		} else {
			d->listen.more[d->listen.nr_more] = fd;
			__atomic_store_n(&d->listen.nr_more, d->listen.nr_more + 1,
					 __ATOMIC_RELEASE);
			d->listen.recover_asked = 1;
		}
	}
	mig_unlock(&d->lock);
	if (!r)
		pr_mig("listening for the source's recovery at %s too\n", a.text);
	return r;
}

int mig_dest_status(struct mig_dest *d)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	enum dest_phase ph = dest_phase(d);
	mig_unlock(&d->lock);
	return ph == DEST_FAILED ? -1 : ph == DEST_COMPLETE ? 1 : 0;
}

int mig_dest_wait(struct mig_dest *d, char *err, size_t errlen)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	while (d->phase != DEST_FAILED && d->phase != DEST_COMPLETE)
		pthread_cond_wait(&d->cond, &d->lock);
	int failed = d->phase == DEST_FAILED;
	if (failed)
		snprintf(err, errlen, "%s", d->why);
	mig_unlock(&d->lock);
	return failed ? -EIO : 0;
}

void mig_dest_free(struct mig_dest *d)
{
	if (!d)
		return;
	dest_request_stop(d);
	dest_kick_links(d);
	dest_stop_accepting(d);
	mig_link_watch_stop(&d->watch);
	if (d->workers.sup_on)
		pthread_join(d->workers.sup, NULL);
	dest_loop_detach(d);
	dest_join_receivers(d);
	if (d->workers.stager_on)
		pthread_join(d->workers.stager, NULL);
	dest_links_free(d);
	if (d->listen.fd >= 0)
		close(d->listen.fd);
	for (int k = 0; k < d->listen.nr_more; k++)
		close(d->listen.more[k]);
	mig_tls_ctx_free(d->tls);
	dest_incoming_free(d);
	free(d->lat.ns);
	mig_auth_wipe(d->admission.secret, sizeof(d->admission.secret));
	free(d);
}
