// SPDX-License-Identifier: GPL-2.0
/*
 * mig-evil: an adversarial migration peer.  As a source it connects to a
 * destination and sends one malformed stream; as a destination it answers a
 * source with a hostile page request.  The process under test must reject
 * the stream with a clear message and exit non-zero, having written nothing.
 *
 *   mig-evil CASE tcp:HOST:PORT [--mem SIZE] [--tls-psk FILE]
 *
 * Source-side cases (the peer under test is a destination):
 *   bad-magic bad-hdr-crc unknown-type bad-version truncated out-of-ram
 *   unaligned length-mismatch bad-checksum bad-zstd bad-layout no-hello
 *   big-frame (a 16 MiB frame header before any handshake)
 *   bulk-index bulk-count (HELLO: bulk channel 2 of 2, 9 bulk channels)
 *   old-hello (a version 3 HELLO, 40 bytes)
 *   count-mismatch (urgent says 2 bulk channels, its bulk channel 3)
 *   run-out-of-ram run-count-zero run-bad-len run-bad-flags (a PAGE_RUN
 *   breaking its contract), run-not-agreed (one although MIG_FEAT_RUNS was
 *   not agreed), run-precopy (a valid one before the switch-over),
 *   run-nocrc-plain (MIG_FEAT_NO_PAYLOAD_CRC announced on plain TCP, and
 *   a PAGE_RUN without its CRC)
 * Scripted sessions (a source that follows the protocol, then misbehaves;
 * the peer under test is mig-memtest's destination, which checks the RAM):
 *   reset-installed      pages installed, link broken before STATE: recovery
 *                        must keep them and COMPLETE must not come early
 *   reset-before-resume  a reconnection reset before RESUME, then a real one
 *   intruder             a "recovery" by a third party during a healthy link
 *                        (with --tls-psk: first a plain one, then one with the key)
 *   idlers               three silent connections ahead of the real recovery
 *   stall                half the pages, then silence with the links open
 *   claim-stall          claims the session (urgent HELLO) and does nothing
 *   ping-only            after the switch-over, heartbeats and nothing else
 *   ping-flood           the last page as a demand reply, then a PING flood
 *                        on the urgent channel: COMPLETE must come during it
 *   ansi-error           an ERROR with terminal escapes and a forged log line
 *   late-dirty           precopy pages, PRECOPY_DIRTY, DONE(0), STATE, then a
 *                        second PRECOPY_DIRTY naming the staged pages: a
 *                        frame of the switch-over after it, to be refused
 *   bad-state            a migration of a snapshot (--snapshot FILE) whose
 *                        state has a non-canonical RIP: the guest crashes
 *   forged-state         a migration of a snapshot's state as it is (forged
 *                        beforehand, tests/host/lib/snapshot-edit.py): the
 *                        destination must refuse it and run nothing
 * Destination-side cases (the peer under test is a source; this listens):
 *   evil-request         a PAGE_REQUEST outside RAM
 *   drop-precopy         hangs up as soon as the channels are open
 *   silent-layout        LAYOUT never acknowledged
 *   stall-dest           RUNNING, then nothing is read any more
 *   lying-complete       COMPLETE right after STATE
 *   ping-layout          heartbeats instead of the LAYOUT acknowledgement
 *   ping-resume          the state, a cut, then heartbeats instead of RESUME
 * Scripted cases exit 3 when the peer under test misbehaved (message on
 * stderr).
 * Exit 0 when the stream was sent (the verdict is the peer's), 2 on usage,
 * 1 when this program itself could not connect or listen.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "migrate/auth.h"
#include "migrate/net.h"
#include "migrate/tls.h"

static uint64_t ram_size = 16 << 20;
static uint64_t session = 0x5eed;
static uint32_t attempt = 1; /* HELLO.attempt: one per pair of channels */
static const char *snapshot_path = "";
/* --tls-psk: the scripted sessions speak TLS (an intruder holding the key). */
static struct mig_tls_ctx *tls;

static void send_raw(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		len -= (size_t)w;
	}
}

/* HELLO.nr_bulk of the next hello() (count-mismatch changes it). */
static uint16_t hello_nr_bulk = 1;

static struct mig_hello hello(int channel, uint32_t features)
{
	struct mig_hello h = {
		.version = MIG_VERSION,
		.role = MIG_ROLE_SOURCE,
		.channel = channel,
		.page_size = PAGE_SIZE,
		.session_id = session,
		.ram_size = ram_size,
		.features = features,
		.attempt = attempt,
		.nr_bulk = hello_nr_bulk,
	};
	return h;
}

/*
 * The session secret as a source learns it (the first urgent connection
 * gets it); an intruder never has it and proves with zeroes.
 */
static uint8_t secret[MIG_SECRET_LEN];
static int have_secret;

/* After HELLO: learn the secret, or answer the challenge.  0, or -1. */
static int authenticate(struct mig_conn *c, int channel)
{
	char err[300];
	struct mig_frame_hdr fh;
	const uint8_t *p;
	struct mig_auth a;
	if (mig_conn_recv(c, &fh, &p, err, sizeof(err)) || fh.type != MIG_MSG_AUTH) {
		fprintf(stderr, "mig-evil: %s channel: no AUTH after HELLO\n", c->name);
		return -1;
	}
	memcpy(&a, p, sizeof(a));
	if (a.kind == MIG_AUTH_SECRET) {
		memcpy(secret, a.data, sizeof(secret));
		have_secret = 1;
		return 0;
	}
	struct mig_auth proof = { .kind = MIG_AUTH_PROOF }, ours = { .kind = MIG_AUTH_CHALLENGE };
	uint8_t bind[MIG_SECRET_LEN];
	if (have_secret && !mig_conn_binding(c, bind))
		mig_auth_proof(secret, MIG_ROLE_SOURCE, a.data, session, (uint16_t)channel, bind,
			       proof.data);
	if (mig_conn_send(c, MIG_MSG_AUTH, &proof, sizeof(proof), NULL, 0) ||
	    mig_conn_send(c, MIG_MSG_AUTH, &ours, sizeof(ours), NULL, 0))
		return -1;
	/* The destination's proof of our (all-zero) nonce; an intruder gets ERROR. */
	if (mig_conn_recv(c, &fh, &p, err, sizeof(err)) || fh.type != MIG_MSG_AUTH) {
		fprintf(stderr, "mig-evil: %s channel: refused at AUTH\n", c->name);
		return -1;
	}
	return 0;
}

/* Open a channel and say a valid HELLO; wait for the answer; authenticate. */
static int open_channel(struct mig_addr *sa, int channel, uint32_t features, struct mig_conn *c)
{
	char err[300];
	int fd = mig_connect(sa, 3000, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "mig-evil: %s\n", err);
		exit(1);
	}
	mig_conn_init(c, fd, channel == MIG_CHAN_URGENT ? "urgent" : "bulk", MIG_ROLE_DEST,
		      features);
	c->wire.ram_size = ram_size;
	struct mig_hello h = hello(channel, features);
	mig_conn_send(c, MIG_MSG_HELLO, &h, sizeof(h), NULL, 0);
	struct mig_frame_hdr fh;
	const uint8_t *p;
	if (mig_conn_recv(c, &fh, &p, err, sizeof(err)) || fh.type != MIG_MSG_HELLO) {
		fprintf(stderr, "mig-evil: handshake refused: %s\n", err);
		return -1;
	}
	return authenticate(c, channel);
}

/* Give the peer time to read, judge and close before we go. */
static void linger(int fd)
{
	char b[256];
	struct timeval tv = { .tv_sec = 60 }; /* a hang guard: the peer closes long before */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (recv(fd, b, sizeof(b), 0) > 0)
		;
}

static struct mig_conn u, b;

/*
 * The run-* cases: one PAGE_RUN on the bulk channel after the handshake,
 * each breaking one rule of its contract (wire.h).  -1: not a run case.
 */
static int evil_run(const char *cs)
{
	static uint8_t frame[MIG_RUN_FRAME_MAX], pages[MIG_MAX_RUN_PAGES * PAGE_SIZE];
	struct mig_page_run run = { .addr = 8 * PAGE_SIZE, .count = 4 };
	size_t data = 4 * PAGE_SIZE;
	memset(pages, 0x5a, sizeof(pages));
	if (!strcmp(cs, "run-out-of-ram"))
		run.addr = ram_size - 2 * PAGE_SIZE; /* two of its four pages past the end */
	else if (!strcmp(cs, "run-count-zero"))
		run.count = 0; /* with four pages of data */
	else if (!strcmp(cs, "run-bad-len"))
		data = 3 * PAGE_SIZE;
	else if (!strcmp(cs, "run-bad-flags"))
		run.flags = 0x8;
	else if (strcmp(cs, "run-not-agreed") && strcmp(cs, "run-precopy") &&
		 strcmp(cs, "run-nocrc-plain"))
		return -1;
	size_t n = mig_conn_put(&b, frame, MIG_MSG_PAGE_RUN, &run, sizeof(run), pages, data);
	if (!strcmp(cs, "run-nocrc-plain")) {
		/* No payload CRC, as if MIG_FEAT_NO_PAYLOAD_CRC held on plain TCP. */
		struct mig_frame_hdr fh;
		memcpy(&fh, frame, sizeof(fh));
		mig_frame_hdr_init(&fh, fh.type, fh.len, fh.seq, 0);
		memcpy(frame, &fh, sizeof(fh));
	}
	send_raw(b.fd, frame, n);
	linger(b.fd);
	return 0;
}

static int evil_source(const char *cs, struct mig_addr *sa)
{
	uint8_t buf[2 * PAGE_SIZE + 256];
	char err[300];
	struct mig_page pg = { .encoding = MIG_PAGE_RAW,
			       .flags = MIG_PAGEF_PRECOPY,
			       .data_len = PAGE_SIZE };
	uint8_t page[PAGE_SIZE];
	memset(page, 0xa5, sizeof(page));

	/* Cases that break the very first frame. */
	if (!strcmp(cs, "big-frame")) {
		/* A 16 MiB STATE header before any handshake, and no payload. */
		int fd = mig_connect(sa, 3000, err, sizeof(err));
		if (fd < 0) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return 1;
		}
		struct mig_frame_hdr fh;
		mig_frame_hdr_init(&fh, MIG_MSG_STATE, MIG_MAX_PAYLOAD, 0, 0);
		send_raw(fd, &fh, sizeof(fh));
		linger(fd);
		close(fd);
		return 0;
	}
	if (!strcmp(cs, "bad-magic") || !strcmp(cs, "bad-hdr-crc") || !strcmp(cs, "unknown-type") ||
	    !strcmp(cs, "bad-version") || !strcmp(cs, "no-hello") || !strcmp(cs, "bulk-index") ||
	    !strcmp(cs, "bulk-count") || !strcmp(cs, "old-hello")) {
		int fd = mig_connect(sa, 3000, err, sizeof(err));
		if (fd < 0) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return 1;
		}
		mig_conn_init(&u, fd, "urgent", MIG_ROLE_DEST, 0);
		struct mig_hello h = hello(MIG_CHAN_URGENT, 0);
		if (!strcmp(cs, "bad-version"))
			h.version = 99;
		if (!strcmp(cs, "bulk-index")) { /* bulk channel 2 of 2 */
			h.channel = MIG_CHAN_BULK;
			h.nr_bulk = 2;
			h.bulk_index = 2;
		}
		if (!strcmp(cs, "bulk-count"))
			h.nr_bulk = MIG_MAX_CHANNELS + 1;
		if (!strcmp(cs, "old-hello"))
			h.version = 3; /* and 40 bytes, version 3's HELLO */
		size_t n;
		if (!strcmp(cs, "no-hello")) {
			struct mig_layout l = { .ram_size = ram_size, .page_size = PAGE_SIZE };
			n = mig_conn_put(&u, buf, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
		} else {
			size_t len = !strcmp(cs, "old-hello") ? 40 : sizeof(h);
			n = mig_conn_put(&u, buf, MIG_MSG_HELLO, &h, len, NULL, 0);
		}
		struct mig_frame_hdr fh;
		memcpy(&fh, buf, sizeof(fh));
		if (!strcmp(cs, "bad-magic"))
			fh.magic = 0x4c4c4548; /* "HELL" */
		if (!strcmp(cs, "bad-hdr-crc"))
			fh.len ^= 0; /* header intact but its CRC flipped */
		if (!strcmp(cs, "unknown-type")) {
			fh.type = 77;
			fh.hdr_crc = crc32c(0, &fh, offsetof(struct mig_frame_hdr, hdr_crc));
		} else if (!strcmp(cs, "bad-hdr-crc")) {
			fh.hdr_crc ^= 0x1;
		}
		memcpy(buf, &fh, sizeof(fh));
		send_raw(fd, buf, n);
		linger(fd);
		return 0;
	}

	uint32_t feats = !strcmp(cs, "bad-zstd") ? MIG_FEAT_ZSTD : 0;
	if (!strncmp(cs, "run-", 4) && strcmp(cs, "run-not-agreed"))
		feats = MIG_FEAT_RUNS;
	if (!strcmp(cs, "run-nocrc-plain")) /* announced on plain TCP: never agreed */
		feats |= MIG_FEAT_NO_PAYLOAD_CRC;
	if (!strcmp(cs, "count-mismatch"))
		hello_nr_bulk = 2; /* the urgent channel says 2 bulk channels... */
	if (open_channel(sa, MIG_CHAN_URGENT, feats, &u))
		return 1;
	if (!strcmp(cs, "count-mismatch")) {
		hello_nr_bulk = 3; /* ...its bulk channel 3: authenticated, then refused */
		if (!open_channel(sa, MIG_CHAN_BULK, feats, &b))
			linger(b.fd);
		return 0;
	}
	if (open_channel(sa, MIG_CHAN_BULK, feats, &b))
		return 1;
	struct mig_layout l = { .ram_size = ram_size, .page_size = PAGE_SIZE, .nr_regions = 1 };
	l.regions[0].size = ram_size;
	if (!strcmp(cs, "bad-layout")) {
		l.regions[0].size = ram_size / 2; /* covers half of RAM */
		mig_conn_send(&u, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
		linger(u.fd);
		return 0;
	}
	mig_conn_send(&u, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	int r = evil_run(cs);
	if (r >= 0)
		return r;

	size_t n;
	if (!strcmp(cs, "truncated")) {
		pg.addr = 0;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, sizeof(page));
		send_raw(b.fd, buf, n - 1000); /* stop inside the payload */
		shutdown(b.fd, SHUT_WR);
		linger(b.fd);
		return 0;
	}
	if (!strcmp(cs, "out-of-ram")) {
		pg.addr = ram_size; /* one page past the end */
	} else if (!strcmp(cs, "unaligned")) {
		pg.addr = 3 * PAGE_SIZE + 8;
	} else if (!strcmp(cs, "length-mismatch")) {
		pg.addr = PAGE_SIZE;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, 100);
		send_raw(b.fd, buf, n);
		linger(b.fd);
		return 0;
	} else if (!strcmp(cs, "bad-checksum")) {
		pg.addr = 2 * PAGE_SIZE;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, sizeof(page));
		buf[n - 100] ^= 0x40; /* one bit of the page data */
		send_raw(b.fd, buf, n);
		linger(b.fd);
		return 0;
	} else if (!strcmp(cs, "bad-zstd")) {
		pg.addr = 4 * PAGE_SIZE;
		pg.encoding = MIG_PAGE_ZSTD;
		pg.data_len = 64;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, 64);
		send_raw(b.fd, buf, n);
		linger(b.fd);
		return 0;
	} else {
		fprintf(stderr, "mig-evil: unknown case '%s'\n", cs);
		return 2;
	}
	n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, sizeof(page));
	send_raw(b.fd, buf, n);
	linger(b.fd);
	return 0;
}

/* ---- Scripted sessions: a source that follows the protocol, then misbehaves ---- */

/*
 * The adversary's own "guest RAM": page i is filled with (i * 31 + 7) &
 * 0xff, so the STATE blob can carry its CRC32C the way mig-memtest's source
 * does, and the destination's verdict ("checksum ok") checks every page.
 */
#define MEMTEST_STATE_MAGIC 0x54534d4dull

struct memtest_blob {
	uint64_t magic;
	uint64_t ram_size;
	uint32_t checksum;
	uint32_t pad;
};

struct sess {
	struct mig_addr sa;
	struct mig_conn u, b;
	uint8_t *ram;
	uint64_t nr_pages;
	uint8_t *have; /* the last RESUME's bitmap */
};

static void sess_close(struct sess *s)
{
	mig_conn_close(&s->u);
	mig_conn_close(&s->b);
}

/*
 * The next frame on c that is not informative here (RUNNING, a page
 * request: every page is pushed anyway), waiting at most ms; 0, -EAGAIN
 * when nothing came in time, or -1 with a message.
 */
static int recv_frame(struct mig_conn *c, int ms, struct mig_frame_hdr *h, const uint8_t **p)
{
	char err[300];
	int r;
	/* A total deadline: heartbeats from a peer that says nothing else do not extend it. */
	mig_conn_set_rcvtimeo(c, ms);
	mig_conn_set_deadline(c, now_ns() + (uint64_t)ms * 1000000ull);
	for (;;) {
		r = mig_conn_recv(c, h, p, err, sizeof(err));
		if (r == -ETIMEDOUT) {
			r = -EAGAIN;
			break;
		}
		if (r) {
			fprintf(stderr, "mig-evil: %s\n", err);
			r = -1;
			break;
		}
		if (h->type != MIG_MSG_RUNNING && h->type != MIG_MSG_PAGE_REQUEST)
			break;
	}
	mig_conn_set_deadline(c, 0);
	return r;
}

/* Connect one channel and complete its handshake. */
static int sess_open(struct sess *s, struct mig_conn *c, int channel, int recover)
{
	char err[300];
	int fd = mig_connect(&s->sa, 3000, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return -1;
	}
	/* A destination that stops reading must not hold us in a send for ever. */
	struct timeval tv = { .tv_sec = 60 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	mig_conn_init(c, fd, channel == MIG_CHAN_URGENT ? "urgent" : "bulk", MIG_ROLE_DEST, 0);
	c->wire.ram_size = ram_size;
	if (mig_tls_secure(tls, c, 3000, err, sizeof(err))) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return -1;
	}
	struct mig_hello h = hello(channel, 0);
	if (recover)
		h.flags = MIG_HELLO_RECOVER;
	mig_conn_send(c, MIG_MSG_HELLO, &h, sizeof(h), NULL, 0);
	struct mig_frame_hdr fh;
	const uint8_t *p;
	if (recv_frame(c, 10000, &fh, &p))
		return -1;
	if (fh.type != MIG_MSG_HELLO) {
		fprintf(stderr, "mig-evil: %s channel refused: %s\n", c->name,
			mig_msg_name(fh.type));
		return -1;
	}
	return authenticate(c, channel);
}

static int sess_layout(struct sess *s);

/* Both channels, LAYOUT and its acknowledgement. */
static int sess_start(struct sess *s)
{
	s->nr_pages = ram_size / PAGE_SIZE;
	s->ram = malloc(ram_size);
	if (!s->ram)
		return -1;
	for (uint64_t i = 0; i < ram_size; i++)
		s->ram[i] = (uint8_t)((i / PAGE_SIZE) * 31 + 7);
	if (sess_open(s, &s->u, MIG_CHAN_URGENT, 0) || sess_open(s, &s->b, MIG_CHAN_BULK, 0))
		return -1;
	return sess_layout(s);
}

/* LAYOUT and its acknowledgement (again after a recovery that lost the state). */
static int sess_layout(struct sess *s)
{
	struct mig_layout l = { .ram_size = ram_size, .page_size = PAGE_SIZE, .nr_regions = 1 };
	l.regions[0].size = ram_size;
	mig_conn_send(&s->u, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
	struct mig_frame_hdr fh;
	const uint8_t *p;
	if (recv_frame(&s->u, 10000, &fh, &p) || fh.type != MIG_MSG_LAYOUT) {
		fprintf(stderr, "mig-evil: LAYOUT not acknowledged\n");
		return -1;
	}
	return 0;
}

/* DONE(0) on bulk (the switch-over), then STATE on urgent. */
static int sess_switch(struct sess *s, int with_state)
{
	struct mig_done d0 = { .phase = 0 };
	int r = mig_conn_send(&s->b, MIG_MSG_DONE, &d0, sizeof(d0), NULL, 0);
	if (r || !with_state)
		return r;
	struct memtest_blob blob = { .magic = MEMTEST_STATE_MAGIC,
				     .ram_size = ram_size,
				     .checksum = crc32c(0, s->ram, ram_size) };
	struct mig_state_hdr sh = { .blob_len = sizeof(blob) };
	return mig_conn_send(&s->u, MIG_MSG_STATE, &sh, sizeof(sh), &blob, sizeof(blob));
}

/* Push pages [from, to) on bulk, skipping those set in have (may be NULL). */
static int sess_push(struct sess *s, uint64_t from, uint64_t to, const uint8_t *have)
{
	for (uint64_t i = from; i < to; i++) {
		if (have && ((have[i / 8] >> (i % 8)) & 1))
			continue;
		struct mig_page pg = { .addr = i * PAGE_SIZE,
				       .encoding = MIG_PAGE_RAW,
				       .data_len = PAGE_SIZE };
		if (mig_conn_send(&s->b, MIG_MSG_PAGE, &pg, sizeof(pg), s->ram + i * PAGE_SIZE,
				  PAGE_SIZE))
			return -1;
	}
	return 0;
}

/*
 * Break the link cleanly, bulk channel first: the destination reads every
 * frame sent on it (installing the pages) before it sees the end and closes
 * it; then the urgent channel.  Nothing is left unread, so no reset is sent.
 */
static void sess_cut(struct sess *s)
{
	shutdown(s->b.fd, SHUT_WR);
	linger(s->b.fd);
	shutdown(s->u.fd, SHUT_WR);
	linger(s->u.fd);
	sess_close(s);
}

/* Reconnect both channels as a recovery; *bm gets RESUME's bitmap (s->have). */
static int sess_recover(struct sess *s, uint8_t **bm, uint32_t *flags)
{
	attempt++;
	if (sess_open(s, &s->u, MIG_CHAN_URGENT, 1) || sess_open(s, &s->b, MIG_CHAN_BULK, 1))
		return -1;
	struct mig_frame_hdr fh;
	const uint8_t *p;
	if (recv_frame(&s->u, 30000, &fh, &p) || fh.type != MIG_MSG_RESUME) {
		fprintf(stderr, "mig-evil: no RESUME after the reconnection\n");
		return -1;
	}
	struct mig_resume rs;
	memcpy(&rs, p, sizeof(rs));
	*flags = rs.flags;
	free(s->have);
	s->have = malloc((s->nr_pages + 7) / 8);
	if (!s->have)
		return -1;
	memcpy(s->have, p + sizeof(rs), (s->nr_pages + 7) / 8);
	*bm = s->have;
	return 0;
}

/* 1 if COMPLETE arrived within ms, 0 if not, -1 if the link failed. */
static int sess_complete(struct sess *s, int ms)
{
	struct mig_frame_hdr fh;
	const uint8_t *p;
	struct pollfd pfd = { .fd = s->u.fd, .events = POLLIN };
	uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		int64_t left = (int64_t)(end - now_ns()) / 1000000;
		if (left <= 0)
			return 0;
		if (!mig_conn_buffered(&s->u) && poll(&pfd, 1, (int)left) <= 0)
			return 0;
		int r = recv_frame(&s->u, (int)left + 1, &fh, &p);
		if (r == -EAGAIN)
			return 0;
		if (r)
			return -1;
		if (fh.type == MIG_MSG_COMPLETE)
			return 1;
	}
}

static uint64_t count_bits(const uint8_t *bm, uint64_t n)
{
	uint64_t k = 0;
	for (uint64_t i = 0; i < n; i++)
		k += (bm[i / 8] >> (i % 8)) & 1;
	return k;
}

/*
 * reset-installed: pages pushed after DONE(0) are installed, then the link
 * breaks before STATE.  The recovery must keep them (RESUME lists them) and
 * completion must count each page once: COMPLETE before the last pages
 * were even sent is a lie that leaves the guest waiting forever.
 */
static int case_reset_installed(struct sess *s)
{
	const uint64_t early = 64, late = 64;
	if (sess_start(s) || sess_switch(s, 0) || sess_push(s, 0, early, NULL))
		return 1;
	sess_cut(s);
	uint8_t *bm;
	uint32_t flags;
	if (sess_recover(s, &bm, &flags))
		return 1;
	uint64_t kept = count_bits(bm, s->nr_pages);
	fprintf(stderr, "mig-evil: RESUME flags 0x%x lists %llu of the %llu pages installed\n",
		flags, (unsigned long long)kept, (unsigned long long)early);
	if (!(flags & MIG_RESUME_NEED_STATE) || sess_layout(s) || sess_switch(s, 1) ||
	    sess_push(s, 0, s->nr_pages - late, bm))
		return 1;
	if (sess_complete(s, 1000) == 1) {
		fprintf(stderr, "mig-evil: LIE: COMPLETE although %llu pages were never sent\n",
			(unsigned long long)late);
		return 3;
	}
	if (sess_push(s, s->nr_pages - late, s->nr_pages, bm) || sess_complete(s, 60000) != 1) {
		fprintf(stderr, "mig-evil: no COMPLETE after every page was sent\n");
		return 3;
	}
	if (kept != early) {
		fprintf(stderr, "mig-evil: recovery forgot %llu installed pages\n",
			(unsigned long long)(early - kept));
		return 3;
	}
	return 0;
}

/*
 * reset-before-resume: a reconnection whose urgent channel is reset after
 * its HELLO, before RESUME could be sent; then a proper reconnection.  The
 * destination must survive the failed RESUME and finish the migration.
 */
static int case_reset_before_resume(struct sess *s)
{
	if (sess_start(s) || sess_switch(s, 1) || sess_push(s, 0, s->nr_pages / 2, NULL))
		return 1;
	sess_cut(s);
	attempt++; /* a first reconnection attempt that goes wrong */
	if (sess_open(s, &s->u, MIG_CHAN_URGENT, 1))
		return 1;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(s->u.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	mig_conn_close(&s->u); /* a reset, not a close */
	sess_open(s, &s->b, MIG_CHAN_BULK, 1);
	mig_conn_close(&s->b);
	uint8_t *bm;
	uint32_t flags;
	if (sess_recover(s, &bm, &flags) || sess_push(s, 0, s->nr_pages, bm) ||
	    sess_complete(s, 60000) != 1) {
		fprintf(stderr, "mig-evil: the migration did not complete after the reset\n");
		return 3;
	}
	return 0;
}

/*
 * intruder: while the link is healthy, a third party that knows the
 * session id (it travels in every HELLO) connects as a "recovery".  It must
 * be refused, and the live link must go on undisturbed.
 */
/*
 * With TLS: a stranger without the key, but holding the session's secret
 * (the worst case), sends a plain recovery HELLO.  The destination must
 * refuse it at the TLS handshake; the caller checks that the live link
 * goes on.  0 when refused.
 */
static int plain_stranger(struct sess *s)
{
	struct mig_tls_ctx *saved = tls;
	struct sess x = { .sa = s->sa, .u.fd = -1, .b.fd = -1 };
	int refused;

	tls = NULL; /* sess_open() speaks TLS when tls is set */
	refused = sess_open(&x, &x.u, MIG_CHAN_URGENT, 1) != 0;
	sess_close(&x);
	tls = saved;
	fprintf(stderr, "mig-evil: a plain stranger was %s\n", refused ? "refused" : "ACCEPTED");
	return refused ? 0 : -1;
}

static int case_intruder(struct sess *s)
{
	if (sess_start(s) || sess_switch(s, 1) || sess_push(s, 0, s->nr_pages / 2, NULL))
		return 1;
	if (tls && plain_stranger(s))
		return 3;
	struct sess x = { .sa = s->sa, .u.fd = -1, .b.fd = -1 };
	uint8_t known[MIG_SECRET_LEN];
	memcpy(known, secret, sizeof(known));
	have_secret = 0; /* the intruder saw HELLOs, not the first AUTH */
	if (sess_open(&x, &x.u, MIG_CHAN_URGENT, 1) == 0 &&
	    sess_open(&x, &x.b, MIG_CHAN_BULK, 1) == 0) {
		struct mig_frame_hdr fh;
		const uint8_t *p;
		if (recv_frame(&x.u, 10000, &fh, &p) == 0 && fh.type == MIG_MSG_RESUME) {
			fprintf(stderr, "mig-evil: FORGED recovery accepted: RESUME sent to an "
					"intruder\n");
			return 3;
		}
	}
	sess_close(&x);
	memcpy(secret, known, sizeof(secret));
	have_secret = 1;
	fprintf(stderr, "mig-evil: the intruder was refused\n");
	if (sess_push(s, s->nr_pages / 2, s->nr_pages, NULL) || sess_complete(s, 60000) != 1) {
		fprintf(stderr, "mig-evil: the live link did not survive the intruder\n");
		return 3;
	}
	return 0;
}

/*
 * idlers: the link breaks; three connections that never say a word arrive
 * before the real source reconnects.  The reconnection must be served
 * within the destination's recovery deadline all the same.
 */
static int case_idlers(struct sess *s)
{
	if (sess_start(s) || sess_switch(s, 1) || sess_push(s, 0, s->nr_pages / 2, NULL))
		return 1;
	sess_cut(s);
	char err[300];
	int idle[3];
	for (int k = 0; k < 3; k++)
		idle[k] = mig_connect(&s->sa, 3000, err, sizeof(err));
	uint8_t *bm;
	uint32_t flags;
	if (sess_recover(s, &bm, &flags) || sess_push(s, 0, s->nr_pages, bm) ||
	    sess_complete(s, 60000) != 1) {
		fprintf(stderr, "mig-evil: the recovery behind idle connections failed\n");
		return 3;
	}
	for (int k = 0; k < 3; k++)
		if (idle[k] >= 0)
			close(idle[k]);
	return 0;
}

/* stall: half the pages, then silence with the connections open (as SIGSTOP). */
static int case_stall(struct sess *s)
{
	if (sess_start(s) || sess_switch(s, 1) || sess_push(s, 0, s->nr_pages / 2, NULL))
		return 1;
	fprintf(stderr, "mig-evil: stalling\n");
	for (;;)
		pause();
}

/* n PING frames into buf (24 bytes each): one write sends them all. */
static size_t put_pings(struct mig_conn *c, uint8_t *buf, unsigned n)
{
	size_t len = 0;
	for (unsigned k = 0; k < n; k++)
		len += mig_conn_put(c, buf + len, MIG_MSG_PING, NULL, 0, NULL, 0);
	return len;
}

/*
 * A stranger that speaks the protocol (plain TCP) claims the session with
 * an urgent HELLO, learns its secret, and then does nothing for 20 s: the
 * real source, told BUSY meanwhile, must get in once the claim goes stale.
 */
static int case_claim_stall(struct sess *s)
{
	if (sess_open(s, &s->u, MIG_CHAN_URGENT, 0))
		return 1;
	fprintf(stderr, "mig-evil: claimed the session, stalling\n");
	nanosleep(&(struct timespec){ 20, 0 }, NULL);
	return 0;
}

/*
 * After the switch-over, heartbeats and nothing else, every 100 ms for up
 * to 60 s: the destination must see that no page request is answered and
 * give up within its deadline (it used to wait for ever: PINGs kept the
 * link "alive").
 */
static int case_ping_only(struct sess *s)
{
	if (sess_start(s) || sess_switch(s, 1))
		return 1;
	fprintf(stderr, "mig-evil: only heartbeats from now on\n");
	for (int k = 0; k < 600; k++) {
		if (mig_conn_send(&s->u, MIG_MSG_PING, NULL, 0, NULL, 0))
			return 0; /* the destination closed the link: its verdict */
		nanosleep(&(struct timespec){ 0, 100 * 1000000 }, NULL);
	}
	fprintf(stderr, "mig-evil: the destination took 60 s of heartbeats for progress\n");
	return 3;
}

/*
 * A PING flood on the urgent channel (about 20,000 a second) right behind
 * the last page, sent as a demand reply in the same write: COMPLETE must
 * come while the flood goes on (the page used to wait, uninstalled, until
 * the flood stopped).  Exit 3 when COMPLETE did not come within 20 s.
 */
static int case_ping_flood(struct sess *s)
{
	enum {
		BURST = 200
	};
	uint8_t *buf = malloc(MIG_PAGE_FRAME_MAX + BURST * 24);
	int got = 0;
	if (!buf || sess_start(s) || sess_switch(s, 1))
		return 1;
	uint64_t last = s->nr_pages - 1;
	struct mig_page pg = { .addr = last * PAGE_SIZE,
			       .encoding = MIG_PAGE_RAW,
			       .flags = MIG_PAGEF_DEMAND,
			       .data_len = PAGE_SIZE };
	if (sess_push(s, 0, last, NULL))
		return 1;
	size_t len = mig_conn_put(&s->u, buf, MIG_MSG_PAGE, &pg, sizeof(pg),
				  s->ram + last * PAGE_SIZE, PAGE_SIZE);
	len += put_pings(&s->u, buf + len, BURST);
	for (int k = 0; k < 2000 && got == 0; k++) { /* 2000 bursts of 200, 10 ms apart */
		if (mig_conn_write(&s->u, buf, len))
			break;
		len = put_pings(&s->u, buf, BURST);
		got = sess_complete(s, 10);
	}
	free(buf);
	if (got == 1) {
		fprintf(stderr, "mig-evil: COMPLETE came during the PING flood\n");
		return 0;
	}
	fprintf(stderr, "mig-evil: no COMPLETE during 20 s of PING flood\n");
	return 3;
}

/* A VMM state blob's checksum (version 3: CRC32C), its field at offset 24 read as 0. */
static uint64_t state_checksum(uint8_t *blob, size_t len)
{
	memset(blob + 24, 0, 8);
	return crc32c(0, blob, len);
}

/*
 * Where vCPU 0's RIP lies in a state blob: inside its REGS section (type 1,
 * struct kvm_regs, RIP after 16 general registers), found by walking the
 * sections (docs/vmm.md), whatever their order; 0 if there is none.
 */
static size_t regs_rip_offset(const uint8_t *blob, size_t len)
{
	size_t pos = 64; /* struct vm_state_header */

	while (pos + 16 <= len) {
		uint32_t type, index;
		uint64_t size;

		memcpy(&type, blob + pos, 4);
		memcpy(&index, blob + pos + 4, 4);
		memcpy(&size, blob + pos + 8, 8);
		pos += 16;
		if (size > len - pos)
			return 0;
		if (type == 1 && index == 0 && size >= 17 * 8)
			return pos + 16 * 8;
		pos += (size + 7) & ~(uint64_t)7;
	}
	return 0;
}

/*
 * A snapshot of `vmm run --save-after MS FILE` (vmm/snapshot.h): its RAM
 * becomes the session's.  Unless as_is, its state blob gets a
 * non-canonical RIP (in vCPU 0's struct kvm_regs) and a checksum that
 * matches again, so the VMM accepts it and the guest crashes.
 */
static int load_bad_state(struct sess *s, const char *path, bool as_is, uint8_t **blob,
			  size_t *blob_len)
{
	FILE *f = fopen(path, "rb");
	uint64_t h[8];
	if (!f || fread(h, 8, 8, f) != 8) {
		fprintf(stderr, "mig-evil: cannot read the snapshot %s\n", path);
		return -1;
	}
	uint64_t state_off = h[2], state_size = h[3], ram_off = h[4], ram = h[5];
	ram_size = ram;
	s->nr_pages = ram / PAGE_SIZE;
	s->ram = calloc(1, ram);
	*blob = malloc(state_size);
	*blob_len = state_size;
	if (!s->ram || !*blob || state_size < 256 || fseek(f, (long)state_off, SEEK_SET) ||
	    fread(*blob, 1, state_size, f) != state_size || fseek(f, (long)ram_off, SEEK_SET)) {
		fprintf(stderr, "mig-evil: bad snapshot %s\n", path);
		return -1;
	}
	size_t got = fread(s->ram, 1, ram, f); /* zero pages at the end may be holes */
	(void)got;
	fclose(f);
	if (as_is)
		return 0;
	uint64_t rip = 0x8000000000001000ull, rip_at = regs_rip_offset(*blob, state_size);
	if (!rip_at) {
		fprintf(stderr, "mig-evil: no vCPU 0 registers in the snapshot %s\n", path);
		return -1;
	}
	memcpy(*blob + rip_at, &rip, 8);
	uint64_t sum = state_checksum(*blob, state_size);
	memcpy(*blob + 24, &sum, 8);
	return 0;
}

/*
 * bad-state: a whole, well-formed migration whose VM state the guest cannot
 * run.  The guest crashes at the destination: that is a failed migration,
 * to be reported to the source, never COMPLETE.  forged-state (as_is): the
 * state is the snapshot's own, which the test forged; the destination
 * refuses it, which ends the same way here.
 */
static int case_bad_state(struct sess *s, const char *snapshot, bool as_is)
{
	uint8_t *blob;
	size_t len;
	if (load_bad_state(s, snapshot, as_is, &blob, &len) ||
	    sess_open(s, &s->u, MIG_CHAN_URGENT, 0) || sess_open(s, &s->b, MIG_CHAN_BULK, 0) ||
	    sess_layout(s) || sess_switch(s, 0))
		return 1;
	struct mig_state_hdr sh = { .blob_len = len };
	mig_conn_send(&s->u, MIG_MSG_STATE, &sh, sizeof(sh), blob, len);
	free(blob);
	sess_push(s, 0, s->nr_pages, NULL);
	struct mig_frame_hdr fh;
	const uint8_t *p;
	for (;;) {
		int r = recv_frame(&s->u, 60000, &fh, &p);
		if (r || fh.type == MIG_MSG_ERROR) {
			fprintf(stderr, "mig-evil: the destination %s\n",
				r ? "hung up" : "reported an error");
			return 0;
		}
		if (fh.type == MIG_MSG_COMPLETE) {
			fprintf(stderr, "mig-evil: COMPLETE although the %s\n",
				as_is ? "state was forged" : "guest crashed");
			return 3;
		}
	}
}

/* ansi-error: an ERROR whose text would paint the terminal and forge a log line. */
static int case_ansi_error(struct sess *s)
{
	static const char text[] = "\x1b[2J\x1b[31mboom\nmemtest: dest: checksum ok 0xdeadbeef";
	if (sess_start(s))
		return 1;
	struct mig_error e = { .code = MIG_ERR_INTERNAL, .msg_len = sizeof(text) - 1 };
	mig_conn_send(&s->b, MIG_MSG_ERROR, &e, sizeof(e), text, e.msg_len);
	linger(s->b.fd);
	return 0;
}

/*
 * late-dirty: a precopy of the first half of RAM, its end (an empty
 * PRECOPY_DIRTY, DONE(0), STATE), then PRECOPY_DIRTY again naming every
 * staged page, then the push of the other half: what a source believes
 * sent is withdrawn after the switch-over.  PRECOPY_DIRTY belongs before
 * DONE(0) on bulk channel 0 (wire.h); the destination must refuse it.
 * 3 when it took it (COMPLETE came, or nothing within 30 s).
 */
static int case_late_dirty(struct sess *s)
{
	uint64_t half;
	size_t bytes;
	uint8_t *bm;
	struct mig_dirty dh;
	if (sess_start(s))
		return 1;
	half = s->nr_pages / 2;
	bytes = (s->nr_pages + 7) / 8;
	bm = calloc(1, bytes);
	if (!bm)
		return 1;
	dh.nr_pages = s->nr_pages;
	for (uint64_t i = 0; i < half; i++) {
		struct mig_page pg = { .addr = i * PAGE_SIZE,
				       .encoding = MIG_PAGE_RAW,
				       .flags = MIG_PAGEF_PRECOPY,
				       .data_len = PAGE_SIZE };
		if (mig_conn_send(&s->b, MIG_MSG_PAGE, &pg, sizeof(pg), s->ram + i * PAGE_SIZE,
				  PAGE_SIZE))
			goto out;
	}
	if (mig_conn_send(&s->b, MIG_MSG_PRECOPY_DIRTY, &dh, sizeof(dh), bm, bytes) ||
	    sess_switch(s, 1))
		goto out;
	for (uint64_t i = 0; i < half; i++)
		bm[i / 8] |= (uint8_t)(1u << (i % 8));
	fprintf(stderr, "mig-evil: PRECOPY_DIRTY after the switch-over\n");
	if (mig_conn_send(&s->b, MIG_MSG_PRECOPY_DIRTY, &dh, sizeof(dh), bm, bytes))
		goto out;
	sess_push(s, half, s->nr_pages, NULL);
	for (;;) {
		struct mig_frame_hdr fh;
		const uint8_t *p;
		int r = recv_frame(&s->u, 30000, &fh, &p);
		if (r == -EAGAIN) {
			fprintf(stderr, "mig-evil: no verdict within 30 s\n");
			free(bm);
			return 3;
		}
		if (r || fh.type == MIG_MSG_ERROR) {
			fprintf(stderr, "mig-evil: the destination %s\n",
				r ? "hung up" : "reported an error");
			break;
		}
		if (fh.type == MIG_MSG_COMPLETE) {
			fprintf(stderr, "mig-evil: COMPLETE: PRECOPY_DIRTY taken after the "
					"switch-over\n");
			free(bm);
			return 3;
		}
	}
out:
	free(bm);
	return 0;
}

static int evil_session(const char *cs, struct mig_addr *sa)
{
	struct sess s = { .sa = *sa, .u.fd = -1, .b.fd = -1 };
	int r = 2;
	if (!strcmp(cs, "reset-installed"))
		r = case_reset_installed(&s);
	else if (!strcmp(cs, "reset-before-resume"))
		r = case_reset_before_resume(&s);
	else if (!strcmp(cs, "intruder"))
		r = case_intruder(&s);
	else if (!strcmp(cs, "idlers"))
		r = case_idlers(&s);
	else if (!strcmp(cs, "stall"))
		r = case_stall(&s);
	else if (!strcmp(cs, "ping-only"))
		r = case_ping_only(&s);
	else if (!strcmp(cs, "claim-stall"))
		r = case_claim_stall(&s);
	else if (!strcmp(cs, "ping-flood"))
		r = case_ping_flood(&s);
	else if (!strcmp(cs, "ansi-error"))
		r = case_ansi_error(&s);
	else if (!strcmp(cs, "late-dirty"))
		r = case_late_dirty(&s);
	else if (!strcmp(cs, "bad-state"))
		r = case_bad_state(&s, snapshot_path, false);
	else if (!strcmp(cs, "forged-state"))
		r = case_bad_state(&s, snapshot_path, true);
	sess_close(&s);
	free(s.ram);
	free(s.have);
	return r;
}

/* ---- Hostile destinations (this listens; the peer under test is a source) ---- */

/* Accept both channels and answer their HELLOs; 0 or -1. */
/*
 * The bulk channel's AUTH as a destination whose secret is `key` (the
 * one it sent): take the source's proof (unchecked) and its challenge,
 * prove the secret back.
 */
static int dest_prove(struct mig_conn *c, uint64_t sid, uint16_t channel, const uint8_t *key)
{
	char err[300];
	struct mig_frame_hdr h;
	const uint8_t *p;
	struct mig_auth in, out = { .kind = MIG_AUTH_PROOF };
	uint8_t bind[MIG_SECRET_LEN];
	for (int n = 0; n < 2; n++)
		if (mig_conn_recv(c, &h, &p, err, sizeof(err)) || h.type != MIG_MSG_AUTH) {
			fprintf(stderr, "mig-evil: no proof and challenge on the bulk channel\n");
			return -1;
		}
	memcpy(&in, p, sizeof(in));
	if (mig_conn_binding(c, bind) ||
	    mig_auth_proof(key, MIG_ROLE_DEST, in.data, sid, channel, bind, out.data))
		return -1;
	return mig_conn_send(c, MIG_MSG_AUTH, &out, sizeof(out), NULL, 0) ? -1 : 0;
}

/* Accept both channels (a recovery: both challenged) and run their handshake. */
static int dest_accept_as(int lfd, struct mig_conn c[2], int recover)
{
	char err[300];
	for (int k = 0; k < 2; k++) {
		int fd = accept(lfd, NULL, NULL);
		mig_conn_init(&c[k], fd, "in", MIG_ROLE_SOURCE, 0);
		struct mig_frame_hdr h;
		const uint8_t *p;
		if (mig_conn_recv(&c[k], &h, &p, err, sizeof(err))) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return -1;
		}
		struct mig_hello m;
		memcpy(&m, p, sizeof(m));
		ram_size = m.ram_size;
		m.role = MIG_ROLE_DEST;
		mig_conn_send(&c[k], MIG_MSG_HELLO, &m, sizeof(m), NULL, 0);
		int challenge = k || recover;
		struct mig_auth a = { .kind = challenge ? MIG_AUTH_CHALLENGE : MIG_AUTH_SECRET };
		mig_conn_send(&c[k], MIG_MSG_AUTH, &a, sizeof(a), NULL, 0);
		if (challenge && dest_prove(&c[k], m.session_id, m.channel, a.data))
			return -1;
	}
	return 0;
}

static int dest_accept(int lfd, struct mig_conn c[2])
{
	return dest_accept_as(lfd, c, 0);
}

/* The source's next frame on the urgent channel that is not a heartbeat. */
static int dest_expect(struct mig_conn *c, uint16_t type)
{
	struct mig_frame_hdr h;
	const uint8_t *p;
	if (recv_frame(c, 30000, &h, &p) || h.type != type) {
		fprintf(stderr, "mig-evil: expected %s from the source\n", mig_msg_name(type));
		return -1;
	}
	if (type == MIG_MSG_LAYOUT)
		mig_conn_send(c, MIG_MSG_LAYOUT, p, h.len, NULL, 0);
	return 0;
}

/*
 * Heartbeats instead of the awaited reply (what), every 100 ms for up to
 * 60 s; 0 once the source hung up (its verdict), 3 if it never did.
 */
static int dest_pings(struct mig_conn c[2], const char *what)
{
	fprintf(stderr, "mig-evil: heartbeats instead of %s\n", what);
	for (int k = 0; k < 600; k++) {
		struct pollfd p = { .fd = c[0].fd, .events = POLLIN };
		char junk[4096];
		if (poll(&p, 1, 100) > 0 && recv(c[0].fd, junk, sizeof(junk), 0) <= 0)
			return 0;
		if (mig_conn_send(&c[0], MIG_MSG_PING, NULL, 0, NULL, 0))
			return 0;
	}
	fprintf(stderr, "mig-evil: the source took 60 s of heartbeats for %s\n", what);
	return 3;
}

static int evil_dest(const char *cs, struct mig_addr *sa)
{
	char err[300];
	int lfd = mig_listen(sa, err, sizeof(err));
	if (lfd < 0) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return 1;
	}
	static struct mig_conn c[2];
	if (dest_accept(lfd, c))
		return 1;
	if (!strcmp(cs, "evil-request")) {
		/* Ask for a page outside RAM. */
		struct mig_page_request q = { .count = 1 };
		uint64_t addr = ram_size + 16 * PAGE_SIZE;
		for (int k = 0; k < 2; k++)
			mig_conn_send(&c[k], MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8);
	} else if (!strcmp(cs, "drop-precopy")) {
		/* Hang up at once: a precopy in progress fails. */
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		for (int k = 0; k < 2; k++)
			setsockopt(c[k].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	} else if (!strcmp(cs, "silent-layout")) {
		/* Read LAYOUT, never acknowledge it (keep reading: no back-pressure). */
	} else if (!strcmp(cs, "ping-layout")) {
		/* Read LAYOUT, answer heartbeats only, for up to 60 s. */
		struct mig_frame_hdr h;
		const uint8_t *p;
		if (recv_frame(&c[0], 30000, &h, &p) || h.type != MIG_MSG_LAYOUT)
			return 1;
		return dest_pings(c, "LAYOUT");
	} else if (!strcmp(cs, "ping-resume")) {
		/* Take the state, cut, take the reconnection, heartbeats instead of RESUME. */
		struct mig_running run = { 0 };
		if (dest_expect(&c[0], MIG_MSG_LAYOUT) || dest_expect(&c[0], MIG_MSG_STATE))
			return 1;
		mig_conn_send(&c[0], MIG_MSG_RUNNING, &run, sizeof(run), NULL, 0);
		mig_conn_close(&c[0]);
		mig_conn_close(&c[1]);
		if (dest_accept_as(lfd, c, 1))
			return 1;
		return dest_pings(c, "RESUME");
	} else if (!strcmp(cs, "stall-dest")) {
		/* Take the state, say RUNNING, then stop reading altogether. */
		struct mig_running run = { 0 };
		if (dest_expect(&c[0], MIG_MSG_LAYOUT) || dest_expect(&c[0], MIG_MSG_STATE))
			return 1;
		mig_conn_send(&c[0], MIG_MSG_RUNNING, &run, sizeof(run), NULL, 0);
		fprintf(stderr, "mig-evil: stalling\n");
		for (;;)
			pause();
	} else if (!strcmp(cs, "lying-complete")) {
		/* Take the state, then claim every page arrived. */
		struct mig_running run = { 0 };
		struct mig_complete m = { .pages_received = ram_size / PAGE_SIZE };
		if (dest_expect(&c[0], MIG_MSG_LAYOUT) || dest_expect(&c[0], MIG_MSG_STATE))
			return 1;
		mig_conn_send(&c[0], MIG_MSG_RUNNING, &run, sizeof(run), NULL, 0);
		mig_conn_send(&c[0], MIG_MSG_COMPLETE, &m, sizeof(m), NULL, 0);
	}
	if (strcmp(cs, "drop-precopy"))
		linger(c[0].fd);
	mig_conn_close(&c[0]);
	mig_conn_close(&c[1]);
	close(lfd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr,
			"usage: mig-evil CASE tcp:HOST:PORT [--mem MiB | --snapshot FILE]\n");
		return 2;
	}
	struct mig_addr sa;
	char err[300];
	for (int i = 3; i + 1 < argc; i += 2) {
		struct mig_tls_opts t = { .psk_file = argv[i + 1] };
		if (!strcmp(argv[i], "--mem"))
			ram_size = strtoull(argv[i + 1], NULL, 0) << 20;
		else if (!strcmp(argv[i], "--snapshot"))
			snapshot_path = argv[i + 1];
		else if (!strcmp(argv[i], "--tls-psk") &&
			 mig_tls_ctx_new(&t, false, &tls, err, sizeof(err))) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (mig_addr_parse(argv[2], &sa, err, sizeof(err))) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return 2;
	}
	const char *cs = argv[1];
	if (!strcmp(cs, "evil-request") || !strcmp(cs, "silent-layout") ||
	    !strcmp(cs, "drop-precopy") || !strcmp(cs, "stall-dest") ||
	    !strcmp(cs, "lying-complete") || !strcmp(cs, "ping-layout") ||
	    !strcmp(cs, "ping-resume"))
		return evil_dest(cs, &sa);
	if (!strcmp(cs, "reset-installed") || !strcmp(cs, "reset-before-resume") ||
	    !strcmp(cs, "intruder") || !strcmp(cs, "idlers") || !strcmp(cs, "stall") ||
	    !strcmp(cs, "bad-state") || !strcmp(cs, "forged-state") || !strcmp(cs, "ansi-error") ||
	    !strcmp(cs, "ping-only") || !strcmp(cs, "ping-flood") || !strcmp(cs, "claim-stall") ||
	    !strcmp(cs, "late-dirty"))
		return evil_session(cs, &sa);
	u.fd = b.fd = -1;
	int r = evil_source(argv[1], &sa);
	mig_conn_close(&u);
	mig_conn_close(&b);
	return r;
}
