// SPDX-License-Identifier: GPL-2.0
/*
 * The bottom of the destination (its files, their order and the locking
 * order: dest.h): the small operations on its links that every other file
 * uses, and that use nothing of the destination above them.
 */
#include <stdlib.h>
#include <string.h>

#include "dest.h"

/* Shut every channel of the live link down, so its readers and writers return (req_lock not held). */
void dest_kick_links(struct mig_dest *d)
{
	mig_lock(&d->req_lock, MIG_RANK_DEST_REQ);
	mig_links_kick(&d->links);
	mig_unlock(&d->req_lock);
}

/* An ERROR frame with code and msg (cut to MIG_MAX_ERROR_MSG) on c; a failed send is a broken link. */
void dest_send_error(struct mig_conn *c, uint32_t code, const char *msg)
{
	struct mig_error e = { .code = code, .msg_len = (uint32_t)strlen(msg) };
	if (e.msg_len > MIG_MAX_ERROR_MSG)
		e.msg_len = MIG_MAX_ERROR_MSG;
	mig_conn_send(c, MIG_MSG_ERROR, &e, sizeof(e), msg, e.msg_len);
}

void dest_free_conn(struct mig_conn *c)
{
	if (!c)
		return;
	mig_conn_close(c);
	free(c);
}

void dest_free_conns(struct mig_conn **c, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		dest_free_conn(c[k]);
		c[k] = NULL;
	}
}

/* The link's bytes into the totals, then its channels closed (under req_lock, receivers joined). */
void dest_links_free(struct mig_dest *d)
{
	d->counts.bytes_rx_prev += mig_links_rx_bytes(&d->links);
	dest_free_conn(d->links.urg);
	d->links.urg = NULL;
	dest_free_conns(d->links.bulk, MIG_MAX_CHANNELS);
}
