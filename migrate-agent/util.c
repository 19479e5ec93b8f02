// SPDX-License-Identifier: GPL-2.0
/* Small shared pieces: options, latency statistics, zero test, progress. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

void mig_opts_defaults(struct mig_opts *o)
{
	if (!o->recover_ms)
		o->recover_ms = 10000;
	if (!o->idle_ms)
		o->idle_ms = o->recover_ms > 0 ? o->recover_ms : 10000;
	if (!o->connect_ms)
		o->connect_ms = 10000;
	if (!o->prepage)
		o->prepage = 32;
	if (!o->channels)
		o->channels = 1;
	if (o->progress < 0)
		o->progress = 0;
}

const char *mig_phase_name(enum mig_phase p)
{
	static const char *const names[] = {
		[MIG_PHASE_NONE] = "none",
		[MIG_PHASE_SETUP] = "setup",
		[MIG_PHASE_PRECOPY] = "active",
		[MIG_PHASE_PRE_SWITCHOVER] = "pre-switchover",
		[MIG_PHASE_SWITCHOVER] = "device",
		[MIG_PHASE_POSTCOPY] = "postcopy-active",
		[MIG_PHASE_RECOVER] = "postcopy-paused",
		[MIG_PHASE_RECOVER_SETUP] = "postcopy-recover-setup",
		[MIG_PHASE_RECOVERING] = "postcopy-recover",
		[MIG_PHASE_COMPLETED] = "completed",
		[MIG_PHASE_FAILED] = "failed",
		[MIG_PHASE_CANCELLED] = "cancelled",
	};
	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "unknown";
}

void mig_lat_add(struct mig_lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		uint64_t ncap = l->cap ? l->cap * 2 : 1024;
		uint64_t *nn = realloc(l->ns, ncap * sizeof(*nn));
		if (!nn)
			return;
		l->ns = nn;
		l->cap = ncap;
	}
	l->ns[l->n++] = ns;
	l->sum += ns;
	uint64_t us = ns / 1000;
	int b = 0;
	while (us > 1 && b < MIG_HIST_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	l->hist[b]++;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

uint64_t mig_lat_pct(struct mig_lat *l, double p)
{
	if (!l->n)
		return 0;
	qsort(l->ns, l->n, sizeof(*l->ns), cmp_u64);
	uint64_t i = (uint64_t)(p / 100.0 * (double)(l->n - 1) + 0.5);
	if (i >= l->n)
		i = l->n - 1;
	return l->ns[i];
}

uint64_t mig_lat_max(const struct mig_lat *l)
{
	uint64_t m = 0;
	for (uint64_t i = 0; i < l->n; i++)
		if (l->ns[i] > m)
			m = l->ns[i];
	return m;
}

void mig_escape(char *out, size_t outlen, const void *text, size_t len)
{
	const uint8_t *t = text;
	size_t o = 0;
	if (!outlen)
		return;
	for (size_t i = 0; i < len && o + 5 < outlen; i++) {
		if (t[i] >= 0x20 && t[i] < 0x7f && t[i] != '\\')
			out[o++] = (char)t[i];
		else
			o += (size_t)snprintf(out + o, outlen - o,
					      t[i] == '\\' ? "\\\\" : "\\x%02x", t[i]);
	}
	out[o] = 0;
}

void mig_error_text(const uint8_t *payload, char *out, size_t outlen)
{
	struct mig_error e;
	memcpy(&e, payload, sizeof(e));
	mig_escape(out, outlen, payload + sizeof(e), e.msg_len);
}

void mig_peer_error(char *err, size_t errlen, const uint8_t *payload, const char *fmt, ...)
{
	char what[200], text[200]; /* the text escaped, possibly cut short */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	mig_error_text(payload, text, sizeof(text));
	snprintf(err, errlen, "%s: %s", what, text);
}

static int progress_shown;

void mig_progress(const char *fmt, ...)
{
	char line[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "\r\033[K%s", line);
	progress_shown = 1;
}

void mig_progress_end(void)
{
	if (progress_shown)
		fputc('\n', stderr);
	progress_shown = 0;
}

void mig_thread_urgent(void)
{
	/* EPERM (no CAP_SYS_NICE) is fine: the thread keeps its priority. */
	setpriority(PRIO_PROCESS, (id_t)gettid(), MIG_URGENT_NICE);
}
