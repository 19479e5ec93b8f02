// SPDX-License-Identifier: GPL-2.0
/*
 * Precopy at the source, on the main thread before the switch-over: rounds
 * of pages on the bulk channel while the VM runs (the dirty log says what
 * to resend), for as long as they converge; after the pause,
 * PRECOPY_DIRTY: which staged pages the destination must drop.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "source.h"

/*
 * Precopy stops when it stops converging.  Round 1 sends every page; each
 * later round resends what the guest dirtied meanwhile, but only while
 * that pays: a round goes out only if its dirty set is at most
 * PRECOPY_CONVERGE_PCT percent of what the round before sent (a guest that
 * dirties as fast as we send, like the random workload, would have every
 * round resend nearly everything: 3x the bytes for no fewer faults), and
 * more than PRECOPY_DONE_PAGES pages (fewer are cheaper as demand or pushed
 * pages than as one more round).  --precopy-rounds is the most rounds.
 * The dirty pages of the round not sent are carried into the switch-over's
 * PRECOPY_DIRTY (the dirty log forgets what it reported), so that the
 * destination drops their stale staged copies.
 */
#define PRECOPY_CONVERGE_PCT 50
#define PRECOPY_DONE_PAGES   64

static uint64_t count_bits(const uint64_t *map, size_t words)
{
	uint64_t n = 0;
	for (size_t w = 0; w < words; w++)
		n += (uint64_t)__builtin_popcountll(map[w]);
	return n;
}

/* Whether precopy must end now: a cancel, or the operator's start of postcopy. */
static int precopy_cut(struct src *s)
{
	return src_cancel_asked(s) || ASKED(s, start_postcopy);
}

/*
 * Send a round's pages (every page in round 0, else those in dirty); their
 * count.  A round cut short (precopy_cut()) leaves *upto at the first page
 * it did not consider; otherwise *upto is nr_pages.
 */
static uint64_t precopy_round(struct pusher *ps, int round, const uint64_t *dirty, int *r,
			      uint64_t *upto)
{
	struct src *s = ps->s;
	uint64_t n = 0, i;
	uint64_t left = round ? count_bits(dirty, (s->nr_pages + 63) / 64) : s->nr_pages;

	__atomic_store_n(&s->precopy.precopy_left, left, __ATOMIC_RELAXED);
	for (i = 0; i < s->nr_pages && !*r; i++) {
		if ((i & 63) == 0)
			src_publish(s);
		/* At every page: under a small cap a page may take seconds to go. */
		if (precopy_cut(s))
			break;
		if ((i & 1023) == 0)
			src_progress(s, "precopy");
		if (round > 0 && !bit_test(dirty, i))
			continue;
		*r = src_push_page(ps, i, MIG_PAGEF_PRECOPY);
		n++;
		__atomic_store_n(&s->precopy.precopy_left, left - n, __ATOMIC_RELAXED);
	}
	*upto = i;
	return n;
}

/*
 * Whether round (> 0), with d pages dirty after the previous round sent
 * sent_before, goes out: see PRECOPY_CONVERGE_PCT.  Under manual_postcopy
 * every round goes out (pausing up to 50 ms when little is dirty, or until
 * the operator's next request: migrate-start-postcopy ends the pause),
 * until the operator starts postcopy.
 */
static int round_pays(struct src *s, uint64_t d, uint64_t sent_before)
{
	if (ASKED(s, manual_postcopy)) {
		struct mig_ctl *c = s->o->ctl;
		uint32_t seen = src_ctl_seen(c);

		if (d <= PRECOPY_DONE_PAGES && !ASKED(s, start_postcopy))
			src_ctl_wait(c, seen, 50);
		return 1;
	}
	return d > PRECOPY_DONE_PAGES && d * 100 <= sent_before * PRECOPY_CONVERGE_PCT;
}

/* The dirty log since the last round into dirty; 0 or -errno with err. */
static int fetch_dirty(struct src *s, uint64_t *dirty, size_t words, uint64_t *t_prev, char *err,
		       size_t errlen)
{
	uint64_t now, d;
	int r;

	memset(dirty, 0, words * 8);
	r = s->vm->dirty_fetch(s->vm->ctx, dirty);
	if (r) {
		snprintf(err, errlen, "precopy: dirty log: %s", strerror(-r));
		return r;
	}
	now = now_ns();
	d = count_bits(dirty, words);
	if (s->o->ctl && now > *t_prev)
		src_ctl_put(&s->o->ctl->dirty_pages_rate,
			    (uint64_t)((double)d * 1e9 / (double)(now - *t_prev)));
	*t_prev = now;
	return 0;
}

/* Keep the dirty pages of a round not sent (from page upto on) for PRECOPY_DIRTY. */
static void carry_dirty(struct src *s, uint64_t *dirty, uint64_t upto)
{
	for (uint64_t i = 0; i < upto && i < s->nr_pages; i++)
		bit_clear(dirty, i);
	s->precopy.precopy_carry = dirty;
}

/*
 * A round went out (sent pages, up to page upto): its figures.  A later
 * round cut short carries the rest of its dirty set into PRECOPY_DIRTY:
 * *dirty is handed over and becomes NULL, which ends precopy.
 */
static void round_sent(struct src *s, int round, uint64_t sent, uint64_t upto, uint64_t **dirty)
{
	s->precopy.precopy_rounds_done = round + 1;
	if (round == 0) {
		s->counts.pages_precopy += sent;
		s->precopy.precopy_upto = upto;
	} else {
		s->counts.pages_precopy_resent += sent;
		if (upto < s->nr_pages) { /* cut short: the rest stays dirty */
			carry_dirty(s, *dirty, upto);
			*dirty = NULL;
		}
	}
	if (s->o->progress)
		mig_progress("migrate: precopy round %d: %llu pages", round + 1,
			     (unsigned long long)sent);
}

/*
 * Precopy's rounds on the bulk channel while the VM runs (dirty logging
 * on: it stays on until the switch-over or src_free()).  0, or -errno with
 * err: the migration fails and the VM goes on here.
 */
int src_precopy(struct src *s, char *err, size_t errlen)
{
	size_t words = (s->nr_pages + 63) / 64;
	uint64_t *dirty = calloc(words, 8);
	uint64_t sent = 0, upto, t_round = now_ns();
	struct pusher ps;
	int r = src_pusher_init(&ps, s);
	if (!dirty || r) {
		free(dirty);
		snprintf(err, errlen, "precopy: out of memory");
		return -ENOMEM;
	}
	r = s->vm->dirty_start(s->vm->ctx);
	if (r) {
		snprintf(err, errlen, "precopy: cannot start dirty logging: %s", strerror(-r));
		goto out;
	}
	s->precopy.precopy_upto = 0;
	for (int round = 0; (round < s->o->precopy_rounds || ASKED(s, manual_postcopy)) && !r;
	     round++) {
		if (precopy_cut(s))
			break;
		if (round > 0) {
			r = fetch_dirty(s, dirty, words, &t_round, err, errlen);
			if (r)
				break;
			if (!round_pays(s, count_bits(dirty, words), sent)) {
				carry_dirty(s, dirty, 0);
				dirty = NULL;
				break;
			}
		}
		if (s->o->ctl && s->o->ctl->pass_started) /* QEMU's MIGRATION_PASS */
			s->o->ctl->pass_started(s->o->ctl->arg, (uint64_t)round + 1);
		sent = precopy_round(&ps, round, dirty, &r, &upto);
		round_sent(s, round, sent, upto, &dirty);
		if (r)
			snprintf(err, errlen, "precopy: bulk channel send failed");
		if (!dirty)
			break;
	}
	if (!r)
		r = src_drain(&ps);
	if (r && !err[0])
		snprintf(err, errlen, "precopy: bulk channel send failed");
out:
	src_pusher_free(&ps);
	free(dirty);
	return r;
}

/* After the pause: which precopied pages were written since last sent. */
int src_precopy_finish(struct src *s, char *err, size_t errlen)
{
	size_t words = (s->nr_pages + 63) / 64;
	size_t bytes = (s->nr_pages + 7) / 8;
	uint64_t *dirty = calloc(words, 8);
	if (!dirty)
		return -ENOMEM;
	if (s->precopy.precopy_carry) /* dirtied in a round that was not sent */
		memcpy(dirty, s->precopy.precopy_carry, words * 8);
	int r = s->vm->dirty_fetch(s->vm->ctx, dirty);
	if (r) {
		snprintf(err, errlen, "precopy: final dirty log: %s", strerror(-r));
		free(dirty);
		return r;
	}
	/* Pages round 1 never reached (cut short) count as dirty: not staged there. */
	for (uint64_t i = 0; i < s->nr_pages; i++) {
		if (i >= s->precopy.precopy_upto)
			bit_test_and_set(dirty, i);
		else if (!bit_test(dirty, i)) {
			bit_test_and_set(s->sent, i);
			s->counts.sent_count++;
		}
	}
	struct mig_dirty d = { .nr_pages = s->nr_pages };
	r = mig_conn_send(s->links.bulk[0], MIG_MSG_PRECOPY_DIRTY, &d, sizeof(d), dirty, bytes);
	free(dirty);
	if (r)
		snprintf(err, errlen, "bulk channel: cannot send PRECOPY_DIRTY: %s", strerror(-r));
	return r;
}
