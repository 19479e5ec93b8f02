#!/usr/bin/env bash
# migrate-threads: a thread that cannot start is an error the caller hears,
# never a join of a thread that was not started.  An LD_PRELOAD shim (built
# here) makes the source's Nth pthread_create() fail with EAGAIN.  With
# --lockstep (no writer thread) and one bulk channel the source starts, in
# this order, the link watchdog (at its first connection), the urgent thread
# and the push thread after the switch-over: failing the second must end the
# source with "cannot start the urgent thread" and status 1 (it joined the
# unset thread and died of SIGSEGV before), and the destination gives up at
# its recovery deadline.
# timeout: 60
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest
command -v cc > /dev/null || fail "cc missing (make deps)"

cat > "$work/failthread.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

typedef int create_fn(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* The FAIL_THREAD_AT-th call fails with EAGAIN; the others start their thread. */
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	static int n;
	const char *at = getenv("FAIL_THREAD_AT");
	create_fn *real = (create_fn *)dlsym(RTLD_NEXT, "pthread_create");
	if (at && atoi(at) == __atomic_add_fetch(&n, 1, __ATOMIC_SEQ_CST))
		return EAGAIN;
	return real(t, a, fn, arg);
}
C
cc -shared -fPIC -O2 -o "$work/failthread.so" "$work/failthread.c" -ldl ||
	fail "cannot build the pthread_create shim"

port=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 8M --recover-ms 1000 \
	> "$work/d.out" 2> "$work/d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port"
# The sanitizer build's runtime wants to come first; the shim only wraps one call.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
	FAIL_THREAD_AT=2 LD_PRELOAD="$work/failthread.so" \
	"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 8M --lockstep --recover-ms 1000 \
	> "$work/s.out" 2> "$work/s.err"
st=$?
[ "$st" = 1 ] || { cat "$work/s.err" >&2; fail "source exited $st, not 1, when its urgent thread could not start"; }
grep -q "cannot start the urgent thread" "$work/s.err" ||
	{ cat "$work/s.err" >&2; fail "source did not say which thread could not start"; }
wait "$dpid" && fail "destination succeeded without its pages"
grep -q "source did not reconnect" "$work/d.err" ||
	{ cat "$work/d.err" >&2; fail "destination did not give up at its recovery deadline"; }
echo "migrate-threads: $(grep -o 'cannot start the urgent thread.*' "$work/s.err"); the destination gave up at its deadline"

# The destination starts the fault thread, the acceptor, then one handshake
# thread per connection: failing the third drops the source's first
# connection, which must be said (it was silent before), and the source's
# retry must still migrate everything.
port=$(free_port)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
	FAIL_THREAD_AT=3 LD_PRELOAD="$work/failthread.so" \
	"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 8M --recover-ms 5000 \
	> "$work/d2.out" 2> "$work/d2.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 8M > "$work/s2.out" 2> "$work/s2.err" ||
	{ cat "$work/s2.err" "$work/d2.err" >&2; fail "source failed after its first connection was dropped"; }
wait "$dpid" || { cat "$work/d2.err" >&2; fail "destination failed after a handshake thread could not start"; }
grep -q "dropped a connection: cannot start its handshake thread" "$work/d2.err" ||
	{ cat "$work/d2.err" >&2; fail "destination dropped a connection without saying why"; }
echo "migrate-threads: destination: $(grep -o 'dropped a connection: cannot start its handshake thread.*' "$work/d2.err" | head -1); the source's retry migrated everything"
