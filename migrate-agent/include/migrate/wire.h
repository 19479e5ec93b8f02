/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The postcopy migration wire protocol: the ONE definition of every byte the
 * source and the destination exchange.  docs/wire-protocol.md is the prose
 * version of this file.
 *
 * Shape of a stream
 *   Every message is a frame: a fixed 24-byte header (struct mig_frame_hdr)
 *   followed by exactly hdr.len payload bytes.  The header carries its own
 *   CRC32C and the CRC32C of the payload, so a flipped bit anywhere is
 *   caught before anything is acted on.  All integers are little-endian
 *   (both ends are x86_64; the parser refuses nothing else because nothing
 *   else is ever built).
 *
 * Channels
 *   A migration uses two TCP connections from the source to the destination:
 *     urgent  (MIG_CHAN_URGENT): HELLO, LAYOUT, STATE, then page requests
 *             from the destination and their replies; TCP_NODELAY; never
 *             carries bulk data, so a demand fault is never queued behind
 *             the background push (like QEMU's postcopy-preempt channel).
 *     bulk    (MIG_CHAN_BULK): HELLO, then the background push of pages.
 *   The source may open several bulk channels (HELLO.nr_bulk, 1 to
 *   MIG_MAX_CHANNELS; QEMU's multifd, here for postcopy): bulk channel k
 *   (HELLO.bulk_index) pushes the pages of its own share of RAM,
 *   [k * nr_pages / nr_bulk, (k + 1) * nr_pages / nr_bulk), in postcopy.
 *   Precopy pages, PRECOPY_DIRTY and DONE(0) travel on bulk channel 0 only.
 *   A connection attempt is the urgent channel and all nr_bulk bulk
 *   channels; a break of any one breaks the link, and a recovery opens
 *   them all again.
 *   The first frame on each connection, in each direction, must be HELLO;
 *   nothing else is accepted before it but an ERROR (the peer refuses the
 *   connection and says why).  Then AUTH (see struct mig_auth):
 *   the first urgent connection of a session receives the session's secret,
 *   every other connection must prove it knows it.
 *
 * Addresses
 *   A page is named by its byte offset in the guest RAM object (0 ..
 *   ram_size - 1, page aligned), never by a host or guest-physical address.
 *   The parser checks every offset against the ram_size agreed in HELLO.
 */
#ifndef MIGRATE_WIRE_H
#define MIGRATE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/crc32c.h"
#include "common/page.h" /* PAGE_SIZE: a page on the wire is a page of guest RAM */

/* ---- Constants ---- */

/* Both ends must agree on it, whatever a host's own page size. */
_Static_assert(PAGE_SIZE == 4096, "the wire carries 4 KiB pages");

#define MIG_MAGIC	  0x474d4350u /* "PCMG" read as little-endian bytes */
#define MIG_VERSION	  4u /* 2: AUTH, PING; 3: mutual, TLS-bound proofs; 4: HELLO.nr_bulk */
#define MIG_MAX_PAYLOAD	  (16u << 20) /* STATE and RESUME are the big ones */
#define MIG_MAX_REQ_PAGES 512u	      /* addresses in one PAGE_REQUEST */
#define MIG_MAX_REGIONS	  8u	      /* guest-physical regions in LAYOUT */
#define MIG_MAX_ERROR_MSG 256u
#define MIG_MAX_CHANNELS  8u	       /* bulk channels of one connection attempt (HELLO.nr_bulk) */
#define MIG_MAX_RAM_SIZE  (1ull << 38) /* 256 GiB: a whole-RAM bitmap fits one frame */
#define MIG_ZSTD_MAX_LEN  PAGE_SIZE    /* compressed pages are smaller, or sent raw */
/* The largest PAGE frame, header included. */
#define MIG_PAGE_FRAME_MAX (24u + 16u + PAGE_SIZE)
#define MIG_MAX_RUN_PAGES  32u /* pages in one PAGE_RUN (128 KiB) */
/* The largest PAGE_RUN frame, header included. */
#define MIG_RUN_FRAME_MAX (24u + 16u + MIG_MAX_RUN_PAGES * PAGE_SIZE)

enum mig_msg_type {
	MIG_MSG_HELLO = 1,
	MIG_MSG_LAYOUT = 2,
	MIG_MSG_STATE = 3,
	MIG_MSG_PAGE = 4,
	MIG_MSG_PAGE_REQUEST = 5,
	MIG_MSG_RUNNING = 6,
	MIG_MSG_COMPLETE = 7,
	MIG_MSG_RESUME = 8,
	MIG_MSG_ERROR = 9,
	MIG_MSG_PRECOPY_DIRTY = 10,
	MIG_MSG_DONE = 11,
	MIG_MSG_AUTH = 12,
	MIG_MSG_PING = 13,
	MIG_MSG_PAGE_RUN = 14,
	MIG_MSG_MAX = 14,
};

enum mig_channel {
	MIG_CHAN_URGENT = 1,
	MIG_CHAN_BULK = 2,
};

/* HELLO.role */
enum mig_role {
	MIG_ROLE_SOURCE = 1,
	MIG_ROLE_DEST = 2,
};

/* HELLO.flags */
#define MIG_HELLO_RECOVER (1u << 0) /* reconnection of a broken session */
#define MIG_HELLO_KNOWN	  (MIG_HELLO_RECOVER)

/*
 * HELLO.features
 * MIG_FEAT_NO_PAYLOAD_CRC: PAGE and PAGE_RUN frames carry payload_crc 0 and
 * their payloads are not checksummed; every header still is.  Safe only
 * because a TLS session's AEAD already authenticates every byte of the
 * stream (a flipped or forged byte fails the record, and the session with
 * it), so the CRC checks nothing the cipher did not.  A side announces it
 * only on a TLS connection, and a receiver takes it from the peer only on
 * one (mig_wire_ctx.aead): announced on plain TCP, it is never agreed, so
 * the payload CRCs are checked and a page payload without one is refused.
 */
#define MIG_FEAT_ZSTD		(1u << 0) /* PAGE frames may carry MIG_PAGE_ZSTD */
#define MIG_FEAT_RUNS		(1u << 1) /* the push may send PAGE_RUN frames */
#define MIG_FEAT_NO_PAYLOAD_CRC (1u << 2) /* TLS only: page payloads without CRC */
#define MIG_FEAT_KNOWN		(MIG_FEAT_ZSTD | MIG_FEAT_RUNS | MIG_FEAT_NO_PAYLOAD_CRC)
/* (metrics.c names them, bit by bit: keep its list in step) */

/* PAGE.encoding */
enum mig_page_enc {
	MIG_PAGE_RAW = 0,  /* PAGE_SIZE bytes follow */
	MIG_PAGE_ZERO = 1, /* nothing follows: the page is all zeroes */
	MIG_PAGE_ZSTD = 2, /* one zstd frame follows, decompressing to one page */
};

/* PAGE.flags */
#define MIG_PAGEF_DEMAND  (1u << 0) /* reply to a PAGE_REQUEST (urgent channel) */
#define MIG_PAGEF_PRECOPY (1u << 1) /* sent before the switch-over */
#define MIG_PAGEF_KNOWN	  (MIG_PAGEF_DEMAND | MIG_PAGEF_PRECOPY)

/* ---- Frame header ---- */

/*
 * hdr_crc is the CRC32C of the first 20 bytes of the header; payload_crc the
 * CRC32C of the payload (0 for an empty one is the CRC of nothing, i.e. 0).
 * flags is reserved and must be zero.
 */
struct mig_frame_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	uint32_t len; /* payload bytes after this header */
	uint32_t seq; /* per channel and direction, starting at 0; informative */
	uint32_t payload_crc;
	uint32_t hdr_crc;
};
_Static_assert(sizeof(struct mig_frame_hdr) == 24, "frame header is 24 bytes");

/* ---- Messages ---- */

/*
 * HELLO, both directions, first frame on every connection.
 * Contract: version must equal MIG_VERSION (no negotiation: a peer with
 * another version is refused with an ERROR naming both); page_size must be
 * PAGE_SIZE; the source states ram_size and session_id, the destination
 * states its own ram_size and echoes the session_id.  A reconnection after a
 * broken link sets MIG_HELLO_RECOVER and must carry the session_id of the
 * first connection.  features: the sender's capabilities; what is used is
 * the AND of both.  attempt: the source numbers its connection attempts
 * (urgent and bulk of one attempt carry the same number, later attempts
 * higher ones); the destination pairs channels of one attempt only, the
 * latest, so a channel left over from a failed attempt is never paired
 * with one of the next.  nr_bulk: the number of bulk channels of every
 * attempt (1 to MIG_MAX_CHANNELS, the same on every channel of an
 * attempt: the destination refuses a channel whose nr_bulk differs from
 * its attempt's); bulk_index: this bulk channel's number, below nr_bulk,
 * 0 on the urgent channel.  The destination echoes both, and starts only
 * with the urgent channel and all nr_bulk bulk channels of one attempt.
 * reserved: zero.  A HELLO of another version is refused as such whatever
 * its length (version 3's was 40 bytes, without the last three fields).
 */
struct mig_hello {
	uint32_t version;
	uint16_t role;	  /* enum mig_role */
	uint16_t channel; /* enum mig_channel */
	uint32_t page_size;
	uint32_t flags;
	uint64_t session_id;
	uint64_t ram_size;
	uint32_t features;
	uint32_t attempt;
	uint16_t nr_bulk;    /* bulk channels per attempt, 1..MIG_MAX_CHANNELS */
	uint16_t bulk_index; /* this bulk channel's, < nr_bulk; 0 on urgent */
	uint32_t reserved;   /* zero */
};
_Static_assert(sizeof(struct mig_hello) == 48, "HELLO is 48 bytes");

/*
 * LAYOUT, source -> destination, urgent channel, once, before STATE.
 * Contract: regions map guest-physical ranges onto the RAM object, in order,
 * contiguously (region i starts at RAM offset sum of the earlier sizes); the
 * sizes add up to ram_size, which equals HELLO.ram_size; every gpa and size is
 * page aligned; nr_regions <= MIG_MAX_REGIONS; unused slots are zero.  The
 * destination refuses a layout different from the RAM it has.
 */
struct mig_region {
	uint64_t gpa;
	uint64_t size;
};
struct mig_layout {
	uint64_t ram_size;
	uint32_t page_size;
	uint32_t nr_regions;
	struct mig_region regions[MIG_MAX_REGIONS];
};
_Static_assert(sizeof(struct mig_layout) == 16 + 16 * MIG_MAX_REGIONS, "LAYOUT size");

/*
 * STATE, source -> destination, urgent channel, once, after LAYOUT.
 * Payload: struct mig_state_hdr, then blob_len bytes of the VMM's own state
 * blob (versioned and checksummed by the VMM; opaque here).
 * pause_realtime_ns: the source's CLOCK_REALTIME when it paused the vCPUs,
 * so a destination on a synchronized clock can measure the downtime.
 * Contract: blob_len == frame len - sizeof(struct mig_state_hdr).
 */
struct mig_state_hdr {
	uint64_t pause_realtime_ns;
	uint64_t blob_len;
};
_Static_assert(sizeof(struct mig_state_hdr) == 16, "STATE header is 16 bytes");

/*
 * PAGE, source -> destination.  Urgent channel for replies to requests
 * (MIG_PAGEF_DEMAND), bulk channel for the background push and precopy.
 * Payload: struct mig_page, then data_len bytes.
 * Contract: addr page aligned and addr + PAGE_SIZE <= ram_size;
 * RAW: data_len == PAGE_SIZE; ZERO: data_len == 0; ZSTD: 0 < data_len <
 * PAGE_SIZE, only if both sides have MIG_FEAT_ZSTD, and the data must
 * decompress to exactly PAGE_SIZE bytes; data_len == frame len -
 * sizeof(struct mig_page).  Postcopy never sends a page twice (except a page
 * lost in flight on a broken link, resent after RESUME).
 */
struct mig_page {
	uint64_t addr;
	uint16_t encoding; /* enum mig_page_enc */
	uint16_t flags;	   /* MIG_PAGEF_* */
	uint32_t data_len;
};
_Static_assert(sizeof(struct mig_page) == 16, "PAGE header is 16 bytes");
_Static_assert(MIG_PAGE_FRAME_MAX ==
		   sizeof(struct mig_frame_hdr) + sizeof(struct mig_page) + PAGE_SIZE,
	       "MIG_PAGE_FRAME_MAX");

/*
 * PAGE_RUN, source -> destination, bulk channel, the postcopy push only,
 * only when both sides have MIG_FEAT_RUNS: count consecutive pages of one
 * encoding in one frame, so the destination installs them with one call
 * and receives their data straight into page-aligned memory.
 * Payload: struct mig_page_run, then count * PAGE_SIZE raw bytes
 * (RAW), or nothing (ZERO: every page is all zeroes).
 * Contract: 1 <= count <= MIG_MAX_RUN_PAGES; addr page aligned and
 * addr + count * PAGE_SIZE <= ram_size; encoding RAW or ZERO (never
 * ZSTD); frame len == 16 + count * PAGE_SIZE (RAW) or 16 (ZERO);
 * flags zero (none defined yet); never before the switch-over (postcopy
 * pages only).  Like PAGE: no page twice (a page already installed, e.g.
 * by a demand reply that won the race, is skipped).
 */
struct mig_page_run {
	uint64_t addr;
	uint32_t count;
	uint16_t encoding; /* enum mig_page_enc: RAW or ZERO */
	uint16_t flags;	   /* zero */
};
_Static_assert(sizeof(struct mig_page_run) == 16, "PAGE_RUN header is 16 bytes");
#define MIG_RUNF_KNOWN 0u
_Static_assert(MIG_RUN_FRAME_MAX == sizeof(struct mig_frame_hdr) + sizeof(struct mig_page_run) +
					MIG_MAX_RUN_PAGES * PAGE_SIZE,
	       "MIG_RUN_FRAME_MAX");

/*
 * PAGE_REQUEST, destination -> source, urgent channel.
 * Payload: struct mig_page_request, then count 64-bit page offsets.
 * Contract: 1 <= count <= MIG_MAX_REQ_PAGES; frame len == 8 + 8 * count;
 * every address page aligned and inside RAM.  The source answers each page
 * it has not sent yet on the urgent channel; a page already sent (in flight
 * on the bulk channel) is not sent again.
 */
struct mig_page_request {
	uint32_t count;
	uint32_t reserved; /* zero */
			   /* uint64_t addr[count]; */
};
_Static_assert(sizeof(struct mig_page_request) == 8, "PAGE_REQUEST header is 8 bytes");

/*
 * RUNNING, destination -> source, urgent channel, once: the vCPUs run.
 * resume_realtime_ns: destination CLOCK_REALTIME at resume;
 * dest_downtime_ns: resume minus STATE.pause_realtime_ns (meaningful when
 * the two clocks agree, e.g. on one host).
 */
struct mig_running {
	uint64_t resume_realtime_ns;
	int64_t dest_downtime_ns;
};
_Static_assert(sizeof(struct mig_running) == 16, "RUNNING is 16 bytes");

/*
 * COMPLETE, destination -> source, urgent channel: every page has arrived
 * and been installed; the source may free its RAM and exit.  It carries the
 * destination's own measurements, so the source can print one summary.
 * lat_hist[i] counts demand faults whose latency was in [2^i, 2^(i+1)) us
 * (bucket 0 also holds < 1 us, the last bucket everything above).
 */
#define MIG_HIST_BUCKETS 24
struct mig_complete {
	uint64_t pages_received;
	uint64_t pages_demand;	   /* arrived as a reply on the urgent channel */
	uint64_t pages_pushed;	   /* arrived on the bulk channel */
	uint64_t pages_duplicate;  /* arrived although already present */
	uint64_t faults;	   /* distinct demand faults */
	uint64_t requests_sent;	   /* addresses sent in PAGE_REQUEST */
	uint64_t requests_deduped; /* faults on pages already requested (merged) */
	uint64_t fault_lat_p50_ns;
	uint64_t fault_lat_p99_ns;
	uint64_t fault_lat_max_ns;
	uint64_t blocktime_ns; /* sum over faults of fault -> install */
	uint64_t recoveries;
	uint64_t lat_hist[MIG_HIST_BUCKETS];
};
_Static_assert(sizeof(struct mig_complete) == 8 * (12 + MIG_HIST_BUCKETS), "COMPLETE size");

/*
 * RESUME, destination -> source, urgent channel of a recovered session,
 * right after HELLO.  Payload: struct mig_resume, then a bitmap of
 * (nr_pages + 7) / 8 bytes, bit i set when page i has been received
 * (bit i is bit i % 8 of byte i / 8).  Contract: nr_pages == ram_size /
 * PAGE_SIZE; frame len == 16 + bitmap bytes; only known flags.  The
 * source marks every page not in the bitmap as unsent and pushes it again;
 * the destination then repeats its outstanding requests.
 * MIG_RESUME_NEED_STATE: the link broke before STATE arrived; the source
 * sends LAYOUT, DONE(0) and STATE again (the bitmap is then empty).
 */
#define MIG_RESUME_NEED_STATE (1u << 0)
struct mig_resume {
	uint64_t nr_pages;
	uint32_t flags;
	uint32_t reserved; /* zero */
			   /* uint8_t bitmap[(nr_pages + 7) / 8]; */
};
_Static_assert(sizeof(struct mig_resume) == 16, "RESUME header is 16 bytes");

/*
 * PRECOPY_DIRTY, source -> destination, bulk channel, at the switch-over of
 * a migration with precopy rounds: the pages written since they were last
 * sent.  Same bitmap layout as RESUME.  The destination forgets its copy of
 * each, and they are then sent (once) in postcopy.
 */
struct mig_dirty {
	uint64_t nr_pages;
	/* uint8_t bitmap[(nr_pages + 7) / 8]; */
};
_Static_assert(sizeof(struct mig_dirty) == 8, "PRECOPY_DIRTY header is 8 bytes");
/*
 * A RAM that HELLO accepts must be one that RESUME and PRECOPY_DIRTY can
 * describe: with 1 TiB allowed, RAM above 512 GiB passed HELLO and its
 * recovery or switch-over then failed on the bitmap's frame.
 */
_Static_assert(sizeof(struct mig_resume) + MIG_MAX_RAM_SIZE / PAGE_SIZE / 8 <= MIG_MAX_PAYLOAD &&
		   sizeof(struct mig_dirty) + MIG_MAX_RAM_SIZE / PAGE_SIZE / 8 <= MIG_MAX_PAYLOAD,
	       "a bitmap of the largest RAM fits in one frame");

/*
 * DONE, source -> destination, bulk channel: the precopy phase is over
 * (phase 0, bulk channel 0 only) and the vCPUs are paused; STATE follows
 * on the urgent channel.  Also sent with phase 1 on each bulk channel when
 * its push has been through its share of RAM (pages: the share's size; a
 * page of the share that a request or another channel's pre-paging took
 * went elsewhere).  DONE(1) is informative: completion is the
 * destination's page record.
 */
struct mig_done {
	uint32_t phase;
	uint32_t reserved;
	uint64_t pages;
};
_Static_assert(sizeof(struct mig_done) == 16, "DONE is 16 bytes");

/*
 * ERROR, either direction, any channel: the sender gives up.
 * Payload: struct mig_error, then msg_len bytes of text (no NUL).
 * Contract: msg_len <= MIG_MAX_ERROR_MSG; frame len == 8 + msg_len.
 */
enum mig_error_code {
	MIG_ERR_PROTOCOL = 1,
	MIG_ERR_VERSION = 2,
	MIG_ERR_LAYOUT = 3,
	MIG_ERR_STATE = 4,
	MIG_ERR_INTERNAL = 5,
	MIG_ERR_BUSY = 6,      /* another source's session holds the destination: try again later */
	MIG_ERR_CANCELLED = 7, /* the source's operator cancelled before the switch-over */
};
struct mig_error {
	uint32_t code;
	uint32_t msg_len;
	/* char msg[msg_len]; */
};
_Static_assert(sizeof(struct mig_error) == 8, "ERROR header is 8 bytes");

/*
 * AUTH, right after the HELLO exchange, before anything else on the
 * connection.  The destination draws a random secret per incoming
 * migration (MIG_SECRET_LEN bytes) and sends it with kind SECRET on the
 * first urgent connection of the session, the one that made the session:
 * only that connection learns it, and it never crosses the wire again.
 * Every later connection of the session (its bulk channel, any
 * reconnection) authenticates both ways:
 *   destination -> source  CHALLENGE, data a fresh random nonce Nd
 *   source -> destination  PROOF of Nd, then CHALLENGE with its own nonce Ns
 *   destination -> source  PROOF of Ns, after it checked the source's
 * A PROOF is HMAC-SHA256(secret, label nonce session_id channel binding)
 * (mig_auth_proof(): channel is HELLO.channel | HELLO.bulk_index << 8, so
 * a proof for one bulk channel is no proof for another; the label names
 * the prover, binding is the
 * connection's TLS exporter value, zeroes on plain TCP), so a proof is good
 * for one TLS session only: a relay that forwards a challenge between two
 * sessions gets an answer it cannot use.  A wrong proof gets ERROR and the
 * connection is closed; it never affects the session's live link.  A
 * source that gets a wrong proof talks to an impostor: it closes the
 * connection and, while recovering, tries again.
 * Contract: kind known, reserved zero.
 */
#define MIG_SECRET_LEN 32
enum mig_auth_kind {
	MIG_AUTH_SECRET = 1,	/* destination -> source, first urgent connection */
	MIG_AUTH_CHALLENGE = 2, /* either way, every other connection: a fresh nonce */
	MIG_AUTH_PROOF = 3,	/* either way, the answer to the peer's challenge */
};
struct mig_auth {
	uint32_t kind;
	uint32_t reserved; /* zero */
	uint8_t data[MIG_SECRET_LEN];
};
_Static_assert(sizeof(struct mig_auth) == 40, "AUTH is 40 bytes");

/*
 * PING, either direction, urgent channel, empty payload: a heartbeat, sent
 * when the channel was otherwise quiet for a while (docs/migration.md,
 * liveness).  Receivers consume it silently.  A PING proves the peer's
 * socket open, not that the peer does its job: no wait for a reply or for
 * progress counts it (docs/migration.md, liveness).  Never before AUTH
 * completed: a protocol error there.
 */

/* ---- Checksums and framing ---- */

/* Frames carry CRC32C: crc32c() of common/crc32c.h. */

/* Fill a header for a payload of len bytes whose CRC32C is payload_crc. */
void mig_frame_hdr_init(struct mig_frame_hdr *h, uint16_t type, uint32_t len, uint32_t seq,
			uint32_t payload_crc);

/* ---- The parser ---- */

/*
 * What a connection has agreed so far.  ram_size == 0 until HELLO (then
 * every address is checked against it); features is the AND of both sides.
 */
struct mig_wire_ctx {
	uint64_t ram_size;
	uint32_t features;
	int hello_seen;
	int aead;	      /* a TLS session authenticates every byte (MIG_FEAT_NO_PAYLOAD_CRC) */
	int peer_role;	      /* the role the peer must claim, enum mig_role */
	uint32_t frame_limit; /* nonzero: no longer payload (before the handshake) */
};

/* What an unauthenticated peer may send in one frame: HELLO, AUTH, ERROR. */
#define MIG_HANDSHAKE_FRAME_LIMIT (sizeof(struct mig_error) + MIG_MAX_ERROR_MSG)

/*
 * Check a received header: magic, header CRC, known type, zero flags,
 * length within the limit for its type.  Returns 0 or a negative errno
 * (-EPROTO, -EBADMSG for a CRC, -EMSGSIZE for a length) and a message in
 * err[errlen].
 */
int mig_check_hdr(const struct mig_frame_hdr *h, char *err, size_t errlen);

/*
 * Check a whole payload against its header and the connection: payload CRC,
 * then the message's own contract (see each struct above), every address
 * bounds-checked against ctx->ram_size.  A HELLO updates ctx.  Returns 0 or
 * a negative errno with a message in err; nothing in the payload is to be
 * used unless this returned 0.
 */
int mig_check_payload(struct mig_wire_ctx *ctx, const struct mig_frame_hdr *h, const void *payload,
		      char *err, size_t errlen);
/*
 * The same for a payload received in two parts: head[head_len] (at least
 * the message's fixed part; everything but for PAGE and PAGE_RUN), then
 * data, the rest (h->len - head_len bytes).
 */
int mig_check_parts(struct mig_wire_ctx *ctx, const struct mig_frame_hdr *h, const void *head,
		    uint32_t head_len, const void *data, char *err, size_t errlen);
/*
 * Does a frame of this type go without a payload CRC on a connection with
 * ctx's features (MIG_FEAT_NO_PAYLOAD_CRC agreed, a page payload)?  Then
 * its sender puts payload_crc 0 and its receiver does not check it.
 */
int mig_payload_crc_off(const struct mig_wire_ctx *ctx, uint16_t type);

/* Human name of a message type ("PAGE"), or "?" */
const char *mig_msg_name(unsigned type);

/*
 * Parse a whole byte stream (header, payload, header, ...) the way a
 * receiver does; for the fuzzer and for tests.  Returns the number of frames
 * accepted before the first error (negative errno in *errp, 0 if the stream
 * ended cleanly at a frame boundary, -ENODATA if it ended mid-frame).
 * PAGE payloads are decoded (zstd included) into a scratch page.
 */
long mig_parse_stream(struct mig_wire_ctx *ctx, const uint8_t *buf, size_t len, int *errp,
		      char *err, size_t errlen);

/*
 * Decode a checked PAGE payload into out[PAGE_SIZE].  Returns 0 or a
 * negative errno (-EBADMSG when zstd data does not give exactly one page).
 */
int mig_page_decode(const struct mig_page *p, const void *data, void *out, char *err,
		    size_t errlen);

/* Free this thread's decoding context (call before a decoding thread ends). */
void mig_wire_thread_cleanup(void);

#endif /* MIGRATE_WIRE_H */
