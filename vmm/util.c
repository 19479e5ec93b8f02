// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/builtin.h"
#include "vmm/util.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void sort_u64(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
}

/* MemTotal + SwapTotal from /proc/meminfo, in bytes; 0 if unknown. */
uint64_t host_ram_limit(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	uint64_t total = 0, kb;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %" SCNu64, &kb) == 1 ||
		    sscanf(line, "SwapTotal: %" SCNu64, &kb) == 1)
			total += kb << 10;
	fclose(f);
	return total;
}

/* Whether a command line asks for help (builtin.h). */
bool builtin_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return true;
	return false;
}
