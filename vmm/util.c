// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/util.h"

int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || *end)
		return -EINVAL;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	uint64_t v, mul = 1;
	char *end;

	if (!s || !*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 0:
		break;
	case 'k':
	case 'K':
		mul = 1ULL << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1ULL << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1ULL << 30;
		end++;
		break;
	default:
		return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	if (*end || (v && mul > UINT64_MAX / v))
		return -EINVAL;
	*out = v * mul;
	return 0;
}

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
