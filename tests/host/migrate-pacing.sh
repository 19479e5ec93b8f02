#!/usr/bin/env bash
# migrate-pacing: max-bandwidth honoured at any cap, and every change of it
# taking effect at once, at library level (mig-memtest, no KVM).  The
# source's cap changes while precopy runs (--caps-stdin, as QMP's
# migrate-set-parameters does), and the bytes that went through a counting
# proxy (tests/host/lib/count-proxy.py) between two changes stay within
# the cap:
#   1 KiB/s from the start, then 1 MiB/s, lowered to 2 KiB/s; postcopy
#   started (as migrate-start-postcopy: precopy must end at once, not
#   after the pages left in its round) and 2 KiB/s for the push; then
#   raised to 1 GiB/s: the migration must then end soon (a hang guard).
# On main (c859044) the pacer let through one page per 100 ms whatever the
# cap (40 KB/s), and after a low cap its clock ran minutes ahead, so a
# raised cap stayed slow until it caught up.
# Only upper bounds on bytes are checked: a slow machine sends less.
# timeout: 300
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest

port=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 16M --touch none \
	--metrics "$work/d.json" > /dev/null 2> "$work/d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port" "$dpid" "$work/d.err"
pport=$(free_port)
python3 tests/host/lib/count-proxy.py "$pport" "$port" "$work/bytes.log" 2> "$work/p.err" &
pids+=("$!")
wait_listen "$pport" "$!" "$work/p.err"
port=$pport
mkfifo "$work/caps"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 16M --precopy-rounds 1 \
	--max-bandwidth 1024 --caps-stdin < "$work/caps" > /dev/null 2> "$work/s.err" &
spid=$!
pids+=("$spid")
exec 3> "$work/caps"
wait_line "$work/s.err" "phase active" "the source" "$spid" 120

# A cap change; prints when the source took it (CLOCK_MONOTONIC ns) and
# the bytes it had sent by then (its own count, as it prints it).
cap() { # new-cap
	echo "$1" >&3
	wait_line "$work/s.err" "memtest: cap .* -> $1 at" "cap $1" "$spid" 120
	sed -n "s/^memtest: cap .* -> $1 at .*(monotonic \([0-9]*\) ns), \([0-9]*\) bytes sent.*/\1 \2/p" \
		"$work/s.err" | tail -n1
}

# What the source sent through the proxy by time T (ns).
sent_by() { # t
	awk -v t="$1" '$1 <= t { b = $2 } END { print b + 0 }' "$work/bytes.log"
}

# Bytes sent between two cap changes (each "T S": cap's output) within
# CAP bytes/s, plus what may be on its way at T0 (a batch: the bucket's 20
# ms at the cap before, PREV, and a frame), a frame run ahead of its tokens,
# and the heartbeats.  The window starts at the larger of what the proxy
# had read by T0 and what the source said it had sent by T0: both are at
# most what was sent, and the proxy alone, descheduled around T0 on a busy
# machine, would read the previous cap's bytes late and charge them to the
# new one (a 200 ms stop of the proxy there: 249840 bytes in the 2 KiB/s
# window, 45146 allowed).
within() { # what cap prev "t0 s0" "t1 s1"
	local t0=${4% *} s0=${4#* } t1=${5% *} p0 b allowed ms
	ms=$((($t1 - $t0) / 1000000))
	p0=$(sent_by "$t0")
	[ "$s0" -gt "$p0" ] || s0=$p0
	b=$(($(sent_by "$t1") - s0))
	allowed=$(($2 * ms / 1000 + $3 / 50 + 2 * 4200 + 2048))
	echo "$1: $b bytes in $ms ms at a cap of $2 B/s (at most $allowed; by its start the proxy had read $p0)"
	[ "$b" -le "$allowed" ] || fail "$1: the cap of $2 B/s was not honoured"
}

a=$(cap 1024)
sleep 6 # the window's length: any length shows the rate
b=$(cap 1048576)
within "1 KiB/s from the start" 1024 1024 "$a" "$b"
sleep 2
c=$(cap 2048)
sleep 6
echo postcopy >&3 # at 2 KiB/s a page takes 2 s: precopy must end at once all the same
wait_line "$work/s.err" "phase postcopy-active" "start-postcopy" "$spid" 120
mono() { sed -n "s/^memtest: $1 at .*(monotonic \([0-9]*\) ns).*/\1/p" "$work/s.err" | head -n1; }
echo "start-postcopy at 2 KiB/s: postcopy-active $((($(mono "phase postcopy-active") - $(mono start-postcopy)) / 1000000)) ms later"
d=$(cap 2048)
within "lowered from 1 MiB/s to 2 KiB/s" 2048 1048576 "$c" "$d"
sleep 6
e=$(cap 1073741824)
within "2 KiB/s in postcopy" 2048 2048 "$d" "$e"
wait_status "$spid" "the source after the cap was raised to 1 GiB/s" 120 ||
	{ cat "$work/s.err" "$work/d.err" >&2; fail "the source failed"; }
wait_status "$dpid" "the destination" 60 || { cat "$work/d.err" >&2; fail "the destination failed"; }
grep -q "checksum ok" "$work/d.err" || fail "no checksum verdict"
check_exactly_once "$work/d.json"
echo "raised to 1 GiB/s: completed $((($(mono "phase completed") - ${e% *}) / 1000000)) ms later"
