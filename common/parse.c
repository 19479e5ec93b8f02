// SPDX-License-Identifier: GPL-2.0
/* Sizes a person gives (include/common/parse.h). */
#include <errno.h>
#include <stdlib.h>

#include "common/parse.h"

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
