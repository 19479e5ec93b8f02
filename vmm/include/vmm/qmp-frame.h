/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Cutting a QMP input stream into messages, as QEMU's JSON streamer does
 * (docs/interop/qmp-spec.rst, "Forcing the JSON parser into known-good
 * state"), so that a bad request costs one error reply, not the
 * connection:
 *
 * - A message is one top-level JSON value: an object or array ends at the
 *   bracket that closes its first one (brackets inside "double" or
 *   'single' quoted strings, escapes included, do not count); a scalar ends
 *   at whitespace or a structural character.  Whether it parses is the
 *   JSON parser's business afterwards: a syntax error stays inside its
 *   message, and the next one starts right after it.
 * - A lexical error resets: an ASCII control character other than \t, \r
 *   and \n, or a byte 0xFE or 0xFF (never in UTF-8), anywhere, even inside
 *   a string, drops the message read so far.  This is the spec's way for a
 *   client to bring the parser back to a known-good state after input it
 *   cannot finish (an unbalanced bracket, an open string).
 * - QEMU's escape \' (a single quote) is passed on as \u0027, which json-c
 *   knows; 'single-quoted' strings json-c takes as they are.
 * - A message longer than QMP_FRAME_MAX is not kept: over-long.
 */
#ifndef VMM_QMP_FRAME_H
#define VMM_QMP_FRAME_H

#include <stddef.h>

#define QMP_FRAME_MAX 65536 /* bytes of one message */

struct qmp_frame {
	size_t len;		      /* bytes of the message so far, in text */
	unsigned depth;		      /* brackets open */
	char quote;		      /* inside a string: its quote, else 0 */
	char escaped;		      /* inside a string, after a backslash */
	char scalar;		      /* reading a top-level scalar */
	char text[QMP_FRAME_MAX + 1]; /* the message, NUL-terminated once complete */
};

enum qmp_frame_result {
	QMP_FRAME_MORE,	    /* all input taken, no message complete yet */
	QMP_FRAME_MESSAGE,  /* text[0..len) is a message; qmp_frame_reset() after it */
	QMP_FRAME_STRAY,    /* a reset byte (*stray): the partial message was dropped */
	QMP_FRAME_TOO_LONG, /* over QMP_FRAME_MAX: the stream cannot be followed further */
};

void qmp_frame_reset(struct qmp_frame *f);

/* Take input from *buf (n bytes) up to the first result that is not MORE. */
enum qmp_frame_result qmp_frame_feed(struct qmp_frame *f, const char **buf, size_t *n,
				     unsigned char *stray);

#endif /* VMM_QMP_FRAME_H */
