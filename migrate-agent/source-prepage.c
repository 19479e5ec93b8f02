// SPDX-License-Identifier: GPL-2.0
/*
 * Pre-paging windows from the fault history (source-prepage.h says the
 * policy).  Pure arithmetic on the history: the caller holds s->hint.lock.
 */
#include "source-prepage.h"

void src_prepage_init(struct src_prepage *p, uint32_t base, int adaptive)
{
	*p = (struct src_prepage){ .base = base, .adaptive = adaptive, .win = base };
	/* Random faults keep a few pages: neighbours are often touched together. */
	p->min = base / 8 ? base / 8 : 1;
}

/*
 * 1 + page's index on window w's path, when it lies on it or within
 * `extra` more steps past its end (the accessor went the way the window
 * guessed); 0 when not.
 */
static int64_t on_path(const struct src_window *w, uint64_t page, uint32_t extra)
{
	int64_t off = (int64_t)(page - w->start);
	if (!w->count || !w->step || off % w->step)
		return 0;
	int64_t k = off / w->step;
	return k >= 0 && k < (int64_t)w->count + extra ? k + 1 : 0;
}

static uint32_t grow(const struct src_prepage *p)
{
	uint64_t n = 2ull * p->win;
	return n > PREPAGE_MAX ? PREPAGE_MAX : (uint32_t)n;
}

static uint32_t shrink(const struct src_prepage *p)
{
	return p->win / 2 > p->min ? p->win / 2 : p->min;
}

/*
 * The adaptive step: the window's direction and length for a fault at
 * page, from the last window and the last distance between faults.
 */
static struct src_window adapt(struct src_prepage *p, uint64_t page, int followed)
{
	int64_t d = (int64_t)(page - p->last);
	int64_t step = 1;

	if (!p->have_last) /* the first fault: nothing to adapt to yet */
		return (struct src_window){ .start = page + 1, .step = 1, .count = p->win };

	/*
	 * A stride: the last three faults d apart, d within the last window
	 * (further, a scan that outran a step-1 window looks the same).
	 */
	uint64_t ad = d < 0 ? (uint64_t)-d : (uint64_t)d;
	if (p->have_last && d == p->dist && ad > 1 && (p->w.step == d || ad <= p->w.count)) {
		p->strided++;
		if (followed)
			p->win = grow(p);
		step = d;
	} else if (followed) {
		p->win = grow(p);
		step = p->w.step;
	} else {
		if (p->win > p->min)
			p->shrunk++;
		p->win = shrink(p);
	}
	p->dist = d;
	return (struct src_window){ .start = page + (uint64_t)step, .step = step, .count = p->win };
}

struct src_window src_prepage_fault(struct src_prepage *p, uint64_t page, int sent,
				    uint64_t nr_pages)
{
	struct src_window w = { .start = page + 1, .step = 1, .count = p->base };
	int64_t at = p->windows ? on_path(&p->w, page, p->base) : 0;
	int followed = at > 0;

	/* Counted under either policy, so that the two compare. */
	p->followed += followed;
	p->late += followed && sent; /* pre-paged, but the push was not there in time */
	/* The window's pages before this fault were read without one. */
	if (followed)
		p->passed += (uint64_t)(at - 1 < p->w.count ? at - 1 : p->w.count);
	if (p->adaptive)
		w = adapt(p, page, followed);
	p->have_last = 1;
	p->last = page;
	if (w.start >= nr_pages) /* past either end (a negative step wraps) */
		w.count = 0;
	if (!sent) {
		p->w = w;
		p->windows++;
		if (w.count > p->max_win)
			p->max_win = w.count;
	}
	return w;
}
