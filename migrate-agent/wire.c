// SPDX-License-Identifier: GPL-2.0
/*
 * The wire protocol's checks: header and payload validation (their CRC32C
 * is common/crc32c.c's), page decoding.  Everything a peer sends passes through mig_check_hdr() and
 * mig_check_payload() before any of it is used; both only read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "migrate/wire.h"

/* ---- Framing ---- */

void mig_frame_hdr_init(struct mig_frame_hdr *h, uint16_t type, uint32_t len, uint32_t seq,
			uint32_t payload_crc)
{
	h->magic = MIG_MAGIC;
	h->type = type;
	h->flags = 0;
	h->len = len;
	h->seq = seq;
	h->payload_crc = payload_crc;
	h->hdr_crc = crc32c(0, h, offsetof(struct mig_frame_hdr, hdr_crc));
}

__attribute__((format(printf, 4, 5))) static int fail(int e, char *err, size_t errlen,
						      const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return e;
}

/*
 * One row per message type: everything the parser and the senders know of
 * it (docs/wire-protocol.md, "Messages").  The header check takes the
 * limit, the payload check the length rule, the order rule and the type's
 * own check; mig_msg_name() the name, mig_payload_crc_off() the page rule.
 * A new type is one row here, its struct in wire.h and its check below.
 */
struct frame_type {
	const char *name;
	uint32_t max;	/* the longest payload, checked on the header alone */
	bool fixed;	/* max is the only length (the others check theirs with the contents) */
	bool first;	/* may come before HELLO: HELLO itself, and a peer's refusal */
	bool versioned; /* starts with a version, refused as such whatever the length */
	bool page_data; /* pages after a 16-byte head: checked in two parts, the payload
			    * CRC agreed away under MIG_FEAT_NO_PAYLOAD_CRC */
	int (*check)(struct mig_wire_ctx *ctx, const uint8_t *pl, uint32_t len, char *err,
		     size_t errlen); /* the type's own contract, on a payload of a good length */
};

/* The row of a known type, else NULL (the table follows the checks). */
static const struct frame_type *frame_type(unsigned type);

int mig_check_hdr(const struct mig_frame_hdr *h, char *err, size_t errlen)
{
	const struct frame_type *t = frame_type(h->type);
	if (h->magic != MIG_MAGIC)
		return fail(-EPROTO, err, errlen, "bad magic 0x%08x (expected 0x%08x)", h->magic,
			    MIG_MAGIC);
	uint32_t crc = crc32c(0, h, offsetof(struct mig_frame_hdr, hdr_crc));
	if (crc != h->hdr_crc)
		return fail(-EBADMSG, err, errlen,
			    "frame header checksum mismatch (got 0x%08x, computed 0x%08x)",
			    h->hdr_crc, crc);
	if (!t)
		return fail(-EPROTO, err, errlen, "unknown message type %u", h->type);
	if (h->flags)
		return fail(-EPROTO, err, errlen, "%s frame with reserved flags 0x%x", t->name,
			    h->flags);
	if (h->len > t->max)
		return fail(-EMSGSIZE, err, errlen, "%s frame length %u exceeds limit %u", t->name,
			    h->len, t->max);
	return 0;
}

static int check_addr(const struct mig_wire_ctx *ctx, uint64_t addr, const char *what, char *err,
		      size_t errlen)
{
	if (addr % PAGE_SIZE)
		return fail(-ERANGE, err, errlen, "%s address 0x%llx not page aligned", what,
			    (unsigned long long)addr);
	if (addr >= ctx->ram_size || ctx->ram_size - addr < PAGE_SIZE)
		return fail(-ERANGE, err, errlen,
			    "%s address 0x%llx outside guest RAM (size 0x%llx)", what,
			    (unsigned long long)addr, (unsigned long long)ctx->ram_size);
	return 0;
}

static int check_hello(struct mig_wire_ctx *ctx, const struct mig_hello *m, char *err,
		       size_t errlen)
{
	if (m->version != MIG_VERSION)
		return fail(-EPROTONOSUPPORT, err, errlen,
			    "peer speaks protocol version %u, this side speaks %u", m->version,
			    MIG_VERSION);
	if (m->page_size != PAGE_SIZE)
		return fail(-EPROTO, err, errlen, "peer page size %u, expected %u", m->page_size,
			    (unsigned)PAGE_SIZE);
	if (ctx->peer_role && m->role != ctx->peer_role)
		return fail(-EPROTO, err, errlen, "peer claims role %u, expected %u", m->role,
			    ctx->peer_role);
	if (m->channel != MIG_CHAN_URGENT && m->channel != MIG_CHAN_BULK)
		return fail(-EPROTO, err, errlen, "unknown channel %u", m->channel);
	if (m->flags & ~MIG_HELLO_KNOWN)
		return fail(-EPROTO, err, errlen, "unknown HELLO flags 0x%x", m->flags);
	if (m->nr_bulk == 0 || m->nr_bulk > MIG_MAX_CHANNELS)
		return fail(-EPROTO, err, errlen, "HELLO with %u bulk channels (1 to %u)",
			    m->nr_bulk, MIG_MAX_CHANNELS);
	if (m->bulk_index >= m->nr_bulk || (m->channel == MIG_CHAN_URGENT && m->bulk_index))
		return fail(-EPROTO, err, errlen,
			    "HELLO for bulk channel %u of %u on the %s channel", m->bulk_index,
			    m->nr_bulk, m->channel == MIG_CHAN_URGENT ? "urgent" : "bulk");
	if (m->reserved)
		return fail(-EPROTO, err, errlen, "HELLO with reserved field 0x%x", m->reserved);
	/* Both roles state the RAM size (the destination knows its own). */
	if (m->ram_size == 0 || m->ram_size % PAGE_SIZE || m->ram_size > MIG_MAX_RAM_SIZE)
		return fail(-EPROTO, err, errlen, "bad RAM size 0x%llx",
			    (unsigned long long)m->ram_size);
	if (ctx->ram_size && m->ram_size && m->ram_size != ctx->ram_size)
		return fail(-EPROTO, err, errlen, "peer RAM size 0x%llx, this side 0x%llx",
			    (unsigned long long)m->ram_size, (unsigned long long)ctx->ram_size);
	if (m->ram_size)
		ctx->ram_size = m->ram_size;
	ctx->features &= m->features;
	if (!ctx->aead) /* on plain TCP the CRC is all there is: never without it */
		ctx->features &= ~MIG_FEAT_NO_PAYLOAD_CRC;
	ctx->hello_seen = 1;
	return 0;
}

static int check_hello_frame(struct mig_wire_ctx *ctx, const uint8_t *pl, uint32_t len, char *err,
			     size_t errlen)
{
	struct mig_hello m;
	(void)len; /* fixed */
	if (ctx->hello_seen)
		return fail(-EPROTO, err, errlen, "second HELLO on a connection");
	memcpy(&m, pl, sizeof(m));
	return check_hello(ctx, &m, err, errlen);
}

static int check_layout_regions(const struct mig_wire_ctx *ctx, const struct mig_layout *l,
				char *err, size_t errlen)
{
	if (l->ram_size != ctx->ram_size)
		return fail(-EPROTO, err, errlen, "LAYOUT RAM size 0x%llx, HELLO said 0x%llx",
			    (unsigned long long)l->ram_size, (unsigned long long)ctx->ram_size);
	if (l->page_size != PAGE_SIZE)
		return fail(-EPROTO, err, errlen, "LAYOUT page size %u", l->page_size);
	if (l->nr_regions == 0 || l->nr_regions > MIG_MAX_REGIONS)
		return fail(-EPROTO, err, errlen, "LAYOUT with %u regions", l->nr_regions);
	uint64_t sum = 0;
	for (unsigned i = 0; i < MIG_MAX_REGIONS; i++) {
		const struct mig_region *r = &l->regions[i];
		if (i >= l->nr_regions) {
			if (r->gpa || r->size)
				return fail(-EPROTO, err, errlen, "LAYOUT unused slot %u not zero",
					    i);
			continue;
		}
		if (r->gpa % PAGE_SIZE || r->size % PAGE_SIZE || r->size == 0 ||
		    r->gpa + r->size < r->gpa)
			return fail(-EPROTO, err, errlen, "LAYOUT region %u malformed", i);
		if (r->size > ctx->ram_size - sum)
			return fail(-EPROTO, err, errlen, "LAYOUT regions exceed RAM size");
		sum += r->size;
	}
	if (sum != ctx->ram_size)
		return fail(-EPROTO, err, errlen, "LAYOUT regions cover 0x%llx of 0x%llx bytes",
			    (unsigned long long)sum, (unsigned long long)ctx->ram_size);
	return 0;
}

static int check_layout(struct mig_wire_ctx *ctx, const uint8_t *pl, uint32_t len, char *err,
			size_t errlen)
{
	struct mig_layout l;
	(void)len; /* fixed */
	memcpy(&l, pl, sizeof(l));
	return check_layout_regions(ctx, &l, err, errlen);
}

/* A page bitmap after a header of hlen bytes that starts with nr_pages. */
static int check_bitmap(const struct mig_wire_ctx *ctx, const void *payload, uint32_t len,
			uint32_t hlen, const char *what, char *err, size_t errlen)
{
	uint64_t nr;
	if (len < hlen)
		return fail(-EPROTO, err, errlen, "%s payload of %u bytes is truncated", what, len);
	memcpy(&nr, payload, 8);
	if (nr != ctx->ram_size / PAGE_SIZE)
		return fail(-EPROTO, err, errlen, "%s for %llu pages, guest RAM has %llu", what,
			    (unsigned long long)nr,
			    (unsigned long long)(ctx->ram_size / PAGE_SIZE));
	if ((uint64_t)len != hlen + (nr + 7) / 8)
		return fail(-EPROTO, err, errlen,
			    "%s length %u does not match %llu pages (expected %llu)", what, len,
			    (unsigned long long)nr, (unsigned long long)(hlen + (nr + 7) / 8));
	if (nr % 8) {
		uint8_t last = ((const uint8_t *)payload)[len - 1];
		if (last >> (nr % 8))
			return fail(-EPROTO, err, errlen, "%s sets bits past the last page", what);
	}
	return 0;
}

static int check_state(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		       size_t errlen)
{
	struct mig_state_hdr s;
	(void)ctx;
	if (len < sizeof(s))
		return fail(-EPROTO, err, errlen, "STATE payload of %u bytes is truncated", len);
	memcpy(&s, payload, sizeof(s));
	if (s.blob_len != len - sizeof(s))
		return fail(-EPROTO, err, errlen,
			    "STATE blob length %llu does not match frame (%zu)",
			    (unsigned long long)s.blob_len, len - sizeof(s));
	return 0;
}

/* The data of a PAGE against its encoding. */
static int check_page_data(const struct mig_wire_ctx *ctx, const struct mig_page *p, char *err,
			   size_t errlen)
{
	switch (p->encoding) {
	case MIG_PAGE_RAW:
		if (p->data_len != PAGE_SIZE)
			return fail(-EPROTO, err, errlen, "raw PAGE 0x%llx with %u data bytes",
				    (unsigned long long)p->addr, p->data_len);
		return 0;
	case MIG_PAGE_ZERO:
		if (p->data_len != 0)
			return fail(-EPROTO, err, errlen, "zero PAGE 0x%llx with %u data bytes",
				    (unsigned long long)p->addr, p->data_len);
		return 0;
	case MIG_PAGE_ZSTD:
		if (!(ctx->features & MIG_FEAT_ZSTD))
			return fail(-EPROTO, err, errlen, "zstd PAGE although zstd was not agreed");
		if (p->data_len == 0 || p->data_len >= MIG_ZSTD_MAX_LEN)
			return fail(-EPROTO, err, errlen, "zstd PAGE 0x%llx with %u data bytes",
				    (unsigned long long)p->addr, p->data_len);
		return 0;
	}
	return fail(-EPROTO, err, errlen, "PAGE with unknown encoding %u", p->encoding);
}

static int check_page(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		      size_t errlen)
{
	struct mig_page p;
	if (len < sizeof(p))
		return fail(-EPROTO, err, errlen, "PAGE payload of %u bytes is truncated", len);
	memcpy(&p, payload, sizeof(p));
	int r = check_addr(ctx, p.addr, "PAGE", err, errlen);
	if (r)
		return r;
	if (p.data_len != len - sizeof(p))
		return fail(-EPROTO, err, errlen,
			    "PAGE 0x%llx data length %u does not match frame (%zu)",
			    (unsigned long long)p.addr, p.data_len, len - sizeof(p));
	if (p.flags & ~MIG_PAGEF_KNOWN)
		return fail(-EPROTO, err, errlen, "PAGE with unknown flags 0x%x", p.flags);
	return check_page_data(ctx, &p, err, errlen);
}

static int check_run(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		     size_t errlen)
{
	struct mig_page_run r;
	if (!(ctx->features & MIG_FEAT_RUNS))
		return fail(-EPROTO, err, errlen, "PAGE_RUN although runs were not agreed");
	if (len < sizeof(r))
		return fail(-EPROTO, err, errlen, "PAGE_RUN payload of %u bytes is truncated", len);
	memcpy(&r, payload, sizeof(r));
	if (r.count == 0 || r.count > MIG_MAX_RUN_PAGES)
		return fail(-EPROTO, err, errlen, "PAGE_RUN 0x%llx of %u pages (1 to %u)",
			    (unsigned long long)r.addr, r.count, MIG_MAX_RUN_PAGES);
	if (r.addr % PAGE_SIZE)
		return fail(-ERANGE, err, errlen, "PAGE_RUN address 0x%llx not page aligned",
			    (unsigned long long)r.addr);
	if (r.addr >= ctx->ram_size || (ctx->ram_size - r.addr) / PAGE_SIZE < (uint64_t)r.count)
		return fail(-ERANGE, err, errlen,
			    "PAGE_RUN 0x%llx of %u pages outside guest RAM (size 0x%llx)",
			    (unsigned long long)r.addr, r.count, (unsigned long long)ctx->ram_size);
	if (r.flags & ~MIG_RUNF_KNOWN)
		return fail(-EPROTO, err, errlen, "PAGE_RUN with unknown flags 0x%x", r.flags);
	if (r.encoding != MIG_PAGE_RAW && r.encoding != MIG_PAGE_ZERO)
		return fail(-EPROTO, err, errlen, "PAGE_RUN with encoding %u", r.encoding);
	uint64_t want =
	    sizeof(r) + (r.encoding == MIG_PAGE_RAW ? (uint64_t)r.count * PAGE_SIZE : 0);
	if (len != want)
		return fail(-EPROTO, err, errlen,
			    "PAGE_RUN 0x%llx of %u %s pages with %u payload bytes (expected %llu)",
			    (unsigned long long)r.addr, r.count,
			    r.encoding == MIG_PAGE_RAW ? "raw" : "zero", len,
			    (unsigned long long)want);
	return 0;
}

static int check_request(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
			 size_t errlen)
{
	struct mig_page_request q;
	if (len < sizeof(q))
		return fail(-EPROTO, err, errlen, "PAGE_REQUEST truncated");
	memcpy(&q, payload, sizeof(q));
	if (q.count == 0 || q.count > MIG_MAX_REQ_PAGES || q.reserved)
		return fail(-EPROTO, err, errlen, "PAGE_REQUEST for %u pages", q.count);
	if (len != sizeof(q) + 8ull * q.count)
		return fail(-EPROTO, err, errlen, "PAGE_REQUEST length %u does not match count %u",
			    len, q.count);
	for (uint32_t i = 0; i < q.count; i++) {
		uint64_t addr;
		memcpy(&addr, payload + sizeof(q) + 8 * i, 8);
		int r = check_addr(ctx, addr, "PAGE_REQUEST", err, errlen);
		if (r)
			return r;
	}
	return 0;
}

static int check_complete(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
			  size_t errlen)
{
	struct mig_complete m;
	(void)len; /* fixed */
	memcpy(&m, payload, sizeof(m));
	if (m.pages_received != ctx->ram_size / PAGE_SIZE)
		return fail(-EPROTO, err, errlen, "COMPLETE with %llu pages received, RAM has %llu",
			    (unsigned long long)m.pages_received,
			    (unsigned long long)(ctx->ram_size / PAGE_SIZE));
	return 0;
}

static int check_resume(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
			size_t errlen)
{
	struct mig_resume rs;
	int r = check_bitmap(ctx, payload, len, sizeof(rs), "RESUME", err, errlen);
	if (r)
		return r;
	memcpy(&rs, payload, sizeof(rs));
	if ((rs.flags & ~MIG_RESUME_NEED_STATE) || rs.reserved)
		return fail(-EPROTO, err, errlen, "RESUME with unknown flags 0x%x", rs.flags);
	return 0;
}

static int check_error(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		       size_t errlen)
{
	struct mig_error e;
	(void)ctx;
	if (len < sizeof(e))
		return fail(-EPROTO, err, errlen, "ERROR truncated");
	memcpy(&e, payload, sizeof(e));
	if (e.msg_len > MIG_MAX_ERROR_MSG || len != sizeof(e) + e.msg_len)
		return fail(-EPROTO, err, errlen, "ERROR length %u, message length %u", len,
			    e.msg_len);
	return 0;
}

static int check_done(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		      size_t errlen)
{
	struct mig_done d;
	(void)len; /* fixed */
	memcpy(&d, payload, sizeof(d));
	if (d.phase > 1 || d.reserved || d.pages > ctx->ram_size / PAGE_SIZE)
		return fail(-EPROTO, err, errlen, "DONE malformed");
	return 0;
}

static int check_auth(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		      size_t errlen)
{
	struct mig_auth a;
	(void)ctx, (void)len; /* fixed */
	/* Not the data: it may be the session's secret, and a copy here would stay on the stack. */
	memcpy(&a, payload, offsetof(struct mig_auth, data));
	if (a.kind < MIG_AUTH_SECRET || a.kind > MIG_AUTH_PROOF || a.reserved)
		return fail(-EPROTO, err, errlen, "AUTH of unknown kind %u", a.kind);
	return 0;
}

static int check_dirty(struct mig_wire_ctx *ctx, const uint8_t *payload, uint32_t len, char *err,
		       size_t errlen)
{
	return check_bitmap(ctx, payload, len, sizeof(struct mig_dirty), "PRECOPY_DIRTY", err,
			    errlen);
}

/* Payloads of up to max bytes, of exactly max bytes (the type's fixed struct). */
#define UPTO(n)	 .max = (n), .fixed = false
#define EXACT(n) .max = (n), .fixed = true

static const struct frame_type frame_types[MIG_MSG_MAX + 1] = {
	[MIG_MSG_HELLO] = { .name = "HELLO",
			    EXACT(sizeof(struct mig_hello)),
			    .first = true,
			    .versioned = true,
			    .check = check_hello_frame },
	[MIG_MSG_LAYOUT] = { .name = "LAYOUT",
			     EXACT(sizeof(struct mig_layout)),
			     .check = check_layout },
	[MIG_MSG_STATE] = { .name = "STATE", UPTO(MIG_MAX_PAYLOAD), .check = check_state },
	[MIG_MSG_PAGE] = { .name = "PAGE",
			   UPTO(sizeof(struct mig_page) + PAGE_SIZE),
			   .page_data = true,
			   .check = check_page },
	[MIG_MSG_PAGE_REQUEST] = { .name = "PAGE_REQUEST",
				   UPTO(sizeof(struct mig_page_request) + 8 * MIG_MAX_REQ_PAGES),
				   .check = check_request },
	[MIG_MSG_RUNNING] = { .name = "RUNNING", EXACT(sizeof(struct mig_running)) },
	[MIG_MSG_COMPLETE] = { .name = "COMPLETE",
			       EXACT(sizeof(struct mig_complete)),
			       .check = check_complete },
	[MIG_MSG_RESUME] = { .name = "RESUME", UPTO(MIG_MAX_PAYLOAD), .check = check_resume },
	[MIG_MSG_ERROR] = { .name = "ERROR",
			    UPTO(sizeof(struct mig_error) + MIG_MAX_ERROR_MSG),
			    .first = true,
			    .check = check_error },
	[MIG_MSG_PRECOPY_DIRTY] = { .name = "PRECOPY_DIRTY",
				    UPTO(MIG_MAX_PAYLOAD),
				    .check = check_dirty },
	[MIG_MSG_DONE] = { .name = "DONE", EXACT(sizeof(struct mig_done)), .check = check_done },
	[MIG_MSG_AUTH] = { .name = "AUTH", EXACT(sizeof(struct mig_auth)), .check = check_auth },
	[MIG_MSG_PING] = { .name = "PING", EXACT(0) },
	[MIG_MSG_PAGE_RUN] = { .name = "PAGE_RUN",
			       UPTO(sizeof(struct mig_page_run) + MIG_MAX_RUN_PAGES * PAGE_SIZE),
			       .page_data = true,
			       .check = check_run },
};
/* The parts of a page_data type: its head, then the pages. */
_Static_assert(sizeof(struct mig_page) == sizeof(struct mig_page_run), "one head size");
#define PAGE_DATA_HEAD sizeof(struct mig_page_run)

static const struct frame_type *frame_type(unsigned type)
{
	if (type >= sizeof(frame_types) / sizeof(frame_types[0]) || !frame_types[type].name)
		return NULL;
	return &frame_types[type];
}

const char *mig_msg_name(unsigned type)
{
	const struct frame_type *t = frame_type(type);
	return t ? t->name : "?";
}

int mig_payload_crc_off(const struct mig_wire_ctx *ctx, uint16_t type)
{
	const struct frame_type *t = frame_type(type);
	return (ctx->features & MIG_FEAT_NO_PAYLOAD_CRC) && t && t->page_data;
}

int mig_check_payload(struct mig_wire_ctx *ctx, const struct mig_frame_hdr *h, const void *payload,
		      char *err, size_t errlen)
{
	return mig_check_parts(ctx, h, payload, h->len, NULL, err, errlen);
}

/* The payload's CRC (unless agreed away for page payloads): 0 or -EBADMSG. */
static int check_crc(const struct mig_wire_ctx *ctx, const struct mig_frame_hdr *h,
		     const void *head, uint32_t head_len, const void *data, char *err,
		     size_t errlen)
{
	if (mig_payload_crc_off(ctx, h->type)) {
		if (h->payload_crc)
			return fail(-EPROTO, err, errlen,
				    "%s with a payload CRC although none was agreed",
				    mig_msg_name(h->type));
		return 0;
	}
	uint32_t crc = crc32c(crc32c(0, head, head_len), data, h->len - head_len);
	if (crc != h->payload_crc)
		return fail(-EBADMSG, err, errlen,
			    "%s payload checksum mismatch (got 0x%08x, computed 0x%08x): "
			    "corrupted data",
			    mig_msg_name(h->type), h->payload_crc, crc);
	return 0;
}

/* Check what every frame must satisfy before its own contract: parts, CRC, order, length. */
static int check_frame(struct mig_wire_ctx *ctx, const struct frame_type *t,
		       const struct mig_frame_hdr *h, const void *head, uint32_t head_len,
		       const void *data, char *err, size_t errlen)
{
	uint32_t len = h->len, version;
	if (head_len > len || (head_len < len && (!t->page_data || head_len < PAGE_DATA_HEAD)))
		return fail(-EINVAL, err, errlen, "%s checked in parts of %u of %u bytes", t->name,
			    head_len, len);
	int r = check_crc(ctx, h, head, head_len, data, err, errlen);
	if (r)
		return r;
	/* ERROR may come first: a peer refusing the connection says why. */
	if (!ctx->hello_seen && !t->first)
		return fail(-EPROTO, err, errlen, "%s before HELLO", t->name);
	/* Another version's HELLO may have another size: say which version. */
	if (t->versioned && len >= sizeof(version)) {
		memcpy(&version, head, sizeof(version));
		if (version != MIG_VERSION)
			return fail(-EPROTONOSUPPORT, err, errlen,
				    "peer speaks protocol version %u, this side speaks %u", version,
				    MIG_VERSION);
	}
	if (t->fixed && len != t->max)
		return fail(-EPROTO, err, errlen, "%s length %u, expected %ld", t->name, len,
			    (long)t->max);
	return 0;
}

int mig_check_parts(struct mig_wire_ctx *ctx, const struct mig_frame_hdr *h, const void *head,
		    uint32_t head_len, const void *data, char *err, size_t errlen)
{
	const struct frame_type *t = frame_type(h->type);
	if (!t) /* mig_check_hdr() refuses it first */
		return fail(-EPROTO, err, errlen, "unknown message type %u", h->type);
	int r = check_frame(ctx, t, h, head, head_len, data, err, errlen);
	if (r || !t->check)
		return r;
	return t->check(ctx, head, h->len, err, errlen);
}

static _Thread_local ZSTD_DCtx *dctx;

void mig_wire_thread_cleanup(void)
{
	ZSTD_freeDCtx(dctx);
	dctx = NULL;
}

int mig_page_decode(const struct mig_page *p, const void *data, void *out, char *err, size_t errlen)
{
	switch (p->encoding) {
	case MIG_PAGE_RAW:
		memcpy(out, data, PAGE_SIZE);
		return 0;
	case MIG_PAGE_ZERO:
		memset(out, 0, PAGE_SIZE);
		return 0;
	case MIG_PAGE_ZSTD: {
		if (!dctx)
			dctx = ZSTD_createDCtx();
		if (!dctx)
			return fail(-ENOMEM, err, errlen, "cannot allocate a zstd context");
		size_t n = ZSTD_decompressDCtx(dctx, out, PAGE_SIZE, data, p->data_len);
		if (ZSTD_isError(n))
			return fail(-EBADMSG, err, errlen,
				    "zstd PAGE 0x%llx does not decompress: %s",
				    (unsigned long long)p->addr, ZSTD_getErrorName(n));
		if (n != PAGE_SIZE)
			return fail(-EBADMSG, err, errlen,
				    "zstd PAGE 0x%llx decompresses to %zu bytes, not one page",
				    (unsigned long long)p->addr, n);
		return 0;
	}
	}
	return fail(-EPROTO, err, errlen, "PAGE with unknown encoding %u", p->encoding);
}

long mig_parse_stream(struct mig_wire_ctx *ctx, const uint8_t *buf, size_t len, int *errp,
		      char *err, size_t errlen)
{
	static _Thread_local uint8_t page[PAGE_SIZE];
	long frames = 0;
	size_t off = 0;
	*errp = 0;
	while (off < len) {
		struct mig_frame_hdr h;
		if (len - off < sizeof(h)) {
			*errp = fail(-ENODATA, err, errlen, "stream ends inside a frame header");
			return frames;
		}
		memcpy(&h, buf + off, sizeof(h));
		int r = mig_check_hdr(&h, err, errlen);
		if (r) {
			*errp = r;
			return frames;
		}
		off += sizeof(h);
		if (len - off < h.len) {
			*errp = fail(-ENODATA, err, errlen,
				     "stream ends inside a %s payload (%zu of %u bytes)",
				     mig_msg_name(h.type), len - off, h.len);
			return frames;
		}
		r = mig_check_payload(ctx, &h, buf + off, err, errlen);
		if (r == 0 && h.type == MIG_MSG_PAGE) {
			struct mig_page p;
			memcpy(&p, buf + off, sizeof(p));
			r = mig_page_decode(&p, buf + off + sizeof(p), page, err, errlen);
		}
		if (r) {
			*errp = r;
			return frames;
		}
		off += h.len;
		frames++;
	}
	return frames;
}
