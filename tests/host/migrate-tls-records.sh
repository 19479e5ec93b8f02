#!/usr/bin/env bash
# migrate-tls-records: the TLS layer's record batching keeps every byte.
# mig-tls-check --mixed sends 1 byte to 300,000 bytes per call (frame
# headers, pages with their header, exact and inexact multiples of a 16 KiB
# record) and receives 1 byte to 300,000 per call (short reads inside and
# across records): each end checks every byte and the CRC32C of what it
# received against the sender's.  --sndbuf: a small socket buffer and a
# late receiver, so a send of many records stops when the socket is full
# and goes on where it stopped ("send waits" > 0).  Then a migration
# (mig-memtest, PSK) whose metrics name kTLS or the reason it is not used,
# at both ends; MIG_NO_KTLS names itself; a plain migration says "tls": null.
# timeout: 300
set -uo pipefail
. tests/host/migrate-lib.bash # $work, fail, free_port, wait_listen, check_json, ...
check=$BIN/mig-tls-check
need_programs mig-tls-check mig-memtest
command -v openssl > /dev/null || fail "openssl (command) missing: make deps"

scripts/make-tls-creds.sh "$work/x509" localhost > /dev/null
umask 077 # the PSK file is a secret: readable by its owner only
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/keys.psk"

# A line of mig-tls-check's: "ok: N bytes ... crc32c sent S received R, kTLS send
# yes|no receive yes|no (fallback or "no fallback")".  It fails by itself when
# a byte, or the CRC32C of a direction, differs between the ends.
stream() { # description bytes args...
	local what=$1 bytes=$2
	shift 2
	timeout "$(guard 240)" "$check" --bytes "$bytes" "$@" > "$work/out" 2>&1 ||
		{ cat "$work/out" >&2; fail "$what: failed"; }
	[ "$(grep -c "ok: $bytes bytes each way over TLS 1.3" "$work/out")" = 2 ] ||
		{ cat "$work/out" >&2; fail "$what: not both ends ok"; }
	# kTLS, or the reason it is not used, is named at both ends.
	[ "$(grep -cE 'kTLS send (yes|no) receive (yes|no) \((no fallback|.+)\)$' "$work/out")" = 2 ] ||
		{ cat "$work/out" >&2; fail "$what: kTLS state not named"; }
	if grep -q 'kTLS send no' "$work/out" && grep -q 'kTLS send no.*(no fallback)' "$work/out"; then
		cat "$work/out" >&2
		fail "$what: kTLS not used, and no reason given"
	fi
	echo "ok: $what: $(tr '\n' ' ' < "$work/out")"
}

stream "x509, mixed sizes" 20000000 --mixed \
	--server-creds "$work/x509" --client-creds "$work/x509" --hostname localhost
stream "PSK, mixed sizes" 20000000 --mixed --server-psk "$work/keys.psk" --client-psk "$work/keys.psk"
stream "PSK, mixed sizes, the socket full" 8000000 --mixed --sndbuf 4096 \
	--server-psk "$work/keys.psk" --client-psk "$work/keys.psk"
waits=$(sed -n 's/.*, \([0-9]*\) send waits,.*/\1/p' "$work/out" | sort -n | tail -1)
[ "${waits:-0}" -gt 0 ] || { cat "$work/out" >&2; fail "--sndbuf 4096: no send ever waited for the socket"; }
stream "x509, 256 KiB sends, the socket full" 8000000 --sndbuf 4096 \
	--server-creds "$work/x509" --client-creds "$work/x509" --hostname localhost
MIG_NO_KTLS=1 "$check" --bytes 1000000 --server-psk "$work/keys.psk" --client-psk "$work/keys.psk" \
	> "$work/out" 2>&1 || { cat "$work/out" >&2; fail "MIG_NO_KTLS: failed"; }
[ "$(grep -c 'kTLS send no receive no (disabled by MIG_NO_KTLS)' "$work/out")" = 2 ] ||
	{ cat "$work/out" >&2; fail "MIG_NO_KTLS: not named as the reason"; }
echo "ok: MIG_NO_KTLS named as the fallback"

# The metrics of a migration over TLS: "tls" names kTLS or its fallback.
migrate() { # name [options for both ends...]
	local name=$1
	shift
	start_memtest_dest "$name" --mem 16M --metrics "$work/$name-d.json" "$@"
	timeout "$(guard 120)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$dport" --mem 16M \
		--metrics "$work/$name-s.json" "$@" > /dev/null 2> "$work/$name-s.err" ||
		{ cat "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: source failed"; }
	wait_status "$dpid" "$name: destination" > /dev/null ||
		{ cat "$work/$name-d.err" >&2; fail "$name: destination failed"; }
}
migrate tls --tls-psk "$work/keys.psk"
for side in s d; do
	f=$work/tls-$side.json
	check_json "$f" '.tls.sessions == 2 and (.tls.ktls_send | type) == "boolean" and (.tls.ktls_recv | type) == "boolean"' \
		"tls ($side): no kTLS state in the metrics"
	check_json "$f" '(.tls.ktls_send and .tls.ktls_recv) or (.tls.fallback | type) == "string"' \
		"tls ($side): kTLS not used both ways and no fallback named"
done
echo "ok: metrics: $(jq -c .tls "$work/tls-s.json")"
MIG_NO_KTLS=1 migrate noktls --tls-psk "$work/keys.psk"
check_json "$work/noktls-s.json" '.tls.fallback == "disabled by MIG_NO_KTLS" and .tls.ktls_send == false' \
	"MIG_NO_KTLS: not in the metrics"
migrate plain
check_json "$work/plain-s.json" '.tls == null' "plain: a tls member"
check_json "$work/plain-d.json" '.tls == null' "plain: a tls member at the destination"
echo "ok: metrics: MIG_NO_KTLS named, plain says null"
exit 0
