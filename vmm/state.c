// SPDX-License-Identifier: GPL-2.0
/*
 * The VM state blob's sections (vmm/state.h, docs/vmm.md): written and
 * found by type and index.  The blob's users (vm-state.c, and the
 * architecture's save and load in vmm/arch/) build on these.
 */
#include <errno.h>
#include <string.h>

#include "vmm/state.h"
#include "vmm/util.h"

void state_put(struct state_writer *w, uint32_t type, uint32_t index, const void *data, size_t size)
{
	struct vm_state_section sec = { .type = type, .index = index, .size = size };
	size_t need = sizeof(sec) + ALIGN_UP(size, 8);

	if (w->err)
		return;
	if (w->buf) {
		if (w->pos + need > w->len) {
			w->err = -ENOSPC;
			return;
		}
		memcpy(w->buf + w->pos, &sec, sizeof(sec));
		memcpy(w->buf + w->pos + sizeof(sec), data, size);
		memset(w->buf + w->pos + sizeof(sec) + size, 0, need - sizeof(sec) - size);
	}
	w->pos += need;
	w->nr_sections++;
}

const void *state_get(const struct state_reader *r, uint32_t type, uint32_t index, size_t *size)
{
	size_t pos = sizeof(struct vm_state_header);

	while (pos + sizeof(struct vm_state_section) <= r->len) {
		struct vm_state_section sec;

		memcpy(&sec, r->buf + pos, sizeof(sec));
		pos += sizeof(sec);
		if (sec.size > r->len - pos)
			return NULL;
		if (sec.type == type && sec.index == index) {
			*size = sec.size;
			return r->buf + pos;
		}
		pos += ALIGN_UP(sec.size, 8);
	}
	return NULL;
}
