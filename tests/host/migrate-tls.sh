#!/usr/bin/env bash
# migrate-tls: migrate/tls.h against real OpenSSL TLS 1.3 handshakes over
# loopback TCP (mig-tls-check runs both ends).  Credentials are made with
# the commands of docs/security.md (scripts/make-tls-creds.sh, openssl).
# Good x509 and PSK credentials carry 4 MiB each way at once on one session
# (full duplex, byte-checked); every bad input fails on both ends with a
# message naming the cause.
# timeout: 300
set -u
BIN=${BIN:-build/bin}
check=$BIN/mig-tls-check
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$check" ] || fail "$check not built"
command -v openssl > /dev/null || fail "openssl (command) missing: make deps"

scripts/make-tls-creds.sh "$work/good" localhost > /dev/null
scripts/make-tls-creds.sh "$work/ip" 127.0.0.1 > /dev/null
scripts/make-tls-creds.sh "$work/other" localhost > /dev/null           # another CA
CA_DIR="$work/good" scripts/make-tls-creds.sh "$work/expired" localhost -1 > /dev/null
mkdir "$work/wrongca"                 # the right certificate, the wrong CA to check with
cp "$work/good"/client-*.pem "$work/wrongca/" && cp "$work/other/ca-cert.pem" "$work/wrongca/"
mkdir "$work/rogue"                   # a client certificate from another CA
cp "$work/other"/client-*.pem "$work/rogue/" && cp "$work/good/ca-cert.pem" "$work/rogue/"
umask 077 # the PSK files are secrets: readable by their owner only
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/keys.psk"
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/other.psk"
printf 'stranger:%s\n' "$(openssl rand -hex 32)" > "$work/stranger.psk"
printf 'qemu:00112233\n' > "$work/short.psk"

# Both ends ok; the suite with AES in hardware first (AES-128-GCM: x86's
# AES-NI and PCLMULQDQ; OpenSSL's own default order would pick AES-256);
# records gathered into few system calls: 4 MiB sent in 256 KiB calls is
# 257 records, and one write() each would be 257 writes (allow 128).
ok() { # description args...
	local what=$1
	shift
	"$check" "$@" > "$work/out" 2>&1 || { cat "$work/out" >&2; fail "$what: failed"; }
	[ "$(grep -c 'ok: 4194304 bytes each way over TLS 1.3' "$work/out")" = 2 ] ||
		{ cat "$work/out" >&2; fail "$what: not both ends ok"; }
	[ "$(grep -c 'TLS 1.3, TLS_AES_128_GCM_SHA256,' "$work/out")" = 2 ] ||
		{ cat "$work/out" >&2; fail "$what: not AES-128-GCM"; }
	local w
	for w in $(sed -n 's/.*, \([0-9]*\) socket writes,.*/\1/p' "$work/out"); do
		[ "$w" -le 128 ] || { cat "$work/out" >&2; fail "$what: $w writes for 257 records"; }
	done
	echo "ok: $what: $(tr '\n' ' ' < "$work/out")"
}
refused() { # description server-pattern client-pattern args...
	local what=$1 spat=$2 cpat=$3
	shift 3
	timeout 120 "$check" "$@" > "$work/out" 2>&1
	local rc=$?
	[ $rc = 1 ] || { cat "$work/out" >&2; fail "$what: exit $rc, want 1"; }
	grep -q "^server: .*$spat" "$work/out" || { cat "$work/out" >&2; fail "$what: server message"; }
	grep -q "^client: .*$cpat" "$work/out" || { cat "$work/out" >&2; fail "$what: client message"; }
	echo "ok: $what refused: $(tr '\n' ' ' < "$work/out")"
}

ok "x509" --server-creds "$work/good" --client-creds "$work/good" --hostname localhost
ok "x509, server named by IP address" --server-creds "$work/ip" --client-creds "$work/ip" \
	--hostname 127.0.0.1
ok "PSK" --server-psk "$work/keys.psk" --client-psk "$work/keys.psk"

refused "wrong CA at the client" "refused our certificate" "certificate was refused" \
	--server-creds "$work/good" --client-creds "$work/wrongca" --hostname localhost
refused "client certificate from another CA" "certificate was refused: unable to get local issuer" \
	"unknown ca" --server-creds "$work/good" --client-creds "$work/rogue" --hostname localhost
refused "expired server certificate" "server-cert.pem has expired" "closed the connection during the handshake" \
	--server-creds "$work/expired" --client-creds "$work/good" --hostname localhost
refused "hostname mismatch" "refused our certificate" "hostname mismatch" \
	--server-creds "$work/good" --client-creds "$work/good" --hostname other.example
refused "no hostname to check" "closed the connection during the handshake" "needs the server's name" \
	--server-creds "$work/good" --client-creds "$work/good"
refused "plain client against TLS" "does not speak TLS" "not TLS" \
	--server-creds "$work/good" --client-plain
refused "TLS client against plain" "not TLS" "does not speak TLS" \
	--server-plain --client-creds "$work/good" --hostname localhost
refused "wrong PSK" "PSK mismatch" "PSK mismatch" \
	--server-psk "$work/keys.psk" --client-psk "$work/other.psk"
refused "unknown PSK identity" "identity is not in our PSK file" "refused our PSK identity" \
	--server-psk "$work/keys.psk" --client-psk "$work/stranger.psk"
refused "x509 client against a PSK server" "offered no PSK" "handshake failure" \
	--server-psk "$work/keys.psk" --client-creds "$work/good" --hostname localhost
refused "PSK too short" "closed the connection during the handshake" "not IDENTITY:HEXKEY" \
	--server-psk "$work/keys.psk" --client-psk "$work/short.psk"
refused "truncated handshake" "closed the connection during the handshake" "truncated" \
	--server-creds "$work/good" --client-truncate
refused "silent client" "no handshake from the peer within 500 ms" "silent" \
	--server-psk "$work/keys.psk" --client-silent --timeout-ms 500
exit 0
