#!/usr/bin/env bash
# migrate-hostile: an adversarial peer (mig-evil) sends each malformed
# stream; the destination must reject it with a clear message naming the
# problem and exit non-zero.  The reverse case: a hostile destination asks
# for a page outside RAM; the source must refuse it.
set -uo pipefail
. tests/host/migrate-lib.bash
for p in mig-memtest mig-evil; do [ -x "$BIN/$p" ] || fail "$BIN/$p is not built"; done

expect() { # case expected-message-regex
	local port
	port=$(free_port)
	"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 16M > /dev/null 2> "$work/$1.err" &
	local dpid=$!
	wait_listen "$port"
	timeout 10 "$BIN/mig-evil" "$1" "tcp:127.0.0.1:$port" --mem 16 2> "$work/$1.evil" ||
		{ cat "$work/$1.evil" >&2; fail "$1: the adversary could not run"; }
	wait "$dpid"
	local rc=$?
	[ "$rc" != 0 ] || fail "$1: destination exited 0 on a hostile stream"
	[ "$rc" -lt 128 ] || fail "$1: destination crashed (status $rc)"
	grep -Eq "$2" "$work/$1.err" || { cat "$work/$1.err" >&2; fail "$1: message does not match /$2/"; }
	echo "$1: rejected: $(tail -n1 "$work/$1.err")"
}

expect bad-magic "bad magic"
expect bad-hdr-crc "header checksum mismatch"
expect unknown-type "unknown message type"
expect bad-version "protocol version 99"
expect no-hello "LAYOUT before HELLO"
expect bad-layout "LAYOUT regions cover"
expect truncated "truncated PAGE frame"
expect out-of-ram "outside guest RAM"
expect unaligned "not page aligned"
expect length-mismatch "does not match frame"
expect bad-checksum "payload checksum mismatch.*corrupted"
expect bad-zstd "does not decompress"

port=$(free_port)
"$BIN/mig-evil" evil-request "tcp:127.0.0.1:$port" 2> "$work/evil-dest.err" &
pids+=($!)
wait_listen "$port"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 16M 2> "$work/src.err" &&
	fail "the source accepted a request outside RAM"
grep -q "PAGE_REQUEST address .* outside guest RAM" "$work/src.err" ||
	{ cat "$work/src.err" >&2; fail "evil-request: no clear message at the source"; }
echo "evil-request: rejected: $(tail -n1 "$work/src.err")"
echo "migrate-hostile: all cases rejected"
