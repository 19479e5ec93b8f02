/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The migration library: what a VMM links to migrate a VM out (source) or
 * in (destination) with postcopy.  The library never touches KVM itself:
 * the VMM hands it callbacks (struct mig_source_vm, struct mig_dest_vm).
 * docs/migration.md describes the whole flow.
 */
#ifndef MIGRATE_MIGRATE_H
#define MIGRATE_MIGRATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "migrate/tls.h"
#include "migrate/wire.h"

/* ---- Options shared by both sides ---- */

struct mig_ctl;
struct ram;
struct ram_source;

struct mig_opts {
	const char *addr;   /* tcp:HOST:PORT: where the destination listens */
	int precopy_rounds; /* source: full passes while the VM runs (0: pure postcopy) */
	int compress;	    /* source: zstd-compress pushed pages when it pays */
	/*
	 * How long a broken link may stay broken (default 10000); the source
	 * re-dials addr meanwhile.  MIG_RECOVER_BY_COMMAND: no deadline, and no
	 * re-dial: the operator resumes (mig_ctl_resume(), mig_dest_listen_more()).
	 */
	int recover_ms;
	int idle_ms;	     /* a peer silent this long is stalled: link broken (recover_ms) */
	int connect_ms;	     /* source: how long to retry the first connection (10000) */
	const char *metrics; /* write the JSON summary to this file ("-": stdout) */
	int progress;	     /* 1: progress line on stderr (default: if a terminal) */
	unsigned prepage;    /* pages pushed after each demand fault (default 32) */
	unsigned channels;   /* source: bulk channels, 1..MIG_MAX_CHANNELS (default 1) */
	/*
	 * HELLO features (MIG_FEAT_*, migrate/wire.h) this side does not
	 * announce: for tests and benchmarks that play an older peer.
	 */
	uint32_t features_off;
	/*
	 * Source: push in PAGE_RUN frames (MIG_FEAT_RUNS) when the destination
	 * takes them.  Off by default: under KVM they made the fault p99 2-3x
	 * higher and the push no faster (docs/bench.md, "Pages by the run").
	 */
	int push_runs;
	int prepage_fixed; /* 1: always that window; 0: it adapts (source-prepage.h) */
	/*
	 * Destination, for tests only (QEMU's x- prefix): the stager waits
	 * this long before each staged page it installs, as a slow host
	 * does, so that a local install outlasting idle_ms can be tested.
	 */
	unsigned x_stager_delay_us;
	/*
	 * TLS on every connection of the migration when creds_dir or psk_file
	 * is set (never both): x509 credentials or a PSK file, as QEMU's
	 * (docs/security.md).  The source checks the destination's certificate
	 * names hostname, by default the address's host.  No fallback to
	 * plain: a peer without TLS is refused.
	 */
	struct mig_tls_opts tls;
	struct mig_ctl *ctl; /* source: live requests and progress (optional) */
};

#define MIG_RECOVER_BY_COMMAND (-1)

/* Is TLS asked for? */
static inline int mig_opts_tls(const struct mig_opts *o)
{
	return o->tls.creds_dir || o->tls.psk_file;
}

/* Fill defaults for zero fields. */
void mig_opts_defaults(struct mig_opts *o);

/* ---- Source ---- */

/*
 * The phases of an outgoing migration, named as QEMU's query-migrate names
 * its statuses (mig_phase_name()):
 *
 *   SETUP -> PRECOPY -> [PRE_SWITCHOVER] -> SWITCHOVER -> POSTCOPY <-> RECOVER
 *     |         |              |               |            |    (-> RECOVER_SETUP
 *     |         |              |               |            |     -> RECOVERING)
 *     +---------+--------------+---------------+--> FAILED  +--> COMPLETED
 *     +---------+--------------+--> CANCELLED (asked for before STATE is sent)
 *
 * PRECOPY is skipped without precopy rounds (and no manual switch);
 * PRE_SWITCHOVER only with pause_before_switchover: the VM is paused, and
 * a cancel there resumes it.  Up to the state's sending the VM can go on
 * here after a failure or a cancel; after it, its memory is split between
 * the two hosts.  RECOVER (postcopy-paused) waits for a reconnection;
 * RECOVER_SETUP connects, RECOVERING catches up after RESUME.
 */
enum mig_phase {
	MIG_PHASE_NONE,
	MIG_PHASE_SETUP,
	MIG_PHASE_PRECOPY,
	MIG_PHASE_PRE_SWITCHOVER, /* paused, waiting for mig_ctl_continue() */
	MIG_PHASE_SWITCHOVER,
	MIG_PHASE_POSTCOPY,
	MIG_PHASE_RECOVER,	 /* postcopy-paused: the link is down */
	MIG_PHASE_RECOVER_SETUP, /* postcopy-recover-setup: connecting again */
	MIG_PHASE_RECOVERING,	 /* postcopy-recover: reconnected, catching up */
	MIG_PHASE_COMPLETED,
	MIG_PHASE_FAILED,
	MIG_PHASE_CANCELLED,
};

/* QEMU's status string for a phase ("setup", "active", "postcopy-active", ...). */
const char *mig_phase_name(enum mig_phase p);

/*
 * Live control of one outgoing migration, owned by the caller (the VMM's
 * control API) and handed to mig_source_run() in mig_opts.ctl.  Every
 * field is read and written with __atomic builtins: requests by the
 * caller at any time, progress by the library as it goes.  phase is the
 * one record of where the migration is; phase_changed (optional) is
 * called from a library thread after each change.
 */
enum {
	MIG_CANCEL_NONE,
	MIG_CANCEL_ASKED,
	MIG_CANCEL_TOO_LATE
};

enum {
	MIG_RESUME_NONE,
	MIG_RESUME_ASKED, /* resume_uri is written: the library may take it */
	MIG_RESUME_TAKEN, /* the library is connecting to it */
};

struct mig_ctl {
	/* Requests. */
	int cancel; /* MIG_CANCEL_*: see mig_ctl_cancel() */
	int pause;  /* break the link now (QEMU's migrate-pause): mig_ctl_pause() */
	int pause_before_switchover; /* stop in PRE_SWITCHOVER once paused (QEMU's capability) */
	int go_on;		     /* leave PRE_SWITCHOVER (QEMU's migrate-continue) */
	int resume;		     /* MIG_RESUME_*: mig_ctl_resume() */
	char resume_uri[256];	     /* where a paused postcopy reconnects (with resume) */
	int start_postcopy;	     /* leave precopy now (as QEMU's migrate-start-postcopy) */
	int manual_postcopy;	     /* precopy goes on, round after round, until start_postcopy */
	uint64_t max_bandwidth;	     /* bytes/s of pushed pages (precopy and postcopy); 0: no cap */
	uint64_t max_postcopy_bandwidth; /* after the switch-over, instead (0: max_bandwidth) */
	/*
	 * Bumped by each mig_ctl_*() request: the library's waits for one
	 * (pause-before-switchover's continue, postcopy-paused's resume, a
	 * manual precopy's start of postcopy) sleep on it as a futex instead
	 * of looking every few milliseconds.
	 */
	uint32_t asked;
	/* Progress. */
	int phase; /* enum mig_phase */
	uint64_t t_start_ns, t_end_ns;
	uint64_t pages_total, pages_demand, bytes_sent;
	/*
	 * QEMU's remaining: in precopy, the pages the current round has yet
	 * to send (its dirty set, all RAM in the first); from the
	 * switch-over, the pages not yet sent (src_publish()).
	 */
	uint64_t pages_remaining;
	uint64_t precopy_rounds, dirty_pages_rate;	     /* pages/s dirtied in the last round */
	uint64_t downtime_us;				     /* once the destination runs the VM */
	uint64_t faults, fault_lat_p50_ns, fault_lat_p99_ns; /* from COMPLETE */
	/*
	 * QEMU's figures (query-migrate), each written in one place: pages
	 * sent with their payload and as zero markers, however often a page
	 * went (src_publish()); bytes/s and pages/s over the last second
	 * (the link watchdog's look); when the connections were up, and
	 * bytes_sent at the pause and at postcopy's start (src_set_phase();
	 * 0: not reached, since the handshake's bytes always come first).
	 */
	uint64_t pages_normal, pages_zero;
	uint64_t rate_bytes, rate_pages;
	uint64_t t_setup_ns, bytes_at_pause, bytes_at_postcopy;
	char error[400]; /* why it failed: written before phase becomes FAILED */
	int vm_lost;	 /* it failed after the switch-over (the VM's memory is split): idem */
	void (*phase_changed)(void *arg, enum mig_phase phase);
	/* Optional: precopy pass (1, 2, ...) starts, as QEMU's MIGRATION_PASS. */
	void (*pass_started)(void *arg, uint64_t pass);
	void *arg;
};

/*
 * Ask a migration to give up: 0 if it will (it was before the switch-over:
 * the VM goes on here), -EBUSY if the switch-over has begun.  One
 * compare-exchange against the library's own at the switch-over decides,
 * so a cancel is never both accepted and ignored.
 */
int mig_ctl_cancel(struct mig_ctl *c);

/*
 * QEMU's migrate-continue: a migration paused in PRE_SWITCHOVER (with
 * pause_before_switchover) switches over.  0, or -EINVAL in another phase.
 */
int mig_ctl_continue(struct mig_ctl *c);

/*
 * Break the link of a migration in postcopy (postcopy-active or
 * postcopy-recover), as QEMU's migrate-pause: it goes to postcopy-paused
 * within a heartbeat.  0, or -EINVAL with no postcopy to pause.
 */
int mig_ctl_pause(struct mig_ctl *c);

/*
 * Resume a paused postcopy (postcopy-paused) by connecting to uri, as
 * QEMU's migrate {resume: true}: 0, -EINVAL when not paused, -EBUSY while
 * an earlier resume is connecting.  The caller checked uri's form.  A
 * resume that cannot connect goes back to postcopy-paused.
 */
int mig_ctl_resume(struct mig_ctl *c, const char *uri);

/*
 * QEMU's migrate-start-postcopy: a migration in precopy switches over at
 * the end of the page it is sending.  The caller checked the phase.
 */
void mig_ctl_start_postcopy(struct mig_ctl *c);

/*
 * What the source needs from its VMM.  ram/ram_size: the guest RAM object
 * (RAM offset 0 is the first byte of region 0).  pause/resume: stop and
 * restart every vCPU (resume is only used when the migration fails before
 * the switch-over).  save_state: the paused VM's state blob, malloc()ed,
 * the caller frees it.  The dirty_* hooks are optional (NULL: no precopy
 * rounds possible): dirty_start enables dirty logging, dirty_fetch ORs into
 * bitmap (bit i = RAM page i) every page written since the previous call
 * and clears the log, dirty_stop disables it.  All return 0 or -errno.
 * stopped (optional) ends the wait for a destination when the guest exits.
 */
struct mig_source_vm {
	void *ctx;
	uint8_t *ram;
	uint64_t ram_size;
	unsigned nr_regions;
	struct mig_region regions[MIG_MAX_REGIONS];
	int (*pause)(void *ctx);
	int (*resume)(void *ctx);
	int (*save_state)(void *ctx, void **blob, size_t *len);
	int (*dirty_start)(void *ctx);
	int (*dirty_fetch)(void *ctx, uint64_t *bitmap);
	int (*dirty_stop)(void *ctx);
	/* Optional: nonzero once the VM stopped by itself (stop retrying). */
	int (*stopped)(void *ctx);
};

/*
 * Migrate the VM to o->addr.  Returns 0 once the destination reported every
 * page installed (the caller may then free its RAM and exit: the VM lives on
 * at the destination).  Returns -errno with a message in err when it failed:
 * *switched tells whether the failure came after the switch-over (then the
 * VM must NOT be resumed here: its memory is split between two hosts) or
 * before it (then the VM was already resumed here and runs on).
 */
int mig_source_run(struct mig_source_vm *vm, const struct mig_opts *o, int *switched, char *err,
		   size_t errlen);

/* ---- Destination ---- */

/*
 * What the destination needs from its VMM: its lazy RAM, whose page record
 * (ram/record.h) the library reads and writes through ram_claim() and
 * ram_install_claimed() from its threads, the RAM's layout as the guest
 * sees it, and load_state: restore a STATE blob into the (paused) VM.
 * The RAM's fault thread asks the library for pages through the source
 * mig_dest_page_source() gives.
 */
struct mig_dest_vm {
	void *ctx;
	struct ram *ram;
	unsigned nr_regions;
	struct mig_region regions[MIG_MAX_REGIONS];
	int (*load_state)(void *ctx, const void *blob, size_t len);
};

struct mig_dest;

/* Listen on o->addr.  NULL with a message on failure. */
struct mig_dest *mig_dest_listen(const struct mig_opts *o, char *err, size_t errlen);

/*
 * Accept a source, receive LAYOUT, precopy pages and STATE, load the state.
 * Returns 0 when the vCPUs may start (every page not yet received is
 * missing and faults), -errno with a message otherwise (nothing was run).
 */
int mig_dest_incoming(struct mig_dest *d, struct mig_dest_vm *vm, char *err, size_t errlen);

/*
 * The vCPUs have just been started: note the time (the downtime ends), tell
 * the source, then start the postcopy threads (receivers, supervisor).
 * Must follow a successful mig_dest_incoming(): replies wait until then.
 */
void mig_dest_resumed(struct mig_dest *d);

/*
 * The page source for the RAM's fault thread (ram_start_faults(), which
 * takes ownership): a fault on a missing page sends PAGE_REQUEST (the page
 * record makes that once, however many vCPUs fault on it), a fault on a
 * staged page installs its copy, and the fault thread also reads the
 * urgent channel and installs the replies (dest-fault.c).  The fault
 * thread must be stopped before mig_dest_free().  NULL when out of memory.
 */
struct ram_source *mig_dest_page_source(struct mig_dest *d);

/*
 * Wait for the end: 0 when every page has arrived (COMPLETE was sent),
 * -errno with a message when the migration failed for good (source gone
 * past the recovery deadline, hostile stream, install error).  After a
 * failure the VM must not run on: pages are missing.
 */
int mig_dest_wait(struct mig_dest *d, char *err, size_t errlen);

/*
 * Give up the incoming migration (thread safe, e.g. from a signal-handling
 * thread): the source gets ERROR with why, mig_dest_incoming() and
 * mig_dest_wait() return -ECANCELED with why.  Used when the process is
 * told to stop, and when the guest crashed at the destination: a crashed
 * guest is a failed migration, never COMPLETE.
 */
void mig_dest_abort(struct mig_dest *d, const char *why);

/* Non-blocking: 1 once every page arrived, -1 once failed, 0 while running. */
int mig_dest_status(struct mig_dest *d);

/* Where the incoming migration is, as QEMU names it (mig_phase_name()). */
enum mig_phase mig_dest_phase(struct mig_dest *d);
/*
 * The same, once it differs from `last`, or after ms, whichever is first
 * (for a caller that reports each change: QMP's MIGRATION events).
 */
enum mig_phase mig_dest_phase_wait(struct mig_dest *d, enum mig_phase last, int ms);

/*
 * QEMU's migrate-pause at the destination: break the link of a migration
 * in postcopy; the destination waits for the source (postcopy-paused).
 * 0, or -EINVAL when not in postcopy.
 */
int mig_dest_pause(struct mig_dest *d);

/*
 * QEMU's migrate-recover: also listen at addr (tcp:, unix:) for the
 * source's reconnection of a paused postcopy.  0, or -errno with err.
 */
int mig_dest_listen_more(struct mig_dest *d, const char *addr, char *err, size_t errlen);

/* Write the destination's JSON summary to f. */
void mig_dest_report(struct mig_dest *d, FILE *f);

/* Stop threads, close sockets, free.  Only after mig_dest_wait() returned. */
void mig_dest_free(struct mig_dest *d);

#endif /* MIGRATE_MIGRATE_H */
