// SPDX-License-Identifier: GPL-2.0
/*
 * mig-evil: an adversarial migration peer.  As a source it connects to a
 * destination and sends one malformed stream; as a destination it answers a
 * source with a hostile page request.  The process under test must reject
 * the stream with a clear message and exit non-zero, having written nothing.
 *
 *   mig-evil CASE tcp:HOST:PORT [--mem SIZE]
 *
 * Source-side cases (the peer under test is a destination):
 *   bad-magic bad-hdr-crc unknown-type bad-version truncated out-of-ram
 *   unaligned length-mismatch bad-checksum bad-zstd bad-layout no-hello
 * Destination-side case (the peer under test is a source; this listens):
 *   evil-request
 * Exit 0 when the stream was sent (the verdict is the peer's), 2 on usage,
 * 1 when this program itself could not connect or listen.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "migrate/net.h"

static uint64_t ram_size = 16 << 20;
static uint64_t session = 0x5eed;

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

static struct mig_hello hello(int channel, uint32_t features)
{
	struct mig_hello h = {
		.version = MIG_VERSION,
		.role = MIG_ROLE_SOURCE,
		.channel = channel,
		.page_size = MIG_PAGE_SIZE,
		.session_id = session,
		.ram_size = ram_size,
		.features = features,
	};
	return h;
}

/* Open a channel and say a valid HELLO; wait for the answer. */
static int open_channel(struct sockaddr_in *sa, int channel, uint32_t features, struct mig_conn *c)
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
	return 0;
}

/* Give the peer time to read, judge and close before we go. */
static void linger(int fd)
{
	char b[256];
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (recv(fd, b, sizeof(b), 0) > 0)
		;
}

static struct mig_conn u, b;

static int evil_source(const char *cs, struct sockaddr_in *sa)
{
	uint8_t buf[2 * MIG_PAGE_SIZE + 256];
	char err[300];
	struct mig_page pg = { .encoding = MIG_PAGE_RAW,
			       .flags = MIG_PAGEF_PRECOPY,
			       .data_len = MIG_PAGE_SIZE };
	uint8_t page[MIG_PAGE_SIZE];
	memset(page, 0xa5, sizeof(page));

	/* Cases that break the very first frame. */
	if (!strcmp(cs, "bad-magic") || !strcmp(cs, "bad-hdr-crc") || !strcmp(cs, "unknown-type") ||
	    !strcmp(cs, "bad-version") || !strcmp(cs, "no-hello")) {
		int fd = mig_connect(sa, 3000, err, sizeof(err));
		if (fd < 0) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return 1;
		}
		mig_conn_init(&u, fd, "urgent", MIG_ROLE_DEST, 0);
		struct mig_hello h = hello(MIG_CHAN_URGENT, 0);
		if (!strcmp(cs, "bad-version"))
			h.version = 99;
		size_t n;
		if (!strcmp(cs, "no-hello")) {
			struct mig_layout l = { .ram_size = ram_size, .page_size = MIG_PAGE_SIZE };
			n = mig_conn_put(&u, buf, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
		} else {
			n = mig_conn_put(&u, buf, MIG_MSG_HELLO, &h, sizeof(h), NULL, 0);
		}
		struct mig_frame_hdr fh;
		memcpy(&fh, buf, sizeof(fh));
		if (!strcmp(cs, "bad-magic"))
			fh.magic = 0x4c4c4548; /* "HELL" */
		if (!strcmp(cs, "bad-hdr-crc"))
			fh.len ^= 0; /* header intact but its CRC flipped */
		if (!strcmp(cs, "unknown-type")) {
			fh.type = 77;
			fh.hdr_crc = mig_crc32c(0, &fh, offsetof(struct mig_frame_hdr, hdr_crc));
		} else if (!strcmp(cs, "bad-hdr-crc")) {
			fh.hdr_crc ^= 0x1;
		}
		memcpy(buf, &fh, sizeof(fh));
		send_raw(fd, buf, n);
		linger(fd);
		return 0;
	}

	uint32_t feats = !strcmp(cs, "bad-zstd") ? MIG_FEAT_ZSTD : 0;
	if (open_channel(sa, MIG_CHAN_URGENT, feats, &u) ||
	    open_channel(sa, MIG_CHAN_BULK, feats, &b))
		return 1;
	struct mig_layout l = { .ram_size = ram_size, .page_size = MIG_PAGE_SIZE, .nr_regions = 1 };
	l.regions[0].size = ram_size;
	if (!strcmp(cs, "bad-layout")) {
		l.regions[0].size = ram_size / 2; /* covers half of RAM */
		mig_conn_send(&u, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);
		linger(u.fd);
		return 0;
	}
	mig_conn_send(&u, MIG_MSG_LAYOUT, &l, sizeof(l), NULL, 0);

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
		pg.addr = 3 * MIG_PAGE_SIZE + 8;
	} else if (!strcmp(cs, "length-mismatch")) {
		pg.addr = MIG_PAGE_SIZE;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, 100);
		send_raw(b.fd, buf, n);
		linger(b.fd);
		return 0;
	} else if (!strcmp(cs, "bad-checksum")) {
		pg.addr = 2 * MIG_PAGE_SIZE;
		n = mig_conn_put(&b, buf, MIG_MSG_PAGE, &pg, sizeof(pg), page, sizeof(page));
		buf[n - 100] ^= 0x40; /* one bit of the page data */
		send_raw(b.fd, buf, n);
		linger(b.fd);
		return 0;
	} else if (!strcmp(cs, "bad-zstd")) {
		pg.addr = 4 * MIG_PAGE_SIZE;
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

/* Play a destination that asks for a page outside RAM. */
static int evil_dest(struct sockaddr_in *sa)
{
	char err[300];
	int lfd = mig_listen(sa, err, sizeof(err));
	if (lfd < 0) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return 1;
	}
	static struct mig_conn c[2];
	uint64_t ram = 0;
	for (int k = 0; k < 2; k++) {
		int fd = accept(lfd, NULL, NULL);
		mig_conn_init(&c[k], fd, "in", MIG_ROLE_SOURCE, 0);
		struct mig_frame_hdr h;
		const uint8_t *p;
		if (mig_conn_recv(&c[k], &h, &p, err, sizeof(err))) {
			fprintf(stderr, "mig-evil: %s\n", err);
			return 1;
		}
		struct mig_hello m;
		memcpy(&m, p, sizeof(m));
		ram = m.ram_size;
		m.role = MIG_ROLE_DEST;
		mig_conn_send(&c[k], MIG_MSG_HELLO, &m, sizeof(m), NULL, 0);
	}
	struct mig_page_request q = { .count = 1 };
	uint64_t addr = ram + 16 * MIG_PAGE_SIZE;
	for (int k = 0; k < 2; k++)
		mig_conn_send(&c[k], MIG_MSG_PAGE_REQUEST, &q, sizeof(q), &addr, 8);
	linger(c[0].fd);
	mig_conn_close(&c[0]);
	mig_conn_close(&c[1]);
	close(lfd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: mig-evil CASE tcp:HOST:PORT [--mem SIZE]\n");
		return 2;
	}
	if (argc >= 5 && !strcmp(argv[3], "--mem"))
		ram_size = strtoull(argv[4], NULL, 0) << 20;
	struct sockaddr_in sa;
	char err[200];
	if (mig_addr_parse(argv[2], &sa, err, sizeof(err))) {
		fprintf(stderr, "mig-evil: %s\n", err);
		return 2;
	}
	if (!strcmp(argv[1], "evil-request"))
		return evil_dest(&sa);
	u.fd = b.fd = -1;
	int r = evil_source(argv[1], &sa);
	mig_conn_close(&u);
	mig_conn_close(&b);
	return r;
}
