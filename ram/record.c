// SPDX-License-Identifier: GPL-2.0
/*
 * The page record (ram/record.h): claims move a page between states by
 * compare-and-swap, installs put claimed pages in guest RAM through the
 * back end and mark them PRESENT.  Nothing else writes the record.
 */
#include <errno.h>
#include <sched.h>

#include "internal.h"

uint64_t ram_page_word(const struct ram *ram, uint64_t pg)
{
	return ram_word_load(ram, pg);
}

uint64_t ram_word_time_ns(const struct ram *ram, uint64_t w)
{
	uint64_t rel = w >> RAM_WORD_TIME_SHIFT;

	return rel ? ram->t0 + rel : 0;
}

bool ram_present(const struct ram *ram, uint64_t pg)
{
	return !ram->pages || ram_word_state(ram_page_word(ram, pg)) == RAM_PAGE_PRESENT;
}

uint64_t ram_nr_present(const struct ram *ram)
{
	return atomic_load(&ram->nr_present);
}

uint64_t ram_nr_requested(const struct ram *ram)
{
	return atomic_load(&ram->nr_requested);
}

/*
 * A word went from `was` to `now`: the count of REQUESTED pages follows,
 * in the same thread as the change, so it never counts a page twice nor
 * misses one however claims race (a push taking a page between a fault's
 * claim and the fault thread's next look at it).
 */
static void count_requested(struct ram *ram, uint64_t was, uint64_t now)
{
	bool before = ram_word_state(was) == RAM_PAGE_REQUESTED;
	bool after = ram_word_state(now) == RAM_PAGE_REQUESTED;

	if (before != after)
		atomic_fetch_add(&ram->nr_requested, after ? 1 : (uint64_t)-1);
}

_Static_assert(RAM_BY_KINDS <= 8, "a word's arrival has 3 bits");

static const char *const arrival_names[RAM_BY_KINDS] = {
	[RAM_BY_NONE] = "none",	      [RAM_BY_DEMAND] = "demand", [RAM_BY_PUSH] = "pushed",
	[RAM_BY_PRECOPY] = "precopy", [RAM_BY_SOURCE] = "source",
};

const char *ram_arrival_name(enum ram_arrival by)
{
	return (unsigned)by < RAM_BY_KINDS ? arrival_names[by] : "?";
}

static uint64_t make_word(const struct ram *ram, enum ram_page_state st, enum ram_arrival by,
			  bool zero)
{
	uint64_t rel = now_ns() - ram->t0;

	return (uint64_t)st | (uint64_t)by << RAM_WORD_BY_SHIFT | (zero ? RAM_WORD_ZERO : 0) |
	       rel << RAM_WORD_TIME_SHIFT;
}

bool ram_claim(struct ram *ram, uint64_t pg, unsigned from, enum ram_page_state to,
	       enum ram_arrival by, bool zero, uint64_t *old)
{
	uint64_t w = ram_page_word(ram, pg);

	for (;;) {
		uint64_t nw;

		if (!(from & RAM_FROM(ram_word_state(w)))) {
			*old = w;
			return false;
		}
		nw = make_word(ram, to, by != RAM_BY_NONE ? by : ram_word_by(w), zero);
		if (atomic_compare_exchange_weak_explicit(
			&ram->pages[pg], &w, nw, memory_order_acq_rel, memory_order_acquire)) {
			count_requested(ram, w, nw);
			*old = w;
			return true;
		}
	}
}

void ram_unclaim(struct ram *ram, uint64_t pg, uint64_t old)
{
	uint64_t claimed = atomic_exchange_explicit(&ram->pages[pg], old, memory_order_acq_rel);

	count_requested(ram, claimed, old);
}

/* The back end's call for one page, retried while the address space changes. */
static int install_one(struct ram *ram, uint64_t off, void *page)
{
	for (;;) {
		int r =
		    page ? ram->ops->install(ram, off, page) : ram->ops->zero(ram, off, PAGE_SIZE);

		if (r != -EAGAIN)
			return r;
		sched_yield();
	}
}

/*
 * The back end's calls for n claimed pages at off.  "Already there" is the
 * kernel's word for a page the record says is not: counted (it should
 * never happen), woken, and taken as installed.
 */
static int install_pages(struct ram *ram, uint64_t off, void *pages, uint64_t n)
{
	bool run = pages ? ram->ops->install_run != NULL : ram->ops->zero_run != NULL;
	int r;

	if (run && n > 1) {
		atomic_fetch_add(&ram->st.install_calls, 1);
		r = pages ? ram->ops->install_run(ram, off, pages, n * PAGE_SIZE)
			  : ram->ops->zero_run(ram, off, n * PAGE_SIZE);
		if (r > 0)
			atomic_fetch_add(&ram->st.eexist, (uint64_t)r);
		return r < 0 ? r : 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t o = off + i * PAGE_SIZE;

		atomic_fetch_add(&ram->st.install_calls, 1);
		r = install_one(ram, o, pages ? (char *)pages + i * PAGE_SIZE : NULL);
		if (r == -EEXIST) {
			atomic_fetch_add(&ram->st.eexist, 1);
			r = ram->ops->wake(ram, o, PAGE_SIZE);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* Pages pg .. pg + n - 1 PRESENT, arrived by, zero as !pages or as their bit in zeros: how many zero. */
static uint64_t mark_present(struct ram *ram, uint64_t pg, uint64_t n, enum ram_arrival by,
			     bool all_zero, const uint64_t *zeros)
{
	uint64_t w = make_word(ram, RAM_PAGE_PRESENT, by, all_zero), nr_zero = 0;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t wi = w;

		if (zeros && (zeros[i / 64] >> (i % 64) & 1))
			wi |= RAM_WORD_ZERO;
		nr_zero += ram_word_zero(wi);
		atomic_store_explicit(&ram->pages[pg + i], wi, memory_order_release);
	}
	return nr_zero;
}

int ram_install_claimed(struct ram *ram, uint64_t pg, void *pages, uint64_t n, enum ram_arrival by,
			const uint64_t *zeros)
{
	uint64_t nr_zero;
	int r;

	if (pg >= ram->nr_pages || n > ram->nr_pages - pg || !ram->ops)
		return -EINVAL;
	r = install_pages(ram, pg << PAGE_SHIFT, pages, n);
	if (r < 0)
		return r;
	nr_zero = mark_present(ram, pg, n, by, !pages, pages ? zeros : NULL);
	ram_blocktime_end(ram, pg, n);
	ram_waiters_end(ram, pg, n);
	atomic_fetch_add(&ram->nr_present, n);
	atomic_fetch_add(&ram->st.installed, n - nr_zero);
	atomic_fetch_add(&ram->st.zeroed, nr_zero);
	return 0;
}

int ram_install(struct ram *ram, uint64_t pg, void *page)
{
	unsigned from = RAM_FROM(RAM_PAGE_MISSING) | RAM_FROM(RAM_PAGE_REQUESTED);
	uint64_t old;
	int r;

	if (pg >= ram->nr_pages)
		return -EINVAL;
	if (!ram->ops)
		return 0;
	if (!ram_claim(ram, pg, from, RAM_PAGE_INSTALLING, RAM_BY_SOURCE, !page, &old)) {
		atomic_fetch_add(&ram->st.dups, 1);
		return 0;
	}
	r = ram_install_claimed(ram, pg, page, 1, RAM_BY_SOURCE, NULL);
	if (r < 0)
		ram_unclaim(ram, pg, old);
	return r;
}

int ram_install_zero(struct ram *ram, uint64_t pg)
{
	return ram_install(ram, pg, NULL);
}

void ram_get_stats(const struct ram *ram, struct ram_stats *st)
{
	st->faults = atomic_load(&ram->st.faults);
	st->requests = atomic_load(&ram->st.requests);
	st->dup_faults = atomic_load(&ram->st.dup_faults);
	st->late_faults = atomic_load(&ram->st.late_faults);
	st->installed = atomic_load(&ram->st.installed);
	st->zeroed = atomic_load(&ram->st.zeroed);
	st->dups = atomic_load(&ram->st.dups);
	st->eexist = atomic_load(&ram->st.eexist);
	st->own_thread = atomic_load(&ram->st.own_thread);
	st->install_calls = atomic_load(&ram->st.install_calls);
}
