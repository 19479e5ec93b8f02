/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The migration agent inside `vmm run`: the few calls the run command makes
 * (docs/migration.md).  Options:
 *   --incoming URI|defer     destination: no image; RAM and state come from a
 *                            source; the VM starts at once with RAM missing
 *                            (defer: the URI comes by QMP migrate-incoming)
 *   --control PATH           the QMP socket: at a source `migrate-agent
 *                            migrate --vmm PATH --to ...` starts a migration;
 *                            at a destination, the VM's once it runs
 *   --migrate-to URI         source: migrate by itself ...
 *   --migrate-after MS       ... this long after the vCPUs started
 *   --precopy-rounds N       source: N precopy passes before the switch-over
 *   --compress               source: zstd for pushed pages
 *   --max-bandwidth B        source: pushed pages at most B bytes/s
 *   --postcopy-manual        source, with --control: precopy until
 *                            migrate-start-postcopy
 *   --migrate-metrics FILE   either side: JSON summary
 *   --recover-ms MS          either side: how long a broken link may stay down
 *   --tls-creds DIR          either side: TLS with x509 credentials (QEMU layout)
 *   --tls-psk FILE           either side: TLS with a pre-shared key file
 *   --tls-hostname NAME      source: the name the destination's certificate
 *                            must carry (default: the address's host)
 *                            (also the defaults of control-socket requests)
 * Run command order: migrate_parse_opt() for each argument;
 * migrate_prepare() after the VM exists (destination: blocks until the
 * state arrived and is loaded); vm_start(); migrate_started();
 * runner_loop(); migrate_finish() before vm_destroy().
 */
#ifndef VMM_MIGRATE_H
#define VMM_MIGRATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "migrate/params.h"

struct vm;
struct vm_control;

struct migrate_vmm_opts {
	const char *incoming, *control, *migrate_to, *metrics;
	const char *tls_creds, *tls_psk, *tls_hostname;
	uint64_t migrate_after_ms;
	uint64_t param[MIG_P_NR];  /* migrate/params.h: --precopy-rounds, --compress, ... */
	bool busy_poll;		   /* destination: the fault thread spins (vmm run --busy-poll) */
	bool quit;		   /* destination: QMP quit ended migrate_prepare()'s wait */
	struct migrate_glue *glue; /* the migration's own state, from migrate_prepare() */
};

/*
 * One argument at argv[*i]: 1 if taken (advancing *i past its value), 0 if
 * not a migration option, -1 after printing a message about a bad value.
 */
int migrate_parse_opt(int argc, char **argv, int *i, struct migrate_vmm_opts *o);
/*
 * The flags taken together (URIs, combinations): 0, or -EINVAL after a
 * message; a usage error, checked before the VM is made.  The files they
 * name are read later, by migrate_prepare().
 */
int migrate_check_opts(const struct migrate_vmm_opts *o);
/* The migration options' usage lines, for vmm run --help: every flag migrate_parse_opt() takes. */
void migrate_usage(FILE *f);

/* True for a destination: RAM must be lazy and no image is loaded. */
static inline bool migrate_is_incoming(const struct migrate_vmm_opts *o)
{
	return o->incoming != NULL;
}

/*
 * After vm_create(), before vm_start().  Destination: listen, start the
 * fault thread with the migration as page source, receive and load the
 * state (blocks until a source came).  Source: nothing yet.  0, or -errno
 * after printing a message; with o->quit set when QMP quit ended a
 * destination's wait (then migrate_finish() sends its reply and closes the
 * control socket).
 */
int migrate_prepare(struct vm *vm, struct migrate_vmm_opts *o);

/*
 * Right after vm_start().  Destination: the vCPUs run (tells the source,
 * watches the migration: on failure it prints why and exits the process,
 * so the VM never runs on with missing memory).  Source: opens the control
 * socket or arms --migrate-after.  0, or -errno after a message.
 */
int migrate_started(struct vm *vm, struct migrate_vmm_opts *o);

/*
 * The VM's run state with the migration's say on it (vmm/vm-control.h),
 * from migrate_prepare() until migrate_finish(): runner_loop()'s save asks
 * it.  NULL before migrate_prepare() made it.
 */
struct vm_control *migrate_vm_control(struct migrate_vmm_opts *o);

/*
 * After runner_loop(), before vm_destroy().  Destination: waits until every
 * page arrived (the source may exit only then), writes the metrics.
 * Returns 0, or VMM exit status 1 if the migration failed.
 */
int migrate_finish(struct vm *vm, struct migrate_vmm_opts *o);

#endif /* VMM_MIGRATE_H */
