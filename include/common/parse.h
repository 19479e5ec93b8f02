/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one number parser for values a person or a request gives: flags of
 * `vmm run` and `migrate-agent`, keys of a control request.  No atoi(): a
 * value out of range, with a sign, blanks or trailing text is refused
 * whole, never truncated.
 */
#ifndef COMMON_PARSE_H
#define COMMON_PARSE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Limits shared by every way of asking for a migration. */
#define PARSE_PRECOPY_MAX    100u      /* precopy passes */
#define PARSE_RECOVER_MS_MAX 3600000u  /* how long a cut link may stay cut */
#define PARSE_AFTER_MS_MAX   86400000u /* --migrate-after */

/* @v as a decimal number in [@min, @max] into *@out: 0, or -ERANGE. */
static inline int parse_u64(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long n;
	char *end;

	if (!v || *v < '0' || *v > '9')
		return -ERANGE;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || n < min || n > max)
		return -ERANGE;
	*out = n;
	return 0;
}

/*
 * A size in bytes: decimal digits, then optionally k, M or G (any case,
 * powers of 1024) and an optional "i", "iB" or "B": "64M", "1GiB", "4096".
 * 0, or -EINVAL on anything else (overflow too).  common/parse.c.
 */
int parse_size(const char *s, uint64_t *out);

#endif
