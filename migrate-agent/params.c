// SPDX-License-Identifier: GPL-2.0
/* The tunables' table (include/migrate/params.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/parse.h"
#include "migrate/params.h"
#include "migrate/wire.h"

const struct mig_param_def mig_param_defs[MIG_P_NR] = {
	[MIG_P_PRECOPY_ROUNDS] = { "--precopy-rounds", "x-precopy-rounds", 0, PARSE_PRECOPY_MAX },
	[MIG_P_COMPRESS] = { "--compress", "x-compress", 0, 1, true },
	[MIG_P_RECOVER_MS] = { "--recover-ms", "x-recover-ms", 1, PARSE_RECOVER_MS_MAX },
	/* bytes/s; 1 TiB/s is beyond any link, and keeps the pacing arithmetic exact */
	[MIG_P_MAX_BANDWIDTH] = { "--max-bandwidth", "max-bandwidth", 0, 1ull << 40 },
	[MIG_P_POSTCOPY_MANUAL] = { "--postcopy-manual", "x-postcopy-manual", 0, 1, true },
	/* bulk connections, each with its own push thread (not given: 1) */
	[MIG_P_CHANNELS] = { "--channels", "multifd-channels", 1, MIG_MAX_CHANNELS },
};

int mig_param_by_flag(const char *flag)
{
	for (int i = 0; i < MIG_P_NR; i++)
		if (!strcmp(mig_param_defs[i].flag, flag))
			return i;
	return -1;
}

int mig_param_by_key(const char *key)
{
	for (int i = 0; i < MIG_P_NR; i++)
		if (!strcmp(mig_param_defs[i].key, key))
			return i;
	return -1;
}

bool mig_param_in_range(enum mig_param p, uint64_t v)
{
	return v >= mig_param_defs[p].min && v <= mig_param_defs[p].max;
}

int mig_param_parse(enum mig_param p, const char *name, const char *v, uint64_t *out, char *err,
		    size_t errlen)
{
	const struct mig_param_def *d = &mig_param_defs[p];

	if (!parse_u64(v, d->min, d->max, out))
		return 0;
	snprintf(err, errlen, "%s: '%.64s' is not a number from %llu to %llu", name, v,
		 (unsigned long long)d->min, (unsigned long long)d->max);
	return -ERANGE;
}
