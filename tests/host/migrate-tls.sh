#!/usr/bin/env bash
# migrate-tls: migrate/tls.h against real OpenSSL TLS 1.3 handshakes over
# loopback TCP (mig-tls-check runs both ends).  Credentials are made with
# the commands of docs/security.md (scripts/make-tls-creds.sh, openssl).
# Good x509 and PSK credentials carry 4 MiB each way at once on one session
# (full duplex, byte-checked); every bad input fails on both ends with a
# message naming the cause.
# Then the trust boundary with the migration library: secret files readable
# by others, a certificate-only impostor against a PSK source, another PSK,
# and a proof relayed by an insider onto another TLS session.
# timeout: 300
set -u
BIN=${BIN:-build/bin}
check=$BIN/mig-tls-check
. tests/host/migrate-lib.bash # $work, fail, free_port, wait_listen, ...
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
	timeout "$(guard 120)" "$check" "$@" > "$work/out" 2>&1
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

# ---- The trust boundary, with the migration library (mig-memtest) ----
need_programs mig-memtest mig-cutproxy

# A secret file that others can read is refused, naming it and its mode.
cp "$work/keys.psk" "$work/open.psk" && chmod 644 "$work/open.psk"
"$BIN/mig-memtest" source --to tcp:127.0.0.1:1 --mem 4M --tls-psk "$work/open.psk" \
	2> "$work/open.err" && fail "a group/world-readable PSK file was accepted"
grep -q "open.psk: readable by group or others (mode 0644)" "$work/open.err" ||
	{ cat "$work/open.err" >&2; fail "open PSK file: no clear message"; }
chmod 640 "$work/good/client-key.pem"
"$BIN/mig-memtest" source --to tcp:127.0.0.1:1 --mem 4M --tls-creds "$work/good" \
	--tls-hostname localhost 2> "$work/openkey.err" && fail "a group-readable key was accepted"
grep -q "client-key.pem: readable by group or others (mode 0640)" "$work/openkey.err" ||
	{ cat "$work/openkey.err" >&2; fail "open key file: no clear message"; }
chmod 600 "$work/good/client-key.pem"
echo "ok: secret files readable by others refused"

# A PSK source against an impostor with a certificate and no PSK (TLS 1.3
# lets a server ignore the client's PSK): refused in the handshake, not one
# byte of the migration sent.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
	-keyout "$work/evil-key.pem" -out "$work/evil-cert.pem" -days 1 -subj /CN=evil 2> /dev/null
port=$(free_port)
python3 tests/host/lib/tls-impostor.py "$port" "$work/evil-cert.pem" "$work/evil-key.pem" \
	"$work/impostor.out" &
ipid=$!
pids+=("$ipid")
wait_listen "$port"
timeout "$(guard 60)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 8M \
	--tls-psk "$work/keys.psk" 2> "$work/impostor-s.err" && fail "the source migrated to an impostor"
wait_status "$ipid" "the impostor" 60
cat "$work/impostor-s.err" "$work/impostor.out"
grep -q "did not authenticate with the pre-shared key" "$work/impostor-s.err" ||
	fail "impostor: the source does not say the peer did not use the PSK"
grep -q "migration complete" "$work/impostor-s.err" && fail "impostor: the source says complete"
grep -Eq "^(handshake failed|received 0 bytes)" "$work/impostor.out" ||
	fail "impostor: it received migration data: $(cat "$work/impostor.out")"
echo "ok: PSK source refused a certificate-only impostor, nothing sent"

# A PSK source against a destination with another PSK: refused both ends.
start_memtest_dest otherpsk --tls-psk "$work/other.psk"
timeout "$(guard 60)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$dport" --mem 4M \
	--tls-psk "$work/keys.psk" 2> "$work/otherpsk-s.err" && fail "migrated with another PSK"
grep -q "PSK mismatch" "$work/otherpsk-s.err" ||
	{ cat "$work/otherpsk-s.err" >&2; fail "other PSK: no clear message at the source"; }
kill -0 "$dpid" 2> /dev/null || fail "other PSK: the destination gave up on a refused stranger"
kill "$dpid"
grep -q "PSK mismatch" "$work/otherpsk-d.err" ||
	{ cat "$work/otherpsk-d.err" >&2; fail "other PSK: no clear message at the destination"; }
echo "ok: another PSK refused at both ends, the destination listened on"

# An insider who holds the PSK relays a reconnecting source's AUTH into a
# TLS session of its own with the destination: the proof is bound to the
# source's TLS session and refused; the real recovery then completes.
start_memtest_dest relay --mem 24M --tls-psk "$work/keys.psk" --metrics "$work/relay-d.json"
pport=$(free_port)
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--cut-after 6000000 --down-ms 100 --relay-psk "$work/keys.psk" 2> "$work/relay-p.err" &
pids+=($!)
wait_listen "$pport"
timeout "$(guard 120)" "$BIN/mig-memtest" source --to "tcp:127.0.0.1:$pport" --mem 24M \
	--tls-psk "$work/keys.psk" --push-runs --metrics "$work/relay-s.json" 2> "$work/relay-s.err" ||
	{ cat "$work/relay-s.err" "$work/relay-d.err" "$work/relay-p.err" >&2; fail "relay: the source failed"; }
wait_status "$dpid" "relay: the destination" 60
rc=$?
cat "$work/relay-p.err"
[ "$rc" = 0 ] && grep -q "checksum ok" "$work/relay-d.err" ||
	{ cat "$work/relay-d.err" >&2; fail "relay: destination status $rc"; }
grep -q "relayed proof refused" "$work/relay-p.err" ||
	fail "relay: the relayed proof was not refused"
grep -q "wrong proof of the session secret" "$work/relay-d.err" ||
	fail "relay: the destination does not name the wrong proof"
check_exactly_once "$work/relay-d.json"
# Under TLS the page payloads go without CRC (the AEAD checks them), in runs.
check_json "$work/relay-s.json" '.features == ["runs", "no_payload_crc"]' \
	"relay: runs without payload CRC not agreed under TLS"
echo "ok: a proof relayed onto another TLS session refused, the recovery completed"
exit 0
