/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The migration's numeric tunables, one table for every way of setting
 * them: `vmm run` flags, `migrate-agent migrate` flags and the QMP
 * parameters of migrate-set-parameters.  One range and one message each,
 * whoever asks.
 */
#ifndef MIGRATE_PARAMS_H
#define MIGRATE_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mig_param {
	MIG_P_PRECOPY_ROUNDS,
	MIG_P_COMPRESS,
	MIG_P_RECOVER_MS,
	MIG_P_MAX_BANDWIDTH,
	MIG_P_POSTCOPY_MANUAL,
	MIG_P_CHANNELS,
	MIG_P_NR
};

struct mig_param_def {
	const char *flag; /* "--precopy-rounds": vmm run and migrate-agent */
	const char *key;  /* "x-precopy-rounds": QMP (QEMU's own name where it has one) */
	uint64_t min, max;
	bool is_bool; /* a flag without a value; a bool (or 0/1) in QMP */
};

extern const struct mig_param_def mig_param_defs[MIG_P_NR];

/* A parameter's index by flag or by QMP key, or -1. */
int mig_param_by_flag(const char *flag);
int mig_param_by_key(const char *key);

/*
 * Text v as parameter p (named name in the message): 0 with *out, or
 * -ERANGE with "NAME: 'V' is not a number from MIN to MAX" in err.
 */
int mig_param_parse(enum mig_param p, const char *name, const char *v, uint64_t *out, char *err,
		    size_t errlen);

/* Whether v lies in parameter p's range (the caller words the refusal). */
bool mig_param_in_range(enum mig_param p, uint64_t v);

#endif /* MIGRATE_PARAMS_H */
