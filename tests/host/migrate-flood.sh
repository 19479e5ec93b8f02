#!/usr/bin/env bash
# migrate-flood: strangers cannot hold or kill an incoming migration.  8
# connections that trickle a byte every 2.5 s and 32 that churn (connect,
# garbage, close) hit a destination, plain and with a PSK; a real source
# started 3 s into the flood completes with equal checksums, and the
# destination's threads and file descriptors stay bounded.  Then a cut in
# the middle of postcopy with the flood running: the source's recovery gets
# in.  (Before the handshake deadline and slot eviction, the tricklers held
# all eight handshake slots and the source was refused.)
# timeout: 420
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest mig-cutproxy
umask 077
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/keys.psk"

# The highest thread and fd counts of pid while it runs (sampled every 0.2 s).
watch_counts() { # pid out-file
	local max_t=0 max_f=0 t f
	while kill -0 "$1" 2> /dev/null; do
		t=$(awk '/^Threads:/ { print $2 }' "/proc/$1/status" 2> /dev/null || echo 0)
		f=$(ls "/proc/$1/fd" 2> /dev/null | wc -l)
		[ "${t:-0}" -gt "$max_t" ] && max_t=$t
		[ "$f" -gt "$max_f" ] && max_f=$f
		echo "$max_t $max_f" > "$2"
		sleep 0.2
	done
}

flood_run() { # name [tls options...]
	local name=$1 fpid wpid
	shift
	start_memtest_dest "$name" --mem 16M --metrics "$work/$name-d.json" "$@"
	python3 tests/host/lib/flood.py 127.0.0.1 "$dport" --seconds 120 > "$work/$name-f.out" 2>&1 &
	fpid=$!
	pids+=("$fpid")
	watch_counts "$dpid" "$work/$name-counts" &
	wpid=$!
	pids+=("$wpid")
	sleep 3
	# The flood reached the destination before the source starts: a late
	# flood.py (a busy machine) could miss a short migration altogether.
	wait_line "$work/$name-d.err" "refused a connection" "$name: the flood" "$fpid"
	timeout "$(guard 120)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$dport" --mem 16M "$@" \
		2> "$work/$name-s.err" ||
		{ cat "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: the source failed under the flood"; }
	wait_status "$dpid" "$name: the destination" 60
	local rc=$?
	kill "$fpid" 2> /dev/null
	wait "$wpid" 2> /dev/null
	[ "$rc" = 0 ] && grep -q "checksum ok" "$work/$name-d.err" ||
		{ cat "$work/$name-d.err" >&2; fail "$name: destination status $rc"; }
	check_exactly_once "$work/$name-d.json"
	grep -q "refused a connection" "$work/$name-d.err" || fail "$name: the flood was never refused (did it run?)"
	read -r threads fds < "$work/$name-counts"
	[ "$threads" -le 64 ] || fail "$name: the destination ran $threads threads under the flood"
	[ "$fds" -le 96 ] || fail "$name: the destination held $fds file descriptors under the flood"
	echo "$name: completed under the flood; at most $threads threads and $fds fds;" \
		"$(grep -c 'refused a connection' "$work/$name-d.err") refusal lines (rate-limited)"
}

flood_run plain
flood_run psk --tls-psk "$work/keys.psk"

# A cut in the middle of postcopy while the flood runs: the recovery gets in.
start_memtest_dest cut --mem 24M --metrics "$work/cut-d.json"
pport=$(free_port)
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--cut-after 6000000 --down-ms 300 2> "$work/cut-p.err" &
pids+=($!)
wait_listen "$pport"
python3 tests/host/lib/flood.py 127.0.0.1 "$dport" --seconds 120 > "$work/cut-f.out" 2>&1 &
fpid=$!
pids+=("$fpid")
sleep 3
timeout "$(guard 120)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$pport" --mem 24M \
	--metrics "$work/cut-s.json" 2> "$work/cut-s.err" ||
	{ cat "$work/cut-s.err" "$work/cut-d.err" >&2; fail "cut: the source failed"; }
wait_status "$dpid" "cut: the destination" 60
rc=$?
kill "$fpid" 2> /dev/null
cat "$work/cut-p.err"
[ "$rc" = 0 ] && grep -q "checksum ok" "$work/cut-d.err" ||
	{ cat "$work/cut-d.err" >&2; fail "cut: destination status $rc"; }
grep -q "cut 1" "$work/cut-p.err" || fail "cut: the proxy never cut the link"
check_json "$work/cut-s.json" '.recoveries >= 1' "cut: no recovery counted"
check_exactly_once "$work/cut-d.json"
echo "cut: recovered under the flood, checksums equal"
echo "migrate-flood: passed"
