// SPDX-License-Identifier: GPL-2.0
/*
 * dest-fuzz: libFuzzer target for the destination's protocol logic, not
 * only its parser.  It links the library, drives the destination's own
 * steps (migrate-agent/dest.h), builds a destination around a fake VM (lazy
 * RAM whose back end is a fake with its own "page tables": a present bit
 * per page, installs that say -EEXIST for a present page) and plays one
 * whole session of frames from the source on the two channels, exactly as
 * the receive threads do (header and payload checks, then dest_rx_frame()).
 *
 * Input: byte 0 picks the start (precopy phase or after the switch-over,
 * zstd agreed or not, RAM of 16..128 pages, CRC repair, PAGE_RUN agreed
 * unless bit 0x40); then frames, each
 * preceded by a byte whose low bit picks the channel and whose bit 1 breaks
 * the link first (before STATE: the reconnection's
 * dest_reset_before_state()).  With CRC repair the fuzzer's mutations reach
 * the messages' contracts and the state machine instead of dying at a
 * checksum.
 *
 * The fake VMs (one per RAM size and back end) are made once and reset
 * after every input to the state a new one has, not mapped anew: without
 * /dev/kvm a page fault or an mmap costs 5-10 times more, and the
 * destination's stamps (1.8 MB under ASan) cost more than the session.
 *
 * Invariants checked after every session (abort() when broken):
 *   - the page record and the fake page tables agree: PRESENT <=> present;
 *     no page is left INSTALLING;
 *   - the RAM's present counter equals the number of PRESENT pages;
 *   - COMPLETE went out only with every page PRESENT;
 *   - every rejection came with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAKE_MAX_PAGES 128 /* 16 << 3: the largest RAM the start byte picks */

static struct {
	uint8_t present[FAKE_MAX_PAGES];
	uint64_t nr_pages;
} fake;

static int fake_install(struct ram *ram, uint64_t off, void *page)
{
	uint64_t i = off / PAGE_SIZE;
	if (off % PAGE_SIZE || i >= fake.nr_pages)
		abort(); /* the library must never install outside RAM */
	if (fake.present[i])
		return -EEXIST;
	if (page)
		memcpy(ram_host(ram) + off, page, PAGE_SIZE);
	else
		memset(ram_host(ram) + off, 0, PAGE_SIZE);
	fake.present[i] = 1;
	return 0;
}

static int fake_zero(struct ram *ram, uint64_t off, uint64_t len)
{
	if (len != PAGE_SIZE)
		abort(); /* one page at a time without zero_run */
	return fake_install(ram, off, NULL);
}

static int fake_run(struct ram *ram, uint64_t off, void *pages, uint64_t len)
{
	int dups = 0;
	for (uint64_t k = 0; k < len / PAGE_SIZE; k++) {
		int r = fake_install(ram, off + k * PAGE_SIZE,
				     pages ? (uint8_t *)pages + k * PAGE_SIZE : NULL);
		if (r == -EEXIST)
			dups++;
		else if (r)
			return r;
	}
	return dups;
}

static int fake_zero_run(struct ram *ram, uint64_t off, uint64_t len)
{
	return fake_run(ram, off, NULL, len);
}

static int fake_ok(void)
{
	return 0;
}

static int fake_arm(struct ram *ram)
{
	return 0;
}

static int fake_wake(struct ram *ram, uint64_t off, uint64_t len)
{
	return 0;
}

static void fake_disarm(struct ram *ram)
{
}

/* One without runs and one with: the library's page-by-page path and its run path. */
static const struct ram_backend_ops fake_ops[2] = {
	{ .name = "fake",
	  .probe = fake_ok,
	  .arm = fake_arm,
	  .install = fake_install,
	  .zero = fake_zero,
	  .wake = fake_wake,
	  .disarm = fake_disarm },
	{ .name = "fake-runs",
	  .probe = fake_ok,
	  .arm = fake_arm,
	  .install = fake_install,
	  .install_run = fake_run,
	  .zero_run = fake_zero_run,
	  .zero = fake_zero,
	  .wake = fake_wake,
	  .disarm = fake_disarm },
};

static int fake_load_state(void *ctx, const void *blob, size_t len)
{
	(void)ctx;
	(void)blob;
	return len ? 0 : -EINVAL;
}

/*
 * A fake VM: lazy RAM on a fake back end, and a destination's incoming
 * buffers for it as dest_incoming_alloc() left them (the staging buffer,
 * the fault thread's run buffer, the stamps), which each input's
 * destination takes over.
 */
struct fake_vm {
	struct ram *ram;
	struct mig_dest_vm vm;
	struct mig_dest tmpl;
	bool made;
};

/* The fake VM of the start byte's RAM size and back end, made on first use. */
static struct fake_vm *fake_vm(uint8_t mode)
{
	static struct fake_vm vms[4][2];
	struct fake_vm *v = &vms[(mode >> 2) & 3][mode >> 5 & 1];
	fake.nr_pages = 16u << ((mode >> 2) & 3);
	if (v->made)
		return v;
	char err[64];
	if (ram_create(fake.nr_pages * PAGE_SIZE, &fake_ops[mode >> 5 & 1], &v->ram))
		abort();
	v->vm = (struct mig_dest_vm){
		.ram = v->ram,
		.nr_regions = 1,
		.regions = { { .gpa = 0, .size = fake.nr_pages * PAGE_SIZE } },
		.load_state = fake_load_state,
	};
	if (dest_incoming_alloc(&v->tmpl, &v->vm, err, sizeof(err)))
		abort();
	v->made = true;
	return v;
}

/*
 * Back to the state a new fake VM has: the pages the fake back end
 * installed zeroed (they stay mapped: no fault next time), the record as
 * ram_create() left it, the staging buffer given back to the kernel (all of
 * it: a decode that failed half-way wrote a page the record does not
 * show), the stamps emptied.  The fault thread's run buffer
 * (tmpl.loop.run) is never written here: no fault thread runs.
 */
static void fake_vm_reset(struct fake_vm *v)
{
	for (uint64_t i = 0; i < fake.nr_pages; i++)
		if (fake.present[i])
			memset(ram_host(v->ram) + i * PAGE_SIZE, 0, PAGE_SIZE);
	memset(fake.present, 0, sizeof(fake.present));
	if (ram_reset(v->ram))
		abort();
	madvise(v->tmpl.stage, ram_bytes(v->ram), MADV_DONTNEED);
	mig_stamps_reset(v->tmpl.stamps);
}

/* A destination on v in the state the start byte asks for; sends go to /dev/null. */
static struct mig_dest *fake_dest(struct fake_vm *v, uint8_t mode, int devnull)
{
	struct mig_dest *d = malloc(sizeof(*d));
	if (!d)
		abort();
	*d = v->tmpl; /* zeroed, then dest_incoming_alloc()'s fields */
	d->o.idle_ms = d->o.recover_ms = 1000;
	d->listen.fd = -1;
	pthread_mutex_init(&d->req_lock, NULL);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->lat_lock, NULL);
	pthread_mutex_init(&d->loop.lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	d->features = ((mode & 2) ? MIG_FEAT_ZSTD : 0) | ((mode & 0x40) ? 0 : MIG_FEAT_RUNS);
	struct mig_conn *c[2];
	for (int k = 0; k < 2; k++) {
		/* No receive buffer: frames come from the input, not the fd. */
		c[k] = calloc(1, sizeof(*c[k]));
		if (!c[k])
			abort();
		c[k]->fd = dup(devnull);
		c[k]->name = k ? "bulk" : "urgent";
		pthread_mutex_init(&c[k]->tx_lock, NULL);
		c[k]->wire = (struct mig_wire_ctx){ .ram_size = ram_bytes(v->ram),
						    .features = d->features,
						    .hello_seen = 1,
						    .peer_role = MIG_ROLE_SOURCE };
	}
	d->links = (struct mig_links){ .urg = c[0], .bulk = { c[1] }, .nr_bulk = 1 };
	d->link_ok = 1;
	/* The phase as the destination's threads would have moved it (dest.h). */
	mig_lock(&d->lock, MIG_RANK_DEST);
	dest_phase_enter(d, DEST_PRECOPY);
	if (mode & 1) { /* after the switch-over: the vCPUs run */
		dest_set_done0(d, true);
		dest_phase_enter(d, DEST_SWITCHING);
		dest_phase_enter(d, DEST_POSTCOPY);
		d->times.t_resumed = now_ns();
	}
	mig_unlock(&d->lock);
	return d;
}

static void check_invariants(struct mig_dest *d)
{
	uint64_t present = 0;
	for (uint64_t i = 0; i < d->nr_pages; i++) {
		enum ram_page_state st = ram_word_state(ram_page_word(d->ram, i));
		if (st == RAM_PAGE_INSTALLING || (st == RAM_PAGE_PRESENT) != fake.present[i])
			abort();
		present += st == RAM_PAGE_PRESENT;
	}
	if (ram_nr_present(d->ram) != present)
		abort();
	if (dest_phase(d) == DEST_COMPLETE && present != d->nr_pages)
		abort();
}

/* The destination's own; its incoming buffers stay with the fake VM. */
static void free_dest(struct mig_dest *d)
{
	dest_links_free(d);
	free(d->lat.ns);
	free(d);
}

/* Fix the CRCs of the frame at buf (len bytes available), as a sender would. */
static void repair(uint8_t *buf, size_t len)
{
	struct mig_frame_hdr h;
	memcpy(&h, buf, sizeof(h));
	uint32_t n = h.len <= len - sizeof(h) ? h.len : (uint32_t)(len - sizeof(h));
	mig_frame_hdr_init(&h, h.type, h.len, h.seq, crc32c(0, buf + sizeof(h), n));
	memcpy(buf, &h, sizeof(h));
}

/* Play the frames; returns when the stream ends or the destination gave up. */
static void play(struct mig_dest *d, struct run run[2], uint8_t *s, size_t len, int fix)
{
	char err[320];
	size_t off = 0;
	while (len - off > 1 + sizeof(struct mig_frame_hdr) && dest_phase(d) != DEST_FAILED) {
		struct mig_conn *c = (s[off] & 1) ? d->links.bulk[0] : d->links.urg;
		struct run *rn = &run[s[off] & 1];
		if ((s[off] & 2) && dest_phase(d) < DEST_SWITCHING) {
			for (int k = 0; k < 2 && dest_phase(d) != DEST_FAILED; k++)
				dest_flush_run(d, &run[k]);
			dest_reset_before_state(d);
		}
		off++;
		if (fix)
			repair(s + off, len - off);
		struct mig_frame_hdr h;
		memcpy(&h, s + off, sizeof(h));
		err[0] = 0;
		int r = mig_check_hdr(&h, err, sizeof(err));
		if (!r && h.len > len - off - sizeof(h))
			return; /* the stream ends inside this frame */
		if (!r)
			r = mig_check_payload(&c->wire, &h, s + off + sizeof(h), err, sizeof(err));
		if (!r && h.type == MIG_MSG_PAGE_RUN && rn->direct) /* as mig_conn_recv_pages() */
			memcpy(rn->direct, s + off + sizeof(h) + sizeof(struct mig_page_run),
			       h.len - sizeof(struct mig_page_run));
		if (!r)
			r = dest_rx_frame(d, c, rn, &h, s + off + sizeof(h), err, sizeof(err));
		if (r < 0 && dest_phase(d) != DEST_FAILED) {
			if (!err[0])
				abort(); /* every rejection has a message */
			dest_fail(d, "%s", err);
		}
		if (h.type != MIG_MSG_PAGE || r)
			for (int k = 0; k < 2 && dest_phase(d) != DEST_FAILED; k++)
				dest_flush_run(d, &run[k]);
		off += sizeof(h) + h.len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int devnull = -1;
	static uint8_t *runbuf[3];
	if (devnull < 0) {
		devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		for (int k = 0; k < 3; k++) {
			runbuf[k] = aligned_alloc(PAGE_SIZE, RUN_MAX * PAGE_SIZE);
			if (!runbuf[k])
				abort();
		}
	}
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	struct fake_vm *v = fake_vm(mode);
	struct mig_dest *d = fake_dest(v, mode, devnull);
	struct run run[2] = { { .buf = runbuf[0] }, { .buf = runbuf[1], .direct = runbuf[2] } };
	uint8_t *copy = malloc(size);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	play(d, run, copy + 1, size - 1, (mode & 0x10) != 0);
	for (int k = 0; k < 2 && dest_phase(d) != DEST_FAILED; k++)
		dest_flush_run(d, &run[k]);
	if (dest_phase(d) != DEST_FAILED && dest_done0(d))
		dest_try_complete(d);
	check_invariants(d);
	free(copy);
	free_dest(d);
	fake_vm_reset(v);
	mig_wire_thread_cleanup();
	return 0;
}
