// SPDX-License-Identifier: GPL-2.0
/*
 * source-fuzz: libFuzzer target for the source's protocol logic after the
 * switch-over.  It links the library, drives the source's own steps
 * (migrate-agent/source.h), builds a source around a fake VM (RAM with a
 * pattern, a quarter of the pages zero) and plays the frames a destination
 * sends on the urgent channel (page requests, RUNNING, COMPLETE, ERROR,
 * ...), exactly as the urgent thread does: header and payload checks, then
 * src_urgent_frame().  The pages it sends go through a socket pair and are
 * read back.
 *
 * Input: byte 0 picks the RAM size (16..64 pages), how much the push has
 * already claimed, and CRC repair; then frames.
 *
 * Invariants (abort() when broken):
 *   - no page is sent twice, and every page sent carries the RAM's bytes;
 *   - COMPLETE is believed only when every page was sent;
 *   - every rejection comes with a message.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct mig_source_vm fake_vm;
static struct mig_opts fake_opts = { .recover_ms = 1000, .idle_ms = 1000, .prepage = 32 };

static void fill_ram(uint8_t *ram, uint64_t nr_pages)
{
	for (uint64_t i = 0; i < nr_pages; i++)
		memset(ram + i * PAGE_SIZE, i % 4 ? (int)(i * 37 + 1) : 0, PAGE_SIZE);
}

/*
 * A source as src_new() makes one (src_init()), with nr_bulk bulk channels
 * (closed) and the urgent channel on fd, past its handshake.  src_init()
 * runs once per RAM size and channel count; each input's source is a copy
 * of that one, its page bitmap cleared and its stamps emptied: allocating
 * the stamps (1.8 MB under ASan) cost more than the session.  (The copied
 * locks were never taken; glibc's keep no address of their own.)
 */
static struct src *fake_src(uint64_t nr_pages, uint8_t claimed, unsigned nr_bulk, int fd)
{
	static struct src made[3][2];
	struct src *tmpl = &made[nr_pages / 32][nr_bulk - 1];
	fake_opts.channels = nr_bulk;
	if (!tmpl->sent && src_init(tmpl, &fake_vm, &fake_opts))
		abort();
	memset(tmpl->sent, 0, (nr_pages + 63) / 64 * 8);
	mig_stamps_reset(tmpl->stamps);
	struct src *s = malloc(sizeof(*s));
	if (!s)
		abort();
	*s = *tmpl;
	s->times.t_start = now_ns();
	/* The push claimed the first pages already (sent, or in its buffer). */
	for (uint64_t i = 0; i < nr_pages * claimed / 8; i++)
		bit_test_and_set(s->sent, i);
	/* The channels are the template's too (one input at a time): a fresh urgent one. */
	*s->links.urg = (struct mig_conn){
		.fd = fd,
		.name = "urgent",
		.wire = { .ram_size = nr_pages * PAGE_SIZE,
			  .hello_seen = 1,
			  .peer_role = MIG_ROLE_DEST },
	};
	pthread_mutex_init(&s->links.urg->tx_lock, NULL);
	return s;
}

/* Read back what the source sent: each page once, with the RAM's bytes. */
static void check_sent(int fd, uint8_t *seen, uint64_t nr_pages)
{
	static uint8_t buf[1 << 20];
	static size_t have;
	ssize_t n;
	while ((n = recv(fd, buf + have, sizeof(buf) - have, MSG_DONTWAIT)) > 0)
		have += (size_t)n;
	size_t off = 0;
	while (have - off >= sizeof(struct mig_frame_hdr)) {
		struct mig_frame_hdr h;
		memcpy(&h, buf + off, sizeof(h));
		if (have - off < sizeof(h) + h.len)
			break;
		struct mig_page pg;
		memcpy(&pg, buf + off + sizeof(h), sizeof(pg));
		uint64_t i = pg.addr / PAGE_SIZE;
		if (h.type != MIG_MSG_PAGE || i >= nr_pages || seen[i]++)
			abort(); /* a page sent twice, or something else sent */
		uint8_t page[PAGE_SIZE];
		if (mig_page_decode(&pg, buf + off + sizeof(h) + sizeof(pg), page, NULL, 0) ||
		    memcmp(page, fake_vm.ram + pg.addr, PAGE_SIZE))
			abort(); /* not the RAM's bytes */
		off += sizeof(h) + h.len;
	}
	memmove(buf, buf + off, have - off);
	have -= off;
}

static void repair(uint8_t *buf, size_t len)
{
	struct mig_frame_hdr h;
	memcpy(&h, buf, sizeof(h));
	uint32_t n = h.len <= len - sizeof(h) ? h.len : (uint32_t)(len - sizeof(h));
	mig_frame_hdr_init(&h, h.type, h.len, h.seq, crc32c(0, buf + sizeof(h), n));
	memcpy(buf, &h, sizeof(h));
}

static void play(struct src *s, int peer, uint8_t *seen, uint8_t *in, size_t len, int fix)
{
	static uint8_t frame[MIG_PAGE_FRAME_MAX];
	char err[320];
	size_t off = 0;
	while (len - off >= sizeof(struct mig_frame_hdr) && !src_stopped(s) && !s->complete) {
		if (fix)
			repair(in + off, len - off);
		struct mig_frame_hdr h;
		memcpy(&h, in + off, sizeof(h));
		err[0] = 0;
		int r = mig_check_hdr(&h, err, sizeof(err));
		if (!r && h.len > len - off - sizeof(h))
			return;
		if (!r)
			r = mig_check_payload(&s->links.urg->wire, &h, in + off + sizeof(h), err,
					      sizeof(err));
		if (r && !err[0])
			abort(); /* every rejection has a message */
		if (r)
			return;
		src_urgent_frame(s, &h, in + off + sizeof(h), frame);
		check_sent(peer, seen, s->nr_pages);
		off += sizeof(h) + h.len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t *ram;
	static int sv[2] = { -1, -1 };
	if (!ram) {
		ram = malloc(64 * PAGE_SIZE);
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			abort();
		int big = 1 << 20;
		setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
		fcntl(sv[0], F_SETFL, O_NONBLOCK); /* a full socket is a broken link, not a hang */
	}
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	uint64_t nr_pages = 16u << (mode & 3) % 3;
	fill_ram(ram, nr_pages);
	fake_vm = (struct mig_source_vm){ .ram = ram, .ram_size = nr_pages * PAGE_SIZE };
	/* Bit 6: two bulk channels (the hints go to the owner of each page). */
	struct src *s = fake_src(nr_pages, (mode >> 2) & 7, 1 + ((mode >> 6) & 1), sv[0]);
	uint8_t seen[64] = { 0 };
	uint8_t *in = malloc(size);
	memcpy(in, data, size);
	play(s, sv[1], seen, in + 1, size - 1, (mode & 0x20) != 0);
	if (s->complete && src_count_sent(s) != s->nr_pages)
		abort(); /* COMPLETE believed with pages never sent */
	check_sent(sv[1], seen, nr_pages);
	free(in);
	free(s); /* its page bitmap, stamps and channels are the template's */
	return 0;
}
