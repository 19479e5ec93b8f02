// SPDX-License-Identifier: GPL-2.0
/*
 * crc-cost: what the per-page CRC32C of every PAGE frame costs, against a
 * page copy, on this CPU (docs/migration.md, "Performance steps").
 *
 *   build/bin/mig-crc-cost [MiB] [passes]     (default 256 MiB, 5 passes)
 *
 * Walks a buffer of non-zero pages (cold in cache, as the push reads guest
 * RAM) and prints ns per 4 KiB page, the best of the passes, for: the
 * CRC32C the agent uses (SSE4.2 where the CPU has it), the portable table
 * CRC32C, and memcpy of the page into a 256 KiB send buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "migrate/net.h"
#include "migrate/wire.h"

#define PAGE 4096u

static volatile uint32_t sink;

static double per_page_ns(int what, uint8_t *mem, size_t pages, uint8_t *out)
{
	uint64_t t0 = now_ns();
	uint32_t acc = 0;
	for (size_t i = 0; i < pages; i++) {
		const uint8_t *p = mem + i * PAGE;
		if (what == 0)
			acc ^= crc32c(0, p, PAGE);
		else if (what == 1)
			acc ^= crc32c_portable(0, p, PAGE);
		else
			memcpy(out + (i % 64) * PAGE, p, PAGE);
	}
	sink = acc;
	return (double)(now_ns() - t0) / (double)pages;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
	int passes = argc > 2 ? atoi(argv[2]) : 5;
	size_t pages = (mib << 20) / PAGE;
	if (!pages || passes < 1) {
		fprintf(stderr, "usage: mig-crc-cost [MiB] [passes]\n");
		return 2;
	}
	uint8_t *mem =
	    mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *out = malloc(64 * PAGE);
	if (mem == MAP_FAILED || !out) {
		perror("mig-crc-cost: memory");
		return 1;
	}
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < pages * PAGE / 8; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(mem + i * 8, &x, 8);
	}
	static const char *const names[] = { "crc32c (agent)", "crc32c (portable)",
					     "memcpy (one copy)" };
	for (int w = 0; w < 3; w++) {
		double best = 0;
		for (int k = 0; k < passes; k++) {
			double ns = per_page_ns(w, mem, pages, out);
			if (!k || ns < best)
				best = ns;
		}
		printf("%-18s %7.1f ns per page, %6.2f GiB/s\n", names[w], best,
		       PAGE / best * 1e9 / (1u << 30));
	}
	return 0;
}
