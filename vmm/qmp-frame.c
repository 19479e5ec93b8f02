// SPDX-License-Identifier: GPL-2.0
/*
 * QMP input cut into messages (vmm/include/vmm/qmp-frame.h): a byte at a
 * time, only brackets, quotes and escapes tracked, so the JSON parser sees
 * whole messages and its errors never leave the stream out of step.
 */
#include <string.h>

#include "vmm/qmp-frame.h"

void qmp_frame_reset(struct qmp_frame *f)
{
	f->len = 0;
	f->depth = 0;
	f->quote = 0;
	f->escaped = 0;
	f->scalar = 0;
}

/* The spec's reset bytes: a lexical error wherever it comes. */
static int is_stray(unsigned char b)
{
	return (b < 0x20 && b != '\t' && b != '\r' && b != '\n') || b >= 0xFE;
}

static int is_space(unsigned char b)
{
	return b == ' ' || b == '\t' || b == '\r' || b == '\n';
}

/* What ends a top-level scalar (and is not part of it). */
static int ends_scalar(unsigned char b)
{
	return is_space(b) || (b && strchr("{}[],:\"'", b));
}

/* b, just stored, inside a string: 1 when it closes a top-level one. */
static int string_byte(struct qmp_frame *f, unsigned char b)
{
	if (f->escaped)
		f->escaped = 0;
	else if (b == '\\')
		f->escaped = 1;
	else if (b == (unsigned char)f->quote)
		f->quote = 0;
	return !f->quote && !f->depth;
}

/*
 * QEMU's extra escape \' (a single quote, in either kind of string), which
 * json-c does not know: passed on as \u0027, which both understand.  The
 * backslash is stored already.  0, or -1 without room.
 */
static int quote_escape(struct qmp_frame *f)
{
	if (f->len + 5 > QMP_FRAME_MAX)
		return -1;
	memcpy(f->text + f->len, "u0027", 5);
	f->len += 5;
	f->escaped = 0;
	return 0;
}

/* b, just stored, outside strings: 1 when the message is complete. */
static int structure_byte(struct qmp_frame *f, unsigned char b)
{
	if (f->scalar)
		return 0;
	if (b == '"' || b == '\'') {
		f->quote = (char)b;
		return 0;
	}
	if (b == '{' || b == '[') {
		f->depth++;
		return 0;
	}
	if (b == '}' || b == ']') { /* at the top level, a stray closer: a message of its own */
		f->depth -= f->depth > 0;
		return !f->depth;
	}
	if (f->depth)
		return 0;
	if (b == ',' || b == ':')
		return 1;
	f->scalar = 1;
	return 0;
}

enum qmp_frame_result qmp_frame_feed(struct qmp_frame *f, const char **buf, size_t *n,
				     unsigned char *stray)
{
	while (*n) {
		unsigned char b = (unsigned char)**buf;
		int done;

		if (is_stray(b)) {
			(*buf)++, (*n)--;
			qmp_frame_reset(f);
			*stray = b;
			return QMP_FRAME_STRAY;
		}
		if (f->scalar && ends_scalar(b)) {
			f->text[f->len] = 0;
			return QMP_FRAME_MESSAGE;
		}
		if (!f->len && is_space(b)) { /* between messages */
			(*buf)++, (*n)--;
			continue;
		}
		if (f->len == QMP_FRAME_MAX)
			return QMP_FRAME_TOO_LONG;
		if (f->quote && f->escaped && b == '\'') {
			if (quote_escape(f))
				return QMP_FRAME_TOO_LONG;
			(*buf)++, (*n)--;
			continue;
		}
		(*buf)++, (*n)--;
		f->text[f->len++] = (char)b;
		done = f->quote ? string_byte(f, b) : structure_byte(f, b);
		if (done) {
			f->text[f->len] = 0;
			return QMP_FRAME_MESSAGE;
		}
	}
	return QMP_FRAME_MORE;
}
