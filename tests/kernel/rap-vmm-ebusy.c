// SPDX-License-Identifier: GPL-2.0
/*
 * rap-vmm-ebusy: the VMM's userfault back end installs a page that
 * remap_anon_pages() refuses to move (EBUSY) by copying it first.
 *
 * A staging page the kernel will not move (here: shared with a fork child;
 * on a kernel with swap also a swapped-out or swap-cache page, on any
 * kernel a KSM-merged or pinned one) must still end up in guest RAM: a
 * migration never fails on it.  The child keeps its own view of the page.
 */
#include <sys/wait.h>

#include "kt.h"
#include "ram/backend.h"
#include "ram/ram.h"

int main(void)
{
	const struct ram_backend_ops *ops;
	long ps = page_size();
	struct ram *ram;
	uint8_t *staging;
	int pipefd[2], status, r;
	pid_t pid;
	char c;

	kt_name = "rap-vmm-ebusy";
	if (ram_backend_find("userfault", &ops) < 0)
		kt_skip("no userfault back end (not the patched kernel?)");
	if (ram_create(16 * ps, ops, &ram) < 0)
		kt_fatal("ram_create");

	staging = anon_map(ps);
	fill_pattern(staging, ps, 12);
	if (pipe(pipefd))
		kt_fatal("pipe");
	pid = fork();
	if (pid < 0)
		kt_fatal("fork");
	if (pid == 0) {
		close(pipefd[1]);
		(void)!read(pipefd[0], &c, 1);
		_exit(has_pattern(staging, ps, 12) ? 0 : 1);
	}
	close(pipefd[0]);
	errno = 0;
	CHECK(rap(ram_host(ram), staging, ps, 0) == -1 && errno == EBUSY,
	      "the staging page is not movable (shared with a child)");
	r = ram_install(ram, 0, staging);
	CHECK(r == 0, "ram_install of the unmovable page succeeds (%d)", r);
	CHECK(ram_present(ram, 0) && has_pattern(ram_host(ram), ps, 12),
	      "guest RAM has its contents");
	close(pipefd[1]);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the child still sees its data");

	/* A movable page still moves (zero copy): the staging buffer is empty after. */
	fill_pattern(staging, ps, 13);
	CHECK(ram_install(ram, 1, staging) == 0 && has_pattern(ram_host(ram) + ps, ps, 13),
	      "an exclusive page installs");
	CHECK(resident(staging) == 0, "and was moved, not copied");
	ram_destroy(ram);
	return kt_done();
}
