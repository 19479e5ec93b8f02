// SPDX-License-Identifier: GPL-2.0
/*
 * The pusher at the source: pages encoded as PAGE frames (zero, zstd or
 * raw), batched in two buffers and written on the bulk channel (io_uring on
 * plain TCP, one send in flight), paced by max_bandwidth.  Precopy's rounds
 * use it on the main thread; in postcopy the push thread sends every page
 * nobody asked for, the pages after recent faults first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "source.h"

#define PUSH_BATCH_PAGES 64 /* 256 KiB: one send */

/*
 * Append page i as a PAGE frame to buf; returns bytes written.  cctx: the
 * caller's zstd context (created here on first use, the caller frees it),
 * or NULL for no compression (demand replies: latency before bytes).
 */
size_t src_put_page(struct src *s, struct mig_conn *c, uint8_t *buf, uint64_t i, uint16_t flags,
		    ZSTD_CCtx **cctx)
{
	const uint8_t *data = s->vm->ram + i * PAGE_SIZE;
	struct mig_page p = { .addr = i * PAGE_SIZE, .flags = flags };
	uint8_t zbuf[PAGE_SIZE];
	const void *payload = data;
	if (page_is_zero(data)) {
		p.encoding = MIG_PAGE_ZERO;
		payload = NULL;
		__atomic_fetch_add(&s->counts.pages_zero, 1, __ATOMIC_RELAXED);
		if (!(flags & (MIG_PAGEF_DEMAND | MIG_PAGEF_PRECOPY)))
			__atomic_fetch_add(&s->counts.pages_pushed_zero, 1, __ATOMIC_RELAXED);
	} else if (cctx) {
		if (!*cctx)
			*cctx = ZSTD_createCCtx();
		size_t n =
		    *cctx ? ZSTD_compressCCtx(*cctx, zbuf, sizeof(zbuf), data, PAGE_SIZE, 1) : 0;
		if (*cctx && !ZSTD_isError(n) && n < MIG_ZSTD_MAX_LEN - 64) {
			p.encoding = MIG_PAGE_ZSTD;
			p.data_len = (uint32_t)n;
			payload = zbuf;
			__atomic_fetch_add(&s->counts.pages_zstd, 1, __ATOMIC_RELAXED);
		}
	}
	if (p.encoding == MIG_PAGE_RAW)
		p.data_len = PAGE_SIZE;
	if (p.encoding != MIG_PAGE_ZERO) /* QEMU's "normal": a page with its payload */
		__atomic_fetch_add(&s->counts.pages_normal, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->counts.bytes_pages, sizeof(p) + p.data_len, __ATOMIC_RELAXED);
	return mig_conn_put(c, buf, MIG_MSG_PAGE, &p, sizeof(p), payload, p.data_len);
}

/* A pusher for s: its two buffers, and a ring on plain TCP.  0 or -ENOMEM. */
int src_pusher_init(struct pusher *ps, struct src *s)
{
	memset(ps, 0, sizeof(*ps));
	ps->s = s;
	ps->c = s->links.bulk[0]; /* precopy's; a push thread takes its own */
	ps->hi = s->nr_pages;
	for (int i = 0; i < PUSH_NBUF; i++) {
		ps->buf[i] = malloc(PUSH_BUF);
		if (!ps->buf[i])
			return -ENOMEM;
	}
	/*
	 * The ring writes the socket itself: only for plain TCP (a TLS session
	 * encrypts in user space first).  Kernels without io_uring (or with it
	 * disabled): the connection's own send then.
	 */
	ps->uring = !s->tls && !getenv("MIG_NO_URING") &&
		    io_uring_queue_init(2 * PUSH_NBUF, &ps->ring, 0) == 0;
	return 0;
}

static int wait_idle(struct pusher *ps);

/* Its buffers (once the kernel is done with them) and its zstd context. */
void src_pusher_free(struct pusher *ps)
{
	ZSTD_freeCCtx(ps->cctx);
	ps->cctx = NULL;
	if (ps->uring) {
		/* The kernel must be done with the buffers before they go. */
		while (wait_idle(ps))
			;
		io_uring_queue_exit(&ps->ring);
	}
	for (int i = 0; i < PUSH_NBUF; i++)
		free(ps->buf[i]);
}

/*
 * Reap the one send in flight; a short send is resubmitted for the rest
 * before anything else goes out.  Only one send is ever in flight on the
 * socket: two concurrent io_uring sends on one stream may be reordered
 * (one retried asynchronously after EAGAIN while the next goes inline),
 * which would interleave frames.  Two buffers still overlap encoding with
 * sending.
 */
static int reap(struct pusher *ps)
{
	struct io_uring_cqe *cqe;
	int r;
	/*
	 * A process stopped (SIGSTOP, a debugger) and continued sees its wait
	 * end with -EINTR although no handler ran: that is no failed send.
	 */
	do
		r = io_uring_wait_cqe(&ps->ring, &cqe);
	while (r == -EINTR);
	if (r < 0)
		return r;
	unsigned b = (unsigned)(uintptr_t)io_uring_cqe_get_data(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&ps->ring, cqe);
	if (res <= 0) {
		ps->inflight[b] = 0;
		ps->used[b] = 0;
		return res < 0 ? res : -EPIPE;
	}
	mig_conn_sent(ps->c, now_ns());
	if ((size_t)res < ps->used[b]) {
		memmove(ps->buf[b], ps->buf[b] + res, ps->used[b] - res);
		ps->used[b] -= res;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ps->ring);
		io_uring_prep_send(sqe, mig_conn_raw_fd(ps->c), ps->buf[b], ps->used[b],
				   MSG_NOSIGNAL);
		io_uring_sqe_set_data(sqe, (void *)(uintptr_t)b);
		io_uring_submit(&ps->ring);
		return 0;
	}
	ps->used[b] = 0;
	ps->inflight[b] = 0;
	return 0;
}

static int wait_idle(struct pusher *ps)
{
	for (int i = 0; ps->uring && i < PUSH_NBUF; i++)
		while (ps->inflight[i]) {
			int r = reap(ps);
			if (r)
				return r;
		}
	return 0;
}

/* Send the current buffer and move to the other one. */
static int flush(struct pusher *ps)
{
	unsigned b = ps->cur;
	if (!ps->used[b])
		return 0;
	if (!ps->uring) {
		int r = mig_conn_write(ps->c, ps->buf[b], ps->used[b]);
		if (r)
			return r;
		mig_conn_sent(ps->c, now_ns());
		ps->used[b] = 0;
		return 0;
	}
	int r = wait_idle(ps);
	if (r)
		return r;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ps->ring);
	io_uring_prep_send(sqe, mig_conn_raw_fd(ps->c), ps->buf[b], ps->used[b], MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, (void *)(uintptr_t)b);
	io_uring_submit(&ps->ring);
	ps->inflight[b] = 1;
	ps->cur = (b + 1) % PUSH_NBUF;
	return 0;
}

/* Everything batched sent and nothing in flight: 0 or -errno. */
int src_drain(struct pusher *ps)
{
	int r = flush(ps);
	if (!r)
		r = wait_idle(ps);
	return r;
}

/* Append a frame to the batch, flushing first when it may not fit. */
static int push_frame(struct pusher *ps, uint16_t type, const void *p1, size_t l1, const void *p2,
		      size_t l2)
{
	size_t need = sizeof(struct mig_frame_hdr) + l1 + l2;
	if (need > PUSH_BUF) {
		int r = src_drain(ps);
		if (r)
			return r;
		return mig_conn_send(ps->c, type, p1, l1, p2, l2);
	}
	if (PUSH_BUF - ps->used[ps->cur] < need) {
		int r = flush(ps);
		if (r)
			return r;
	}
	ps->used[ps->cur] +=
	    mig_conn_put(ps->c, ps->buf[ps->cur] + ps->used[ps->cur], type, p1, l1, p2, l2);
	return 0;
}

/*
 * max_bandwidth: a token bucket per pusher.  Tokens are bytes, earned at
 * the cap's rate as it is now (read again on every refill, so a lowered
 * or a raised cap applies from the next frame, or within PACE_SLEEP_NS of
 * a wait) and spent by each pushed frame; the bucket holds at most
 * PACE_BURST_NS worth of them.  A frame may drive it below zero (a frame
 * is never split); the pusher then sends what is batched (a fault may
 * wait on it) and sleeps until the debt is paid, however long that is at
 * a small cap.  Demand replies travel on the urgent channel and are never
 * held back.
 */
#define PACE_BURST_NS 20000000ull
#define PACE_SLEEP_NS 100000000ull

/* Earn tokens at cap bytes/s since the last refill. */
static void pace_refill(struct pusher *ps, uint64_t cap, uint64_t now)
{
	double burst = (double)cap * (double)PACE_BURST_NS / 1e9;

	if (!ps->pace_t) /* the first frame under a cap: a full bucket */
		ps->pace_tokens = burst;
	else if (now > ps->pace_t)
		ps->pace_tokens += (double)(now - ps->pace_t) * (double)cap / 1e9;
	if (ps->pace_tokens > burst)
		ps->pace_tokens = burst;
	ps->pace_t = now;
}

/*
 * Stop waiting: the migration ended, broke or is being cancelled, or
 * precopy is to end now (the caller looks why, at once: precopy's round
 * checks its cut at every page).
 */
static int pace_cut(struct pusher *ps)
{
	struct src *s = ps->s;

	return src_stopped(s) || __atomic_load_n(&s->complete, __ATOMIC_ACQUIRE) ||
	       src_cancel_asked(s) ||
	       (ASKED(s, start_postcopy) &&
		__atomic_load_n(&s->o->ctl->phase, __ATOMIC_ACQUIRE) == MIG_PHASE_PRECOPY);
}

/*
 * The cap as it is now: QEMU's max-postcopy-bandwidth after the
 * switch-over where it is set, max_bandwidth otherwise (which here caps
 * postcopy's push too, where QEMU's caps only precopy).
 */
static uint64_t pace_cap(const struct mig_ctl *c)
{
	uint64_t post = __atomic_load_n(&c->max_postcopy_bandwidth, __ATOMIC_RELAXED);

	if (post && __atomic_load_n(&c->phase, __ATOMIC_ACQUIRE) >= MIG_PHASE_SWITCHOVER)
		return post;
	return __atomic_load_n(&c->max_bandwidth, __ATOMIC_RELAXED);
}

static int pace(struct pusher *ps, size_t bytes)
{
	struct mig_ctl *c = ps->s->o->ctl;
	uint64_t cap = c ? pace_cap(c) : 0;
	int r;

	if (!cap) {
		ps->pace_t = 0; /* a cap set later starts from a full bucket */
		return 0;
	}
	pace_refill(ps, cap, now_ns());
	ps->pace_tokens -= (double)bytes;
	if (ps->pace_tokens >= 0)
		return 0;
	r = flush(ps);
	if (r)
		return r;
	src_publish(ps->s); /* query-migrate's figures fresh while the cap holds */
	while (ps->pace_tokens < 0 && !pace_cut(ps)) {
		double ns = -ps->pace_tokens * 1e9 / (double)cap;

		ns = ns > PACE_SLEEP_NS ? PACE_SLEEP_NS : ns + 1;
		nanosleep(&(struct timespec){ .tv_nsec = (long)ns }, NULL);
		cap = pace_cap(c);
		if (!cap) { /* the cap was lifted: no debt */
			ps->pace_t = 0;
			break;
		}
		pace_refill(ps, cap, now_ns());
	}
	return 0;
}

/* Page i, claimed by the caller, into the batch, then pacing.  0 or -errno. */
int src_push_page(struct pusher *ps, uint64_t i, uint16_t flags)
{
	size_t n;

	if (PUSH_BUF - ps->used[ps->cur] < MIG_PAGE_FRAME_MAX) {
		int r = flush(ps);
		if (r)
			return r;
	}
	n = src_put_page(ps->s, ps->c, ps->buf[ps->cur] + ps->used[ps->cur], i, flags,
			 ps->s->o->compress ? &ps->cctx : NULL);
	ps->used[ps->cur] += n;
	return pace(ps, n);
}

/*
 * The run that starts at page i (claimed, of kind zero): i and the pages
 * after it of the same kind that nobody claimed yet, claimed now, at most
 * MIG_MAX_RUN_PAGES, not past the pusher's share (when i is in it).  A
 * page is looked at before it is claimed, so a page of the other kind
 * stays unclaimed for the next run (or a demand reply).  Short enough
 * that a fault on a page it claimed waits for 128 KiB more at most (and
 * s->flush_now sends it at once).
 */
/*
 * Raw runs stay short: a fault on a page of a run waits until the whole
 * run has arrived and is installed, and with runs of 32 pages (128 KiB)
 * the VMM's fault p99 was 3x higher (bench/ab, 256 MiB: 400 against 126
 * us), the push no faster.  Zero runs carry no data: they stay long.
 */
#define PUSH_RAW_RUN_PAGES 8

static unsigned gather_run(const struct pusher *ps, uint64_t i, int zero)
{
	struct src *s = ps->s;
	uint64_t end = i < ps->hi ? ps->hi : s->nr_pages;
	unsigned n = 1, max = zero ? MIG_MAX_RUN_PAGES : PUSH_RAW_RUN_PAGES;
	while (n < max && i + n < end && !bit_test(s->sent, i + n) &&
	       page_is_zero(s->vm->ram + (i + n) * PAGE_SIZE) == zero &&
	       !bit_test_and_set(s->sent, i + n))
		n++;
	return n;
}

/*
 * Page i, claimed by the caller, and the run it starts into the batch as
 * one PAGE_RUN frame (peers with MIG_FEAT_RUNS), then pacing.  *n: the
 * pages sent.  0 or -errno.
 */
static int push_run(struct pusher *ps, uint64_t i, unsigned *n)
{
	struct src *s = ps->s;
	struct mig_conn *c = ps->c;
	int zero = page_is_zero(s->vm->ram + i * PAGE_SIZE);
	struct mig_page_run run = { .addr = i * PAGE_SIZE,
				    .count = gather_run(ps, i, zero),
				    .encoding = zero ? MIG_PAGE_ZERO : MIG_PAGE_RAW };
	size_t data = zero ? 0 : (size_t)run.count * PAGE_SIZE;
	size_t need = sizeof(struct mig_frame_hdr) + sizeof(run) + data;

	if (PUSH_BUF - ps->used[ps->cur] < need) {
		int r = flush(ps);
		if (r)
			return r;
	}
	ps->used[ps->cur] += mig_conn_put(c, ps->buf[ps->cur] + ps->used[ps->cur], MIG_MSG_PAGE_RUN,
					  &run, sizeof(run), s->vm->ram + run.addr, data);
	if (zero) {
		__atomic_fetch_add(&s->counts.pages_zero, run.count, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->counts.pages_pushed_zero, run.count, __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&s->counts.pages_normal, run.count, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&s->counts.bytes_pages, sizeof(run) + data, __ATOMIC_RELAXED);
	*n = run.count;
	return pace(ps, need);
}

/* The next page to push, claimed; -1 when every page is sent. */
static int64_t next_page(struct pusher *ps)
{
	struct src *s = ps->s;
	for (;;) {
		while (ps->pre_left) {
			/*
			 * Adaptive windows run long (PREPAGE_MAX): a newer fault's
			 * window goes first, the vCPU has moved on.  A racy peek:
			 * the hint is taken under the lock below.
			 */
			if (s->hint.pp.adaptive &&
			    __atomic_load_n(&s->hint.n[ps->k], __ATOMIC_RELAXED))
				break;
			uint64_t i = ps->pre_next;
			ps->pre_next += (uint64_t)ps->pre_step;
			ps->pre_left--;
			if (i >= s->nr_pages) {
				ps->pre_left = 0;
				break;
			}
			if (!bit_test_and_set(s->sent, i)) {
				__atomic_fetch_add(&s->counts.prepage_pages, 1, __ATOMIC_RELAXED);
				return (int64_t)i;
			}
		}
		mig_lock(&s->hint.lock, MIG_RANK_SRC_HINT);
		if (s->hint.n[ps->k]) {
			struct src_window w = s->hint.win[ps->k][--s->hint.n[ps->k]];
			mig_unlock(&s->hint.lock);
			ps->pre_next = w.start;
			ps->pre_step = w.step;
			ps->pre_left = w.count;
			continue;
		}
		mig_unlock(&s->hint.lock);
		while (ps->cursor < ps->hi) {
			uint64_t w = ~__atomic_load_n(&s->sent[ps->cursor / 64], __ATOMIC_ACQUIRE);
			w &= ~0ull << (ps->cursor % 64);
			if (!w) {
				ps->cursor = (ps->cursor / 64 + 1) * 64;
				continue;
			}
			uint64_t i = (ps->cursor / 64) * 64 + (uint64_t)__builtin_ctzll(w);
			if (i >= ps->hi) {
				ps->cursor = ps->hi;
				break;
			}
			ps->cursor = i + 1;
			if (!bit_test_and_set(s->sent, i))
				return (int64_t)i;
		}
		return -1;
	}
}

/*
 * The push waits for RUNNING: until the destination's vCPUs run, its main
 * thread loads the state, and a push racing it for the CPUs and the
 * destination's receive path made the downtime 1-1.6 ms longer on two
 * cores (the load's wake-up waited behind the push's threads).  No vCPU
 * needs a page before then, and nothing the destination does before it
 * resumes waits for the push, so this only moves the push's start by the
 * downtime.  The bound is there in case a peer never sends RUNNING.
 */
#define RUNNING_WAIT_MS 200

void src_wait_running(struct src *s)
{
	struct timespec ts = mig_mono_ts(now_ns() + RUNNING_WAIT_MS * 1000000ull);

	mig_lock(&s->lock, MIG_RANK_SRC);
	while (!s->heard.running_seen && !s->broken && !s->fatal && !s->complete)
		if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT)
			break;
	mig_unlock(&s->lock);
}

/* n more pages pushed: query-migrate's figures fresh within 256 KiB, the progress line. */
static void pushed(struct src *s, unsigned n)
{
	__atomic_fetch_add(&s->counts.sent_count, n, __ATOMIC_RELAXED);
	uint64_t total = __atomic_add_fetch(&s->counts.pages_pushed, n, __ATOMIC_RELAXED);
	if ((total & ~63ull) != ((total - n) & ~63ull))
		src_publish(s);
	if ((total & ~1023ull) != ((total - n) & ~1023ull))
		src_progress(s, "postcopy");
}

/* This push thread is done now: the push's end is the last thread's. */
static void note_push_end(struct src *s)
{
	uint64_t now = now_ns(), end = __atomic_load_n(&s->times.t_push_end, __ATOMIC_RELAXED);
	while (end < now && !__atomic_compare_exchange_n(&s->times.t_push_end, &end, now, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* The share is sent: DONE(1), everything drained. */
static int push_done(struct pusher *ps)
{
	struct mig_done d = { .phase = 1, .pages = ps->hi - ps->lo };
	int r = push_frame(ps, MIG_MSG_DONE, &d, sizeof(d), NULL, 0);
	if (!r)
		r = src_drain(ps);
	return r;
}

/* Every page of the share nobody claimed, in batches.  0, or -errno when a send failed. */
static int push_share(struct pusher *ps)
{
	struct src *s = ps->s;
	/* Runs of raw pages, unless they are to be compressed page by page. */
	int runs = (ps->c->wire.features & MIG_FEAT_RUNS) && !s->o->compress;
	int r = 0;
	while (!r && !src_stopped(s) && !__atomic_load_n(&s->complete, __ATOMIC_ACQUIRE)) {
		int64_t i = next_page(ps);
		unsigned n = 1;
		if (i < 0)
			return 1;
		r = runs ? push_run(ps, (uint64_t)i, &n) : src_push_page(ps, (uint64_t)i, 0);
		/*
		 * Small batches while faults wait: a page claimed by the push may
		 * be the one a vCPU is blocked on.
		 */
		ps->frames += n;
		if (!r && (__atomic_exchange_n(&s->flush_now, 0, __ATOMIC_ACQ_REL) ||
			   ps->frames >= PUSH_BATCH_PAGES)) {
			r = flush(ps);
			ps->frames = 0;
		}
		if (!r)
			pushed(s, n);
	}
	return r;
}

/*
 * Bulk channel k's push thread: every page of its share nobody claimed
 * yet (and the pre-paging after faults in its share), then DONE(1) on its
 * channel, until COMPLETE, a break, or a send that failed (a break then).
 */
static void push_channel(struct src *s, unsigned k)
{
	struct pusher ps;
	if (src_pusher_init(&ps, s)) {
		src_set_break(s, 1, "push: out of memory");
		src_pusher_free(&ps);
		return;
	}
	uint64_t cpu0 = mig_thread_cpu_ns();
	ps.k = k;
	ps.c = s->links.bulk[k];
	src_share(s, k, &ps.lo, &ps.hi);
	ps.cursor = ps.lo;
	__atomic_store_n(&s->push_features, ps.c->wire.features, __ATOMIC_RELAXED);
	src_wait_running(s);
	int r = push_share(&ps); /* 1: every page of the share went */
	/*
	 * Every page is out, or COMPLETE came first: the destination can have
	 * every page before this thread looks for the next one (its last
	 * batch went, and it was descheduled), and the push's rate must not
	 * read 0 then.
	 */
	if (r == 1)
		r = src_stopped(s) || __atomic_load_n(&s->complete, __ATOMIC_ACQUIRE)
			? 0
			: push_done(&ps);
	if (!r && (!src_stopped(s) || __atomic_load_n(&s->complete, __ATOMIC_ACQUIRE)))
		note_push_end(s);
	if (r && !src_stopped(s) && !__atomic_load_n(&s->complete, __ATOMIC_ACQUIRE))
		src_set_break(s, 0, "bulk channel: send failed (connection lost)");
	src_pusher_free(&ps);
	__atomic_fetch_add(&s->counts.push_cpu_ns, mig_thread_cpu_ns() - cpu0, __ATOMIC_RELAXED);
}

struct push_arg {
	struct src *s;
	unsigned k;
};

static void *push_thread(void *arg)
{
	struct push_arg *a = arg;
	push_channel(a->s, a->k);
	free(a);
	return NULL;
}

/*
 * One push thread per bulk channel, into t[]: how many started.  A thread
 * that cannot start breaks the link (the recovery starts them again).
 */
unsigned src_start_push(struct src *s, pthread_t *t)
{
	unsigned k;
	for (k = 0; k < s->links.nr_bulk; k++) {
		struct push_arg *a = malloc(sizeof(*a));
		if (a)
			*a = (struct push_arg){ .s = s, .k = k };
		if (!a || pthread_create(&t[k], NULL, push_thread, a)) {
			free(a);
			src_set_break(s, 0, "cannot start a push thread");
			break;
		}
	}
	return k;
}
