// SPDX-License-Identifier: GPL-2.0
/*
 * The destination's use of the page record (ram/record.h, owned by the RAM):
 * an arrival claims its page (-> INSTALLING) and installs it once
 * (-> PRESENT); the stager installs what precopy staged; COMPLETE goes out
 * when every page is PRESENT.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dest.h"

/* How many pages of the record are in state st (a scan: for rare questions). */
uint64_t dest_count_state(struct mig_dest *d, enum ram_page_state st)
{
	uint64_t n = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++)
		n += ram_word_state(ram_page_word(d->ram, i)) == st;
	return n;
}

/* Pages the source still owes: neither here, nor staged, nor being installed (a scan). */
uint64_t dest_pages_owed(struct mig_dest *d)
{
	return dest_count_state(d, RAM_PAGE_MISSING) + dest_count_state(d, RAM_PAGE_REQUESTED);
}

/* Whether COMPLETE may still go out: a live link in postcopy, not sent yet (before any scan). */
static int complete_wanted(struct mig_dest *d)
{
	if (dest_phase(d) != DEST_POSTCOPY)
		return 0;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	int wanted = d->link_ok;
	mig_unlock(&d->req_lock);
	return wanted;
}

/*
 * Send m as COMPLETE unless another thread did first; then wake the
 * waiters.  COMPLETING is claimed before the send: the source may close
 * the link as soon as it has COMPLETE, and the receivers must take that
 * end for the end, not for a break.  A break during the send is kept
 * (COMPLETING_BROKEN) for the case the send fails.
 */
static void send_complete(struct mig_dest *d, const struct mig_complete *m)
{
	mig_lock(&d->lock, MIG_RANK_DEST);
	bool mine = d->phase == DEST_POSTCOPY && dest_phase_enter(d, DEST_COMPLETING);
	mig_unlock(&d->lock);
	if (!mine)
		return;
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	int sent = d->link_ok &&
		   mig_conn_send(d->links.urg, MIG_MSG_COMPLETE, m, sizeof(*m), NULL, 0) == 0;
	mig_unlock(&d->req_lock);
	mig_lock(&d->lock, MIG_RANK_DEST);
	if (sent)
		d->times.t_done = now_ns();
	if (d->phase != DEST_FAILED) /* a failure during the send stays the outcome */
		dest_phase_enter(d, sent				 ? DEST_COMPLETE
				    : d->phase == DEST_COMPLETING_BROKEN ? DEST_RECOVERING
									 : DEST_POSTCOPY);
	mig_unlock(&d->lock);
}

/*
 * Send COMPLETE if every page is here and it was not sent yet.  The RAM's
 * counter says when to look, the record decides: one scan, which also
 * counts COMPLETE's pages.
 */
void dest_try_complete(struct mig_dest *d)
{
	struct mig_complete m;

	/* Not before RUNNING: the source measures the downtime with it. */
	if (!__atomic_load_n(&d->times.t_resumed, __ATOMIC_ACQUIRE) ||
	    ram_nr_present(d->ram) < d->nr_pages || !complete_wanted(d))
		return;
	if (dest_fill_complete(d, &m))
		send_complete(d, &m);
}

/*
 * Claim page i for installing what arrived `by` (-> INSTALLING): true with
 * the replaced word in *old; false when it must not be installed: already
 * present or being installed (a duplicate, counted here and only here),
 * or, for the stager, no longer staged.
 */
bool dest_claim_page(struct mig_dest *d, uint64_t i, enum ram_arrival by, uint64_t *old)
{
	unsigned from = RAM_FROM(RAM_PAGE_STAGED);
	if (by != RAM_BY_PRECOPY)
		from |= RAM_FROM(RAM_PAGE_MISSING) | RAM_FROM(RAM_PAGE_REQUESTED);
	if (ram_claim(d->ram, i, from, RAM_PAGE_INSTALLING, by, false, old))
		return true;
	/*
	 * A staged copy someone else installed (the stager and a fault race,
	 * or a pushed page took its place) is no second arrival.
	 */
	enum ram_page_state st = ram_word_state(*old);
	if (by != RAM_BY_PRECOPY && (st == RAM_PAGE_PRESENT || st == RAM_PAGE_INSTALLING))
		__atomic_fetch_add(&d->counts.pages_dup, 1, __ATOMIC_RELAXED);
	return false;
}

/* Page i, claimed from word old, is in place: the fault it answers is over. */
void dest_installed(struct mig_dest *d, uint64_t i, uint64_t old, uint64_t now)
{
	if (ram_word_state(old) == RAM_PAGE_REQUESTED) {
		mig_stamp(d->stamps, i, MIG_STEP_INSTALLED, now);
		uint64_t lat = now - ram_word_time_ns(d->ram, old);
		mig_lock(&d->lat_lock, MIG_RANK_DEST_LAT);
		mig_lat_add(&d->lat, lat);
		mig_unlock(&d->lat_lock);
	}
}

/* After installs: COMPLETE if those were the last pages. */
void dest_after_installs(struct mig_dest *d)
{
	if (ram_nr_present(d->ram) >= d->nr_pages)
		dest_try_complete(d);
}

/*
 * Pages first .. first + n - 1, every one claimed by the caller (the words
 * the claims replaced in old[]), installed from data (page aligned, n
 * pages; NULL: zero pages; zeros: those of them filled with zeros, or
 * NULL) with one call into the kernel: the one install path of every
 * arrival.  On failure the claims are given back and the migration fails:
 * -errno.
 */
int dest_install_run(struct mig_dest *d, uint64_t first, unsigned n, void *data,
		     const uint64_t *zeros, enum ram_arrival by, const uint64_t *old)
{
	int r = ram_install_claimed(d->ram, first, data, n, by, zeros);
	if (r) {
		for (unsigned k = 0; k < n; k++)
			ram_unclaim(d->ram, first + k, old[k]);
		dest_fail(d, "cannot install pages 0x%llx-0x%llx: %s",
			  (unsigned long long)(first * PAGE_SIZE),
			  (unsigned long long)((first + n) * PAGE_SIZE - 1), strerror(-r));
		return r;
	}
	uint64_t now = now_ns();
	for (unsigned k = 0; k < n; k++)
		dest_installed(d, first + k, old[k], now);
	dest_after_installs(d);
	return 0;
}

/* Install staged page i if it still is staged.  0, or -errno (fatal, already reported). */
int dest_install_staged(struct mig_dest *d, uint64_t i)
{
	uint64_t old;
	if (!dest_claim_page(d, i, RAM_BY_PRECOPY, &old))
		return 0;
	void *copy = ram_word_zero(old) ? NULL : d->stage + i * PAGE_SIZE;
	return dest_install_run(d, i, 1, copy, NULL, RAM_BY_PRECOPY, &old);
}

/*
 * Give a chunk of the staging buffer back to the kernel once none of its
 * pages can be read from it any more: every staged page was claimed (by the
 * stager or a fault), and a page still INSTALLING may be being copied from
 * it right now, so wait for those (an install takes microseconds).
 */
#define STAGE_CHUNK 512 /* pages: 2 MiB */

static void release_stage(struct mig_dest *d, uint64_t first, uint64_t n)
{
	for (uint64_t i = first; i < first + n; i++)
		while (ram_word_state(ram_page_word(d->ram, i)) == RAM_PAGE_INSTALLING &&
		       dest_phase(d) != DEST_FAILED && !dest_stopping(d))
			sched_yield();
	madvise(d->stage + first * PAGE_SIZE, n * PAGE_SIZE, MADV_DONTNEED);
}

/*
 * The stager's runs: consecutive staged pages of one kind (zero or not)
 * are claimed together and installed with one call where the back end
 * has one (uffd: one UFFDIO_COPY or UFFDIO_ZEROPAGE); page by page, a TCG
 * node took over 10 s for 32 MiB.  A staged page's zero flag does not change after the
 * switch-over (nothing stages then), so it is read before the claim.
 */
#define STAGE_RUN 64

/* Claim the staged pages from i on (before end) of i's kind: how many. */
static unsigned claim_staged_run(struct mig_dest *d, uint64_t i, uint64_t end, uint64_t *old)
{
	bool zero = ram_word_zero(ram_page_word(d->ram, i));
	unsigned n = 0;
	while (n < STAGE_RUN && i + n < end) {
		uint64_t w = ram_page_word(d->ram, i + n);
		if (ram_word_state(w) != RAM_PAGE_STAGED || ram_word_zero(w) != zero ||
		    !dest_claim_page(d, i + n, RAM_BY_PRECOPY, &old[n]))
			break;
		n++;
	}
	return n;
}

/* Install what is still staged in pages [first, end), a run at a time. */
static void install_staged_chunk(struct mig_dest *d, uint64_t first, uint64_t end)
{
	uint64_t old[STAGE_RUN];
	for (uint64_t i = first; i < end && dest_phase(d) != DEST_FAILED && !dest_stopping(d);) {
		unsigned n = claim_staged_run(d, i, end, old);
		if (!n) {
			i++;
			continue;
		}
		if (d->o.x_stager_delay_us) /* a slow install, for the tests */
			usleep((useconds_t)d->o.x_stager_delay_us * n);
		void *data = ram_word_zero(old[0]) ? NULL : d->stage + i * PAGE_SIZE;
		if (dest_install_run(d, i, n, data, NULL, RAM_BY_PRECOPY, old))
			return; /* the migration failed (reported) */
		i += n;
	}
}

/* Installs what precopy staged, freeing the staging buffer as it goes (RSS ~ RAM). */
void *dest_stager_thread(void *arg)
{
	struct mig_dest *d = arg;
	for (uint64_t c = 0; c < d->nr_pages && dest_phase(d) != DEST_FAILED && !dest_stopping(d);
	     c += STAGE_CHUNK) {
		uint64_t n = d->nr_pages - c < STAGE_CHUNK ? d->nr_pages - c : STAGE_CHUNK;
		install_staged_chunk(d, c, c + n);
		release_stage(d, c, n);
	}
	return NULL;
}
