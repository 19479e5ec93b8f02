// SPDX-License-Identifier: GPL-2.0
/*
 * ram-ebusy BACKEND: a moving RAM back end installs a page the kernel
 * refuses to move (EBUSY) by copying it.  BACKEND is userfault
 * (remap_anon_pages(), the patched kernel: in a node) or uffd-move
 * (UFFDIO_MOVE, Linux 6.8 and later: on the host).
 *
 * A staging page the kernel will not move (here: shared with a fork child;
 * on a kernel with swap also a swapped-out or swap-cache page, on any
 * kernel a KSM-merged or pinned one) must still end up in guest RAM: a
 * migration never fails on it.  Both paths are attacked: one page
 * (ram_install()) and a page inside a run of four (ram_install_claimed(),
 * one call for the run).  The child keeps its own view of its pages.
 */
#include "kt.h"
#include "ram/backend.h"
#include "ram/ram.h"
#include "ram/record.h"

#define RUN 4

/* One page, shared with a child: ram_install() copies it. */
static void one_page(struct ram *ram, const char *backend)
{
	long ps = page_size();
	uint8_t *staging = anon_map(ps);
	int wfd, r;
	pid_t pid;

	fill_pattern(staging, ps, 12);
	pid = kt_share_with_child(staging, ps, 1, 12, &wfd);
	if (!strcmp(backend, "userfault")) {
		errno = 0;
		CHECK(rap(ram_host(ram), staging, ps, 0) == -1 && errno == EBUSY,
		      "the staging page is not movable (shared with a child)");
	}
	r = ram_install(ram, 0, staging);
	CHECK(r == 0, "ram_install of the unmovable page succeeds (%d)", r);
	CHECK(ram_present(ram, 0) && has_pattern(ram_host(ram), ps, 12),
	      "guest RAM has its contents");
	CHECK(kt_child_kept_view(pid, wfd), "the child still sees its data (one page)");
	munmap(staging, ps);
}

/* A run of RUN pages whose second is shared with a child: one call, every page in. */
static void in_a_run(struct ram *ram)
{
	long ps = page_size();
	uint8_t *staging = anon_map(RUN * ps);
	uint64_t old;
	int wfd, r;
	pid_t pid;

	for (long i = 0; i < RUN; i++)
		fill_pattern(staging + i * ps, ps, (uint8_t)(20 + i));
	pid = kt_share_with_child(staging, ps, RUN, 20, &wfd);
	/* Written again after the fork: all but page 1 are the parent's alone. */
	for (long i = 0; i < RUN; i++)
		if (i != 1)
			fill_pattern(staging + i * ps, ps, (uint8_t)(20 + i));
	for (uint64_t pg = 2; pg < 2 + RUN; pg++)
		CHECK(ram_claim(ram, pg, RAM_FROM(RAM_PAGE_MISSING), RAM_PAGE_INSTALLING,
				RAM_BY_SOURCE, false, &old),
		      "page %lu claimed", (unsigned long)pg);
	r = ram_install_claimed(ram, 2, staging, RUN, RAM_BY_SOURCE, NULL);
	CHECK(r == 0, "a run with an unmovable page installs (%d)", r);
	for (long i = 0; i < RUN; i++)
		CHECK(ram_present(ram, 2 + (uint64_t)i) &&
			  has_pattern(ram_host(ram) + (2 + i) * ps, ps, (uint8_t)(20 + i)),
		      "run page %ld has its contents", i);
	CHECK(kt_child_kept_view(pid, wfd), "the child still sees its data (a run)");
	munmap(staging, RUN * ps);
}

int main(int argc, char **argv)
{
	const char *backend = argc > 1 ? argv[1] : "userfault";
	const struct ram_backend_ops *ops;
	long ps = page_size();
	struct ram *ram;
	uint8_t *staging;
	int r;

	kt_name = "ram-ebusy";
	if (strcmp(backend, "userfault") && strcmp(backend, "uffd-move")) {
		fprintf(stderr, "usage: ram-ebusy [userfault|uffd-move]\n");
		return 2;
	}
	r = ram_backend_find(backend, &ops);
	if (r < 0) {
		fprintf(stderr, "ram-ebusy: the %s back end: %s\n", backend, strerror(-r));
		kt_skip("this kernel lacks the back end");
	}
	if (ram_create(16 * ps, ops, &ram) < 0)
		kt_fatal("ram_create");

	one_page(ram, backend);
	in_a_run(ram);

	/* A movable page still moves (zero copy): the staging buffer is empty after. */
	staging = anon_map(ps);
	fill_pattern(staging, ps, 13);
	CHECK(ram_install(ram, 1, staging) == 0 && has_pattern(ram_host(ram) + ps, ps, 13),
	      "an exclusive page installs");
	CHECK(resident(staging) == 0, "and was moved, not copied");
	ram_destroy(ram);
	return kt_done();
}
