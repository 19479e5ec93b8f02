/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A link's channels, one shape for both roles (wire.h "Channels"): the
 * urgent channel and nr_bulk bulk channels, bulk[k] being bulk channel k
 * and NULL from nr_bulk on.  The source owns its channels for the whole
 * run (mig_links_alloc(): closed, opened and closed again by each attempt);
 * the destination's come from its handshakes, a new set per link
 * (dest-accept.c), freed with the link.  What either role does over all
 * of a link's channels is here (channels.c); the threads of each role are
 * in source-channels.c and dest-channels.c.  Callers lock as their role
 * says (source.h, dest.h): nothing here takes a lock.
 */
#ifndef MIGRATE_CHANNELS_H
#define MIGRATE_CHANNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "migrate/net.h"
#include "migrate/wire.h"

struct mig_links {
	struct mig_conn *urg;
	struct mig_conn *bulk[MIG_MAX_CHANNELS];
	unsigned nr_bulk; /* HELLO.nr_bulk: the source's --channels */
};

/* The source's: an urgent and nr_bulk bulk channels, closed.  0 or -ENOMEM. */
int mig_links_alloc(struct mig_links *l, unsigned nr_bulk);
/* ... closed and freed (l zeroed). */
void mig_links_free(struct mig_links *l);

/* The urgent channel and every bulk channel there is, each set (none missing). */
bool mig_links_complete(const struct mig_links *l);
/* Wake whatever waits on any of them (mig_conn_kick()). */
void mig_links_kick(const struct mig_links *l);
void mig_links_kick_bulk(const struct mig_links *l);
void mig_links_close_bulk(const struct mig_links *l);

/* Bytes received on all of them. */
uint64_t mig_links_rx_bytes(const struct mig_links *l);
/* Bytes (all, or frame headers only) the bulk channels sent. */
uint64_t mig_links_bulk_tx(const struct mig_links *l, int headers);
/* When a bulk channel last sent something (0: never). */
uint64_t mig_links_bulk_last_tx(const struct mig_links *l);
/* Raise *heard and *work to the latest frame heard and progress on a bulk channel. */
void mig_links_bulk_heard(const struct mig_links *l, uint64_t *heard, uint64_t *work);

#endif /* MIGRATE_CHANNELS_H */
