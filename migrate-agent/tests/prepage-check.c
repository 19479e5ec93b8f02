// SPDX-License-Identifier: GPL-2.0
/*
 * mig-prepage-check: the pre-paging policy (migrate-agent/source-prepage.h)
 * on made-up fault sequences, without a migration: the fixed window, a
 * sequential scan growing it, a stride (either way) walked along, random
 * faults shrinking it, windows past either end.  Exit 0 when all hold;
 * tests/host/migrate-prepage.sh runs it.
 */
#include <stdio.h>

#include "../source-prepage.h"

#define NR (1ull << 20) /* 4 GiB of pages */

static int failed;

static void expect(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAIL", what);
	failed |= !ok;
}

static void check_fixed(void)
{
	struct src_prepage p;
	struct src_window w = { 0 };
	int same = 1;

	src_prepage_init(&p, 32, 0);
	for (uint64_t k = 0; k < 50; k++) {
		w = src_prepage_fault(&p, k * 100, 0, NR);
		same &= w.start == k * 100 + 1 && w.step == 1 && w.count == 32;
	}
	expect(same, "fixed: always the 32 pages after the fault");
}

/* A scan faulting just past each window: the window doubles to the cap. */
static void check_seq(void)
{
	struct src_prepage p;
	struct src_window w;
	uint64_t page = 5000;

	src_prepage_init(&p, 32, 1);
	w = src_prepage_fault(&p, page, 0, NR);
	for (int k = 0; k < 12; k++) {
		page = w.start + w.count; /* the first page past the window */
		w = src_prepage_fault(&p, page, 0, NR);
	}
	expect(w.step == 1 && w.count == PREPAGE_MAX && w.start == page + 1,
	       "sequential: the window grows to PREPAGE_MAX");
	expect(p.followed == 12, "sequential: every later fault counted as followed");
	expect(p.passed > 12 * 32, "sequential: the windows' pages counted as passed");
}

static void check_stride(int64_t d)
{
	struct src_prepage p;
	struct src_window w = { 0 };
	uint64_t page = 500000;
	char what[80];

	src_prepage_init(&p, 32, 1);
	for (int k = 0; k < 3; k++, page += (uint64_t)d)
		w = src_prepage_fault(&p, page, 0, NR);
	page -= (uint64_t)d;
	snprintf(what, sizeof(what), "stride %lld: the window walks it", (long long)d);
	expect(w.step == d && w.start == page + (uint64_t)d && w.count >= 4, what);
	/* A fault further along the stride: followed, the window grows. */
	uint32_t before = w.count;
	w = src_prepage_fault(&p, page + 5 * (uint64_t)d, 0, NR);
	snprintf(what, sizeof(what), "stride %lld: followed, grown", (long long)d);
	expect(w.step == d && w.count > before, what);
}

static void check_random(void)
{
	struct src_prepage p;
	struct src_window w = { 0 };
	uint64_t x = 12345;

	src_prepage_init(&p, 32, 1);
	for (int k = 0; k < 40; k++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		w = src_prepage_fault(&p, (x >> 20) % NR, 0, NR);
	}
	expect(w.count == 4 && w.step == 1, "random: the window shrinks to base / 8");
	expect(p.passed < 40, "random: (almost) nothing passed");
}

static void check_ends(void)
{
	struct src_prepage p;
	struct src_window w;

	src_prepage_init(&p, 32, 1);
	w = src_prepage_fault(&p, NR - 1, 0, NR);
	expect(w.count == 0, "a fault on the last page: no window");
	src_prepage_init(&p, 32, 1);
	src_prepage_fault(&p, 20, 0, NR);
	src_prepage_fault(&p, 10, 0, NR);
	w = src_prepage_fault(&p, 0, 0, NR);
	expect(w.count == 0, "a downward stride at page 0: no window (no wrap)");
}

int main(void)
{
	check_fixed();
	check_seq();
	check_stride(16);
	check_stride(-7);
	check_random();
	check_ends();
	return failed;
}
