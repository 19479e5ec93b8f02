/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The RAM object's fields: ram/'s own files only.  Everyone else holds a
 * struct ram * and calls the headers in include/ram/, so the record's representation
 * and the fault thread's state can change without touching them.
 */
#ifndef RAM_INTERNAL_H
#define RAM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/macros.h"
#include "common/page.h"
#include "ram/backend.h"
#include "ram/ram.h"
#include "ram/record.h"

struct ram_blocktime;

struct ram {
	uint8_t *host; /* guest-physical 0 in our address space */
	uint64_t size; /* bytes, page aligned */
	uint64_t nr_pages;
	/* Lazy RAM only (ops == NULL for plain RAM): */
	const struct ram_backend_ops *ops;
	int fd;			 /* back end's descriptor */
	bool fault_tids;	 /* the back end says which thread faulted (arm() sets it) */
	_Atomic uint64_t *pages; /* the page record: one word per page */
	uint64_t t0;		 /* now_ns() the record's times count from */
	_Atomic uint64_t nr_present;
	_Atomic uint64_t nr_requested; /* pages REQUESTED: kept by ram_claim() and ram_unclaim() */
	struct ram_source *source;
	bool busy_poll;
	int kick_fd; /* eventfd that wakes the fault thread: to stop, to look again */
	atomic_bool stop;
	bool thread_started;
	pthread_t thread;
	_Atomic int error;		      /* first fatal -errno of the fault thread */
	void (*on_error)(void *arg, int err); /* called once on a fatal error */
	void *on_error_arg;
	/* Blocked vCPU time (blocktime.c): NULL until ram_blocktime_start(). */
	struct ram_blocktime *_Atomic bt;
	struct {
		_Atomic uint64_t faults, requests, dup_faults, late_faults, installed, zeroed, dups,
		    eexist;
	} st;
};

/* blocktime.c: a fault of thread tid (0: unknown) on page pg; pages made PRESENT. */
void ram_blocktime_begin(struct ram *ram, uint64_t pg, uint32_t tid);
void ram_blocktime_end(struct ram *ram, uint64_t pg, uint64_t n);
void ram_blocktime_free(struct ram *ram);

#endif /* RAM_INTERNAL_H */
