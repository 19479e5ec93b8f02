#!/usr/bin/env bash
# migrate-recovery: postcopy over a link that breaks.  mig-cutproxy resets
# both TCP connections mid-postcopy and refuses reconnects for a while; the
# source reconnects, RESUME exchanges the received bitmap, the migration
# completes with the right checksum and every page exactly once at the
# destination.  Then a link that dies right after the state was sent, and a
# source that never comes back: the destination must
# stop with a clear error after its deadline, never claim success.  Last,
# scripted breaks by the adversarial peer mig-evil.
# timeout: 180
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest mig-cutproxy

# 1. Cut once, come back after 300 ms.
dport=$(free_port)
pport=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$dport" --mem 24M --metrics "$work/d.json" \
	> "$work/d.out" 2> "$work/d.err" &
dpid=$!
pids+=("$dpid")
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--cut-after 6000000 --down-ms 300 2> "$work/p.err" &
pids+=($!)
wait_listen "$dport"
wait_listen "$pport"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$pport" --mem 24M --metrics "$work/s.json" \
	2> "$work/s.err" || { cat "$work/s.err" "$work/d.err" "$work/p.err" >&2; fail "source failed across the cut"; }
wait "$dpid" || { cat "$work/d.err" >&2; fail "destination failed across the cut"; }
cat "$work/p.err" "$work/s.err" "$work/d.err"
grep -q "cut 1" "$work/p.err" || fail "the proxy never cut the link"
grep -q "link to destination broken" "$work/s.err" || fail "the source did not report the break"
grep -q "link to the source broken" "$work/d.err" || fail "the destination did not report the break"
grep -q "checksum ok" "$work/d.err" || fail "checksum verdict missing"
check_json "$work/s.json" '.recoveries == 1' "no recovery counted"
check_exactly_once "$work/d.json"
check_json "$work/d.json" '.recoveries == 1 and .link_down_ms > 0' "destination did not count the recovery"

# 2. The link dies silently right after the source sent its state (the state
#    never arrives): the destination asks for it again on reconnection.
#    824 bytes = 4 HELLO frames (64 each), 3 AUTH frames (64 each: the
#    secret, the bulk channel's challenge and proof), DONE(0) on bulk (40:
#    sent before LAYOUT), LAYOUT and its acknowledgement (168 each): what
#    follows (STATE) is dropped.
dport=$(free_port)
pport=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$dport" --mem 16M --metrics "$work/d3.json" \
	> /dev/null 2> "$work/d3.err" &
dpid=$!
pids+=("$dpid")
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--cut-after 824 --swallow-ms 200 --down-ms 200 2> "$work/p3.err" &
pids+=($!)
wait_listen "$dport"
wait_listen "$pport"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$pport" --mem 16M 2> "$work/s3.err" ||
	{ cat "$work/s3.err" "$work/d3.err" "$work/p3.err" >&2; fail "source failed when the state was lost"; }
wait "$dpid" || { cat "$work/d3.err" >&2; fail "destination failed when the state was lost"; }
cat "$work/s3.err" "$work/d3.err"
grep -q "before the VM state arrived" "$work/d3.err" || fail "the state was not lost (cut too late?)"
grep -q "sent it again" "$work/s3.err" || fail "the source did not resend the state"
grep -q "checksum ok" "$work/d3.err" || fail "checksum verdict missing"
check_exactly_once "$work/d3.json"

# 3. The source dies for good (the link stays down past the deadline).
dport=$(free_port)
pport=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$dport" --mem 24M --recover-ms 800 \
	> "$work/d2.out" 2> "$work/d2.err" &
dpid=$!
pids+=("$dpid")
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--cut-after 4000000 --down-ms 4000 2> "$work/p2.err" &
pids+=($!)
wait_listen "$dport"
wait_listen "$pport"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$pport" --mem 24M --recover-ms 800 \
	2> "$work/s2.err" && fail "the source claimed success over a dead link"
wait "$dpid"
rc=$?
cat "$work/s2.err" "$work/d2.err"
[ "$rc" != 0 ] || fail "the destination exited 0 although the source never came back"
grep -q "did not reconnect within 800 ms" "$work/d2.err" || fail "no clear error at the destination"
grep -q "must not run on" "$work/d2.err" || fail "the destination does not say it stopped the VM"
grep -q "checksum ok" "$work/d2.err" && fail "the destination claimed a good checksum"
grep -q "giving up" "$work/s2.err" || fail "no clear error at the source"
# 4. Scripted breaks by the adversarial source (mig-evil), each against a
#    real destination that checks every page: the verdict is its checksum.
#    reset-installed: pages installed, then the link breaks before STATE;
#    reset-before-resume: a reconnection reset before RESUME;
#    idlers: three silent connections ahead of the real reconnection.
evil_case() { # case recover-ms
	start_memtest_dest "$1" --recover-ms "$2" --metrics "$work/$1-d.json"
	timeout "$(guard 120)" "$BIN/mig-evil" "$1" "tcp:127.0.0.1:$dport" --mem 4 2> "$work/$1-e.err"
	local erc=$?
	wait_status "$dpid" "$1: the destination"
	local rc=$?
	cat "$work/$1-e.err" "$work/$1-d.err"
	[ "$rc" -lt 128 ] || fail "$1: the destination crashed (status $rc)"
	[ "$erc" = 0 ] || fail "$1: the adversary saw the destination misbehave (status $erc)"
	[ "$rc" = 0 ] || fail "$1: destination exit status $rc"
	grep -q "checksum ok" "$work/$1-d.err" || fail "$1: checksum verdict missing"
	check_exactly_once "$work/$1-d.json"
}
evil_case reset-installed 10000
evil_case reset-before-resume 10000
evil_case idlers 4000
echo "migrate-recovery: passed"
