/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The migration glue's own header (vmm/migrate/ only): the migration
 * library (its public migrate/ headers) bound to the VM through the
 * public calls of vmm/vm.h and ram/ram.h, one job per file, in layers: a
 * file calls only into files below it (docs/architecture.md, "Layers
 * inside a part", checked by tests/host/arch-map.sh).
 *
 *   migrate.c       the hooks `vmm run` calls (vmm/migrate.h): prepare,
 *                   started, finish
 *   qmp-commands.c  the migration's commands, and the control socket (with
 *                   the VM's own commands, vmm/vm-control.c)
 *   outgoing.c      the source: the VM's callbacks, the VM's one migration
 *                   out on its thread (its control block, gl->ctl),
 *                   started by QMP migrate or by the timer of --migrate-after
 *   qmp-figures.c   query-migrate's figures, MIGRATION_PASS
 *   qmp-recover.c   migrate-pause, migrate-recover, migrate resume
 *   incoming.c      the destination: page source, state load, watch
 *   incoming-events.c  the destination's MIGRATION events
 *   signals.c       SIGINT/SIGTERM while the destination waits for its state
 *   qmp-params.c    the next migration's parameters (QMP set/query), frozen
 *                   when one starts
 *   qmp-caps.c      QEMU's migration capabilities (QMP set/query), kept
 *                   with the parameters
 *   qmp-objects.c   object-add/object-del of TLS credentials objects
 *   qmp-runstate.c  whether a migration is active or over, and its say on
 *                   the VM's run state (QEMU's inmigrate, finish-migrate,
 *                   postmigrate) for the VM's own commands
 *   qmp-args.c      QMP arguments: a string, a listen URI
 *   options.c       vmm run's migration flags, the library's options, the
 *                   VM's regions as LAYOUT has them
 *
 * Locking: gl->lock (with gl->cond) guards finishing, params, run_params,
 * mig_opts, uri, mig_on and the VM's run state (vmc, whose lock it is),
 * and the start of a migration (ctl is reset under it; the library then
 * updates ctl atomically).  No
 * QMP event is sent with gl->lock held, and the QMP server runs handlers
 * with none of its own locks held: gl->lock and the server's locks never
 * nest.  The VM's lock nests inside gl->lock (cont resumes the VM under
 * it; stop pauses it without it, vmc.stopping set, since a vCPU may wait
 * for a page that only a command brings: vm-control.c); a migration
 * thread that ended is joined under it (the thread takes no gl->lock).
 */
#ifndef VMM_MIGRATE_GLUE_H
#define VMM_MIGRATE_GLUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "migrate/migrate.h"
#include "migrate/params.h"
#include "vmm/migrate.h"
#include "vmm/qmp.h"
#include "vmm/vm-control.h"

struct vm;
struct incoming_signals;

#define pr_vmm(...) fprintf(stderr, "vmm: " __VA_ARGS__)

/* QEMU's migration capabilities this VMM knows (qmp-caps.c), as bits of glue_params.caps. */
enum glue_cap {
	GLUE_CAP_POSTCOPY_RAM,
	GLUE_CAP_POSTCOPY_PREEMPT,
	GLUE_CAP_RETURN_PATH,
	GLUE_CAP_EVENTS,
	GLUE_CAP_MULTIFD,
	GLUE_CAP_POSTCOPY_BLOCKTIME,
	GLUE_CAP_PAUSE_BEFORE_SWITCHOVER,
	GLUE_CAP_ZERO_COPY_SEND,
	GLUE_CAP_NR
};
#define GLUE_CAP_BIT(c) (1u << (c))

/* QEMU's default downtime-limit (ms), and its largest. */
#define GLUE_DOWNTIME_LIMIT_DEFAULT 300
#define GLUE_DOWNTIME_LIMIT_MAX	    2000000

/*
 * A TLS credentials object made by object-add (QEMU's tls-creds-x509 or
 * tls-creds-psk): qmp-objects.c.
 */
#define GLUE_TLS_OBJS 8
struct glue_tls_obj {
	char id[64]; /* "": a free slot */
	bool psk;    /* tls-creds-psk: DIR/keys.psk; else tls-creds-x509: DIR */
	bool server; /* endpoint "server" (a destination's), else "client" */
	char dir[512];
};

/*
 * The TLS files a migration uses, resolved from the parameters tls-creds
 * (an object's id, or a directory) and tls-psk (a file); endpoint says
 * which end an object was made for.
 */
enum {
	GLUE_TLS_ANY,
	GLUE_TLS_CLIENT,
	GLUE_TLS_SERVER
};
struct glue_tls {
	char creds_dir[512], psk_file[528];
	int endpoint;
};

/*
 * Options for the next migration (migrate-set-parameters,
 * migrate-set-capabilities), under gl->lock.
 */
struct glue_params {
	uint64_t param[MIG_P_NR];
	uint64_t downtime_limit;	 /* ms: stored and queried, nothing more (docs) */
	uint64_t max_postcopy_bandwidth; /* bytes/s after the switch-over; 0: max-bandwidth's */
	uint32_t caps;			 /* GLUE_CAP_BIT()s */
	char tls_creds[512], tls_psk[512], tls_hostname[256], metrics[512];
	struct glue_tls tls; /* tls_creds and tls_psk resolved (glue_tls_resolve()) */
};

/*
 * The migration of one `vmm run`: created by migrate_prepare(), kept in
 * migrate_vmm_opts.glue, freed by migrate_finish().
 */
struct migrate_glue {
	struct vm *vm;
	struct migrate_vmm_opts *o;
	struct mig_dest *dest;
	struct mig_dest_vm dest_vm;
	pthread_t watch, timer, mig_thread;
	int watch_on, timer_on;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int finishing;
	/* The control API (--control): qmp-commands.c. */
	struct qmp_server *qmp;
	struct glue_params params, run_params; /* the next migration's; the running one's */
	struct mig_opts mig_opts;	       /* the running one's, pointing into run_params */
	struct mig_ctl ctl;
	char uri[256];
	struct glue_tls_obj tls_objs[GLUE_TLS_OBJS]; /* object-add's */
	int mig_on;	       /* a migration thread was started (join it), by anyone */
	struct vm_control vmc; /* the VM's own commands: its run state (stop, cont) */
	/* The destination (--incoming), under gl->lock: incoming.c. */
	int inmigrate;		      /* the state has not arrived: QEMU's "inmigrate" */
	int incoming_done;	      /* every page arrived */
	int incoming_signo;	      /* a signal ended the wait for migrate-incoming */
	int incoming_quit;	      /* QMP quit ended it, or the wait for the state */
	char incoming_uri[256];	      /* --incoming's, or migrate-incoming's (defer) */
	struct glue_tls incoming_tls; /* its TLS: the parameters' then */
	struct incoming_signals *sig; /* the destination's signal watch, until its vCPUs run */
	pthread_t dest_events;	      /* its MIGRATION events (incoming-events.c) */
	int dest_events_on, dest_events_stop;
};

/* ---- options.c ---- */

/*
 * A migration URI (migrate/net.h's forms; any address only where listen):
 * 0, or -EINVAL with why in err.
 */
int glue_check_uri(const char *uri, bool listen, char *err, size_t errlen);
/*
 * The TLS files load (the flags themselves were checked when parsed:
 * migrate_check_opts()): checked when the VMM starts, before anything
 * connects (a source loads them again for each migration: they may be
 * renewed meanwhile).  0, or -EINVAL after a message.
 */
int glue_check_tls_files(const struct migrate_vmm_opts *o);
/* The library's options from the flags, for a migration to or from addr. */
struct mig_opts glue_lib_opts(const struct migrate_glue *gl, const char *addr);

/* The VM's RAM regions as LAYOUT carries them (RAM offsets follow in order). */
unsigned glue_regions(struct vm *vm, struct mig_region *out);

/* ---- incoming.c ---- */

/* QEMU's -incoming defer: the URI comes by migrate-incoming. */
#define GLUE_INCOMING_DEFER "defer"

/* migrate_prepare() for a destination: blocks until the state is loaded. */
int glue_prepare_incoming(struct migrate_glue *gl);
/* QMP migrate-incoming {uri}: the deferred destination's address. */
void glue_qmp_migrate_incoming(void *ctx, struct json_object *args, struct qmp_reply *reply);
/*
 * migrate_started() for a destination: the vCPUs run, the watch starts.
 * 0, or -errno with a message when the watch cannot start.
 */
int glue_incoming_started(struct migrate_glue *gl);
/* migrate_finish()'s part for a destination, after the VM stopped. */
void glue_incoming_finish(struct migrate_glue *gl);
/*
 * query-migrate at a destination: QEMU's postcopy-blocktime and
 * postcopy-vcpu-blocktime into o, once completed, if they were counted.
 */
void glue_incoming_blocktime(struct migrate_glue *gl, struct json_object *o);

/* ---- signals.c ---- */

/* Watch SIGINT/SIGTERM until the vCPUs run: 0, or -errno after a message. */
int glue_watch_signals(struct migrate_glue *gl);
/* Ends the watch, if any (the join waits for a thread's wake-up). */
void glue_stop_signal_watch(struct migrate_glue *gl);

/* ---- outgoing.c ---- */

/* Migrate out; returns 0 on success (the VM is then stopped here). */
int glue_migrate_out(struct migrate_glue *gl, const char *to, const struct mig_opts *m, char *err,
		     size_t errlen);
/*
 * Start the VM's one migration with the options p (gl->lock held): 0, or
 * -1 with why in err.
 */
int glue_start_migration(struct migrate_glue *gl, const char *uri, const struct glue_params *p,
			 char *err, size_t errlen);
/* The thread of the migration (gl->uri, gl->mig_opts). */
void *glue_migration_thread(void *arg);
/* The thread of --migrate-after: waits, then starts the migration to --migrate-to. */
void *glue_timer_thread(void *arg);
/* mig_ctl.phase_changed: a MIGRATION event to the QMP clients (any thread). */
void glue_phase_changed(void *arg, enum mig_phase phase);

/* ---- qmp-params.c ---- */

/* The next migration's parameters: the flags' values. */
void glue_params_init(struct glue_params *p, const struct migrate_vmm_opts *o);
/* gl->run_params and gl->mig_opts from p (gl->lock held). */
void glue_freeze_params(struct migrate_glue *gl, const struct glue_params *p);
void glue_qmp_set_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply);
void glue_qmp_query_parameters(void *ctx, struct json_object *args, struct qmp_reply *reply);

/* ---- qmp-objects.c ---- */

void glue_qmp_object_add(void *ctx, struct json_object *args, struct qmp_reply *reply);
void glue_qmp_object_del(void *ctx, struct json_object *args, struct qmp_reply *reply);
/* p->tls from p->tls_creds and p->tls_psk (gl->lock held): 0, or -1 with reply set. */
int glue_tls_resolve(struct migrate_glue *gl, struct glue_params *p, struct qmp_reply *reply);
/* TLS from files alone (vmm run's flags, a tls-creds directory): either endpoint. */
void glue_tls_from_paths(struct glue_tls *t, const char *creds_dir, const char *psk_file);
/* t may be used at this end (server: a destination): 0, or -1 with QEMU's words in err. */
int glue_tls_endpoint(const struct glue_tls *t, bool server, char *err, size_t errlen);

/* ---- qmp-caps.c ---- */

/* The capabilities' values at start (from vmm run's flags). */
void glue_caps_init(struct glue_params *p, const struct migrate_vmm_opts *o);
void glue_qmp_set_capabilities(void *ctx, struct json_object *args, struct qmp_reply *reply);
void glue_qmp_query_capabilities(void *ctx, struct json_object *args, struct qmp_reply *reply);

/* ---- qmp-figures.c ---- */

/* QMP query-migrate: QEMU's MigrationInfo from gl->ctl. */
void glue_qmp_query_migrate(void *ctx, struct json_object *args, struct qmp_reply *reply);
/* mig_ctl.pass_started: a MIGRATION_PASS event (with the events capability). */
void glue_pass_started(void *arg, uint64_t pass);

/* ---- qmp-runstate.c ---- */

/* The VM migrated away and this VMM waits for quit: QEMU's postmigrate (gl->lock held). */
int glue_postmigrate(struct migrate_glue *gl);
/*
 * The VM's migration failed after the switch-over: its memory is split and
 * it cannot run here (gl->lock held).
 */
int glue_vm_lost(struct migrate_glue *gl);
/*
 * Why the VM can never run here again after its migration (postmigrate or
 * lost), or NULL: the one reason stop, cont and migrate give (gl->lock held).
 */
const char *glue_migrated_away(struct migrate_glue *gl);
/* A migration thread was started and its phase is not final (gl->lock held). */
int glue_mig_active(struct migrate_glue *gl);
/* The migration's say on the VM's run state (vmm/vm-control.h), with gl as its arg. */
extern const struct vm_run_hooks glue_run_hooks;

/* ---- qmp-args.c ---- */

/* A string argument into buf (left alone when absent): 0, or -1 with reply set. */
int glue_arg_str(struct json_object *args, const char *key, char *buf, size_t len,
		 struct qmp_reply *reply);
/*
 * The "uri" argument of migrate-incoming and migrate-recover: present and
 * an address this VMM can listen at.  0, or -1 with reply set.
 */
int glue_arg_listen_uri(struct json_object *args, char *uri, size_t len, struct qmp_reply *reply);

/* ---- qmp-commands.c ---- */

/* Serve QMP on --control: 0, or -EINVAL after a message. */
int glue_start_control(struct migrate_glue *gl);

/* incoming-events.c: the destination's MIGRATION events, from the listen to the end. */
int glue_start_incoming_events(struct migrate_glue *gl);
void glue_stop_incoming_events(struct migrate_glue *gl);

/* qmp-recover.c: recovery by command (migrate-pause, migrate-recover, migrate resume). */
void glue_qmp_migrate_pause(void *ctx, struct json_object *args, struct qmp_reply *reply);
void glue_qmp_migrate_recover(void *ctx, struct json_object *args, struct qmp_reply *reply);
void glue_resume(struct migrate_glue *gl, const char *uri, struct qmp_reply *reply);
void glue_incoming_status(struct migrate_glue *gl, struct json_object *o);

#endif /* VMM_MIGRATE_GLUE_H */
