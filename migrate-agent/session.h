/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One connection's handshake (wire.h: HELLO, then AUTH), one implementation
 * for both roles.  The source and the destination take the same steps in
 * mirrored order: the source sends its HELLO first and the destination
 * answers it; the destination then either gives the session's secret (the
 * first urgent connection) or both ends prove it, the destination
 * challenging first (mig_hs_mutual()).  What stays with each side is its
 * policy: the source's connection attempts and retries (source-session.c),
 * the destination's handshake threads, session claims and pairs
 * (dest-accept.c).
 *
 * Every function returns 0 or a negative errno with a message in err:
 * -ECONNREFUSED (or -EBUSY) when the peer refused with its ERROR, -EPROTO
 * for a frame out of order, -EACCES for a wrong proof.
 */
#ifndef MIGRATE_SESSION_H
#define MIGRATE_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "migrate/net.h"
#include "migrate/wire.h"

/*
 * One end of a connection's handshake.  channel, session and secret are
 * known at the source from the start; at the destination only once the
 * peer's HELLO was read.
 */
struct mig_hs {
	struct mig_conn *c;
	int role;	       /* ours: MIG_ROLE_SOURCE or MIG_ROLE_DEST */
	uint16_t channel;      /* MIG_CHAN_URGENT or MIG_CHAN_BULK */
	uint16_t nr_bulk;      /* the attempt's bulk channels (HELLO.nr_bulk) */
	uint16_t bulk_index;   /* this one's, 0 for urgent (HELLO.bulk_index) */
	uint64_t session;      /* the session id */
	const uint8_t *secret; /* the session's, MIG_SECRET_LEN bytes */
	/*
	 * What our own messages start with: "urgent channel: " at the source;
	 * "" at the destination, whose messages go to the stranger in its
	 * ERROR, as they are.
	 */
	const char *tag;
};

/* Our HELLO for hs's channel and session; the peer's values in the rest. */
int mig_hs_send_hello(const struct mig_hs *hs, uint32_t flags, uint64_t ram_size, uint32_t features,
		      uint32_t attempt, char *err, size_t errlen);

/*
 * The next frame, which must be HELLO, into h.  The peer's ERROR is a
 * refusal: -EBUSY when it said MIG_ERR_BUSY, else -ECONNREFUSED.
 */
int mig_hs_recv_hello(const struct mig_hs *hs, struct mig_hello *h, char *err, size_t errlen);

/* The next frame, which must be AUTH of this kind, into a. */
int mig_hs_recv_auth(const struct mig_hs *hs, uint32_t kind, struct mig_auth *a, char *err,
		     size_t errlen);

/* The session's secret to the source (the destination, first urgent connection). */
int mig_hs_send_secret(const struct mig_hs *hs, char *err, size_t errlen);

/*
 * Both ways (wire.h, AUTH): each end proves the secret for the other's
 * nonce, bound to the connection's TLS session; the destination
 * challenges first.  -EACCES when the peer's proof is wrong.
 */
int mig_hs_mutual(const struct mig_hs *hs, char *err, size_t errlen);

#endif
