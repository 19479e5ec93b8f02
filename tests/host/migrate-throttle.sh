#!/usr/bin/env bash
# migrate-throttle: slowness never reads as death.  A destination stopped
# right after its accept still takes the source's HELLO.  A migration whose
# source or destination is starved (SIGSTOP/SIGCONT from
# tests/host/lib/throttle.py: a few percent of the CPU in short slices,
# then stops of several seconds, as an overloaded host or a preempted vCPU
# looks from the peer) completes with the checksum equal, every page
# exactly once, and no recovery: the link was never cut, so a recovery
# would be the watchdog mistaking a slow peer for a dead one.  Library
# level (mig-memtest), so it runs on any machine; the hang guard is
# generous, nothing here waits on the machine's speed.
# timeout: 900
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest

# throttled_pair NAME WHO RUN-MS STOP-MS SOURCE-OPTIONS DEST-OPTIONS:
# WHO (source or dest) runs under throttle.py from its start to its end.
throttled_pair() {
	local name=$1 who=$2 run=$3 stop=$4 port dpid spid src dst
	local -a sthr=() dthr=()
	local thr=(python3 tests/host/lib/throttle.py --run-ms "$run" --stop-ms "$stop" --seconds 700 --)
	if [ "$who" = source ]; then sthr=("${thr[@]}"); else dthr=("${thr[@]}"); fi
	port=$(free_port)
	"${dthr[@]}" "$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 16M \
		--metrics "$work/$name-d.json" $6 > "$work/$name-d.out" 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	wait_listen "$port" "$dpid" "$work/$name-d.err"
	"${sthr[@]}" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 16M \
		--metrics "$work/$name-s.json" $5 2> "$work/$name-s.err" &
	spid=$!
	pids+=("$spid")
	wait_status "$spid" "$name: the source" 800
	src=$?
	wait_status "$dpid" "$name: the destination" 800
	dst=$?
	if [ "$src" != 0 ] || [ "$dst" != 0 ]; then
		cat "$work/$name-s.err" "$work/$name-d.err" >&2
		fail "$name: source exit $src, destination exit $dst"
	fi
	grep -q "checksum ok" "$work/$name-d.err" || fail "$name: no checksum verdict"
	check_exactly_once "$work/$name-d.json"
	jq -e ".recoveries == 0" "$work/$name-d.json" > /dev/null || { grep -hv "^{" "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: the destination recovered a link nobody cut"; }
	check_json "$work/$name-s.json" '.recoveries == 0 and .duplicate_pages == 0' \
		"$name: the source recovered a link nobody cut, or sent a page twice"
	local stops
	stops=$(grep -ho 'stopped mig-memtest [0-9]* times' "$work/$name-s.err" "$work/$name-d.err")
	[ -n "$stops" ] || fail "$name: the throttle did not report"
	echo "$name: $stops; checksum ok, every page once, no recovery"
}

# A destination stopped for 4 s between its accept and the source's HELLO
# (longer than the 3 s a handshake once had, shorter than the 10 s of
# silence that means death) answers the HELLO when it runs again; it used
# to refuse the source, "peer silent", for its own stop.  Deterministic:
# the stop is placed there, not left to the throttle's timing.
start_memtest_dest stalled --mem 4M
python3 tests/host/lib/stalled-accept.py 127.0.0.1 "$dport" "$dpid" --ram $((4 << 20)) \
	--stop-ms 4000 > "$work/stalled.out" 2>&1 ||
	{ cat "$work/stalled.out" "$work/stalled-d.err" >&2; fail "stalled: the destination refused a source for its own stop"; }
cat "$work/stalled.out"
kill "$dpid" 2> /dev/null
wait "$dpid" 2> /dev/null

# The destination's "vCPU" reads every page once in random order and works
# 250 us on each: about a second of its CPU, so the throttle bites.
post="--touch random --touch-ns 250000"
# A few percent of a CPU, in 10 ms slices: every step is slow, none stops.
throttled_pair source-5pct source 10 190 "" "$post"
throttled_pair dest-5pct dest 10 190 "" "$post"
throttled_pair source-5pct-precopy source 10 190 "--precopy-rounds 2" "$post"
# Stops of 4 s (below the 10 s of silence that means death), running 0.2 s between.
throttled_pair source-stops source 200 4000 "" "$post"
throttled_pair dest-stops dest 200 4000 "--precopy-rounds 1" "$post"
# The limit follows what the link has shown.  A source stopped for 3 s and
# heard again has shown that it can be that slow and alive: its next stop,
# 4.8 s, is longer than the 4 s limit it started with, and is no death
# (the limit is now twice the longest silence survived).  The stopped
# source itself, woken late, gives no verdict on a destination whose
# heartbeats it has not read yet.  The push is capped so that postcopy
# outlasts both stops whatever the machine's speed.
stretch_stop() { # pid seconds
	kill -STOP "$1"
	sleep "$2"
	kill -CONT "$1"
}
start_memtest_dest stretch --mem 16M --touch none --idle-ms 4000 --recover-ms 20000 \
	--metrics "$work/stretch-d.json"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$dport" --mem 16M --idle-ms 4000 \
	--recover-ms 20000 --max-bandwidth 1048576 --metrics "$work/stretch-s.json" \
	2> "$work/stretch-s.err" &
spid=$!
pids+=("$spid")
wait_line "$work/stretch-s.err" "source checksum" "stretch: the source" "$spid"
sleep 1
stretch_stop "$spid" 3
sleep 2
stretch_stop "$spid" 4.8
grep -q "checksum ok" "$work/stretch-d.err" &&
	fail "stretch: the migration ended before the second stop was over (the test proves nothing)"
wait_status "$spid" "stretch: the source" 600
src=$?
wait_status "$dpid" "stretch: the destination" 120
dst=$?
grep -h "broken\|silent\|heartbeats\|unanswered" "$work/stretch-s.err" "$work/stretch-d.err" | sed "s/^/stretch: /"
[ "$src" = 0 ] && [ "$dst" = 0 ] || fail "stretch: source exit $src, destination exit $dst"
grep -q "checksum ok" "$work/stretch-d.err" || fail "stretch: no checksum verdict"
check_exactly_once "$work/stretch-d.json"
check_json "$work/stretch-s.json" '.recoveries == 0 and .duplicate_pages == 0' \
	"stretch: a stop longer than the first limit, after a shorter one survived, broke the link"
echo "stretch: stops of 3 s and 4.8 s under a 4 s limit; checksum ok, no recovery"

echo "migrate-throttle: passed"
