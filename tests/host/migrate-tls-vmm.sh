#!/usr/bin/env bash
# migrate-tls-vmm: real VMM-to-VMM migrations over TLS on loopback, and every
# bad TLS input on a real migration.  Credentials are made with the commands
# of docs/security.md (scripts/make-tls-creds.sh, openssl).
#   good: x509 through migrate-agent and the control socket; PSK with
#     --migrate-to; x509 through a proxy that flips one bit of a TLS record
#     mid-postcopy (a broken session: recovery over a new TLS connection).
#     Checksum equal to an unmigrated run, every page exactly once.
#   bad: wrong CA, a client certificate from another CA, a hostname
#     mismatch, an expired certificate (either end), a plain source against
#     a TLS destination and the reverse, a wrong PSK, contradictory flags:
#     each names its cause; the source's VM goes on and ends with the
#     unmigrated checksum (nothing lost); a TLS destination stays waiting.
#   during a live migration: a plain stranger (even one holding the
#     session's secret) is refused at the handshake, and an intruder holding
#     the PSK but not the secret is refused by the recovery HMAC; the live
#     migration completes undisturbed.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent mig-cutproxy mig-memtest mig-evil
need_guest
command -v openssl > /dev/null || fail "openssl (command) missing: make deps"
need_kvm

c=$work/creds
scripts/make-tls-creds.sh "$c/good" 127.0.0.1 > /dev/null
scripts/make-tls-creds.sh "$c/named" localhost > /dev/null
scripts/make-tls-creds.sh "$c/other" 127.0.0.1 > /dev/null # another CA
CA_DIR="$c/good" scripts/make-tls-creds.sh "$c/expired" 127.0.0.1 -1 > /dev/null
mkdir "$c/wrongca" "$c/rogue"
cp "$c/good"/client-*.pem "$c/wrongca/" && cp "$c/other/ca-cert.pem" "$c/wrongca/"
cp "$c/other"/client-*.pem "$c/rogue/" && cp "$c/good/ca-cert.pem" "$c/rogue/"
umask 077 # the PSK files are secrets: readable by their owner only
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$c/keys.psk"
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$c/other.psk"

cmd="workload=random iters=4000 quiet=1"
ref=$(reference_checksum 32M "$cmd")

# The destination's guest ran to the unmigrated checksum, every page once.
dest_migrated() { # name
	wait_status "$dpid" "$1: the destination" 240 ||
		{ cat "$work/$1-d.err" >&2; fail "$1: the destination failed"; }
	check_dest "$1" "$ref" "$work/$1-d.err" "$work/$1-d.json"
}

# --- Good credentials ---

# x509 through the CLI and the control socket (the server's name: its IP).
start_vmm_dest x509 240 --tls-creds "$c/good"
sock=$work/x509.sock
start_control_vmm "$sock" "$work/x509-s.err" 240 "$cmd"
"$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" --tls-creds "$c/good" \
	> "$work/x509-agent.json" 2> "$work/x509-agent.err" ||
	{ cat "$work/x509-agent.err" "$work/x509-s.err" "$work/x509-d.err" >&2; fail "x509: migrate-agent failed"; }
wait "$spid" || { cat "$work/x509-s.err" >&2; fail "x509: the source vmm failed"; }
dest_migrated x509
echo "x509: checksum equal; $(jq -c '{downtime_us, push_MiB_per_s, p50: .fault_latency_us.p50}' "$work/x509-agent.json")"

# PSK, the source migrating by itself.
start_vmm_dest psk 240 --tls-psk "$c/keys.psk"
timeout "$(guard 240)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" \
	--migrate-to "tcp:127.0.0.1:$dport" --migrate-after 100 --tls-psk "$c/keys.psk" \
	> /dev/null 2> "$work/psk-s.err" || { cat "$work/psk-s.err" >&2; fail "psk: the source failed"; }
grep -q "migration to .* complete" "$work/psk-s.err" || { cat "$work/psk-s.err" >&2; fail "psk: not migrated"; }
dest_migrated psk
echo "psk: checksum equal"

# One bit of a TLS record flipped mid-postcopy: the session breaks (bad
# record MAC), both ends recover over a new TLS connection; nothing of the
# corrupted record is ever installed.  (Named server: --tls-hostname.)
# The flip comes after 150 kB, both directions counted: past the
# handshakes, LAYOUT and STATE (a few kB), and short of what any run sends
# (8192 pages of 32 MiB: even a guest that dirtied nothing before the
# switch-over, as in a slow nested node, costs a header for each zero
# page).  It was 6 MB, which such a guest never dirtied.
start_vmm_dest flip 240 --tls-creds "$c/named"
pport=$(free_port)
"$BIN/mig-cutproxy" --listen "tcp:127.0.0.1:$pport" --to "tcp:127.0.0.1:$dport" \
	--flip-after 150000 2> "$work/flip-p.err" &
pids+=($!)
wait_listen "$pport"
timeout "$(guard 240)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" \
	--migrate-to "tcp:127.0.0.1:$pport" --migrate-after 100 --tls-creds "$c/named" \
	--tls-hostname localhost --migrate-metrics "$work/flip-s.json" \
	> /dev/null 2> "$work/flip-s.err" || { cat "$work/flip-s.err" >&2; fail "flip: the source failed"; }
dest_migrated flip
grep -q "flipped a bit" "$work/flip-p.err" || fail "flip: the proxy never flipped a bit"
grep -q "broken during postcopy.*\(bad record mac\|link broke\)" "$work/flip-d.err" ||
	{ cat "$work/flip-d.err" >&2; fail "flip: the destination did not name the broken session"; }
check_json "$work/flip-s.json" '.recoveries >= 1' "flip: no recovery"
echo "flip: recovered, checksum equal; $(grep -h 'link .*broken' "$work/flip-d.err" | head -n1)"

# --- Bad inputs: each named; the source's VM goes on, nothing is lost ---

# The source tries once (--migrate-after); its guest must still end right.
refused() { # name source-pattern dest-pattern|"" dest-options -- source-options
	local name=$1 spat=$2 dpat=$3 got
	shift 3
	local dopts=() sopts=()
	while [ "$1" != -- ]; do dopts+=("$1"); shift; done
	shift
	sopts=("$@")
	start_vmm_dest "$name" 240 "${dopts[@]}"
	timeout "$(guard 240)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" \
		--migrate-to "tcp:127.0.0.1:$dport" --migrate-after 50 "${sopts[@]}" \
		> /dev/null 2> "$work/$name-s.err" || { cat "$work/$name-s.err" >&2; fail "$name: the source vmm failed"; }
	grep -q "migration failed, the VM goes on here: .*$spat" "$work/$name-s.err" ||
		{ cat "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: no clear message at the source"; }
	got=$(final_checksum "$work/$name-s.err")
	[ "$got" = "$ref" ] || { cat "$work/$name-s.err" >&2; fail "$name: the source's guest ended with $got, want $ref"; }
	if [ -n "$dpat" ]; then
		wait_line "$work/$name-d.err" "$dpat" "$name: destination" "$dpid"
		kill -0 "$dpid" 2> /dev/null || fail "$name: the destination gave up on a refused connection"
		kill -TERM "$dpid"
	fi
	wait_status "$dpid" "$name: the destination" 60
	grep -q "guest exited" "$work/$name-d.err" && fail "$name: a guest ran at the destination"
	echo "$name: refused; source: $(grep -o 'goes on here: .*' "$work/$name-s.err" | head -n1)"
	[ -z "$dpat" ] || echo "    destination: $(grep -m1 -- "$dpat" "$work/$name-d.err")"
}

refused wrong-ca "certificate was refused: .*not signed by the CA" "refused a connection: TLS: the peer refused our certificate" \
	--tls-creds "$c/good" -- --tls-creds "$c/wrongca"
refused rogue-client "refused our certificate" "certificate was refused: .*not signed by the CA" \
	--tls-creds "$c/good" -- --tls-creds "$c/rogue"
refused hostname "certificate was refused: hostname mismatch" "refused a connection: TLS" \
	--tls-creds "$c/named" -- --tls-creds "$c/named" --tls-hostname other.example
refused plain-source "this destination speaks TLS only" "refused a connection: TLS: the peer does not speak TLS" \
	--tls-creds "$c/good" --
# (A plain destination refuses the TLS stranger and listens on.)
refused plain-dest "TLS: the peer does not speak TLS" "refused a connection: .*the peer speaks TLS, this end does not" \
	-- --tls-creds "$c/good"
refused wrong-psk "PSK mismatch" "refused a connection: TLS: PSK mismatch" \
	--tls-psk "$c/keys.psk" -- --tls-psk "$c/other.psk"

# Expired credentials are refused when loaded, before anything connects: a
# destination does not start; a running source VM goes on.
"$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$(free_port)" --tls-creds "$c/expired" \
	> /dev/null 2> "$work/expired-d.err" && fail "expired: a destination started with an expired certificate"
grep -q "server-cert.pem has expired" "$work/expired-d.err" || { cat "$work/expired-d.err" >&2; fail "expired: no clear message at the destination"; }
start_vmm_dest expired-src 240 --tls-creds "$c/good"
sock=$work/expired.sock
start_control_vmm "$sock" "$work/expired-s.err" 240 "$cmd"
"$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" --tls-creds "$c/expired" \
	> /dev/null 2> "$work/expired-agent.err" && fail "expired: migrate-agent claimed success"
grep -q "client-cert.pem has expired" "$work/expired-agent.err" || { cat "$work/expired-agent.err" >&2; fail "expired: no clear message from migrate-agent"; }
wait "$spid" || { cat "$work/expired-s.err" >&2; fail "expired: the source vmm failed"; }
[ "$(final_checksum "$work/expired-s.err")" = "$ref" ] || fail "expired: the source's guest did not end right"
kill -TERM "$dpid"
wait_status "$dpid" "expired: the destination" 60
echo "expired: refused at load; $(cat "$work/expired-agent.err")"

# Contradictory or missing credentials: usage errors before anything runs.
"$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$(free_port)" --tls-creds "$c/good" \
	--tls-psk "$c/keys.psk" > /dev/null 2> "$work/both.err" && fail "both: vmm accepted x509 and PSK"
grep -q "exclude each other" "$work/both.err" || { cat "$work/both.err" >&2; fail "both: no clear message"; }
"$BIN/migrate-agent" migrate --vmm "$work/none.sock" --to tcp:127.0.0.1:1 \
	--tls-psk "$work/missing.psk" 2> "$work/missing.err"
[ $? = 2 ] || fail "missing: migrate-agent did not refuse a missing PSK file"
grep -q "missing.psk: No such file" "$work/missing.err" || { cat "$work/missing.err" >&2; fail "missing: no clear message"; }
echo "flags: $(cat "$work/both.err") / $(cat "$work/missing.err")"

# During a healthy link: a plain "recovery" is refused at the TLS handshake;
# inside TLS, recovery still needs the session's secret: an intruder that
# holds the PSK and replays the session id is refused; the live link goes on.
start_memtest_dest intruder --metrics "$work/intruder-d.json" --tls-psk "$c/keys.psk"
timeout "$(guard 120)" "$BIN/mig-evil" intruder "tcp:127.0.0.1:$dport" --mem 4 --tls-psk "$c/keys.psk" \
	2> "$work/intruder-e.err"
erc=$?
wait_status "$dpid" "intruder: the destination"
rc=$?
cat "$work/intruder-e.err"
[ "$erc" = 0 ] || fail "intruder: accepted, or the live link was disturbed (status $erc)"
[ "$rc" = 0 ] && grep -q "checksum ok" "$work/intruder-d.err" || { cat "$work/intruder-d.err" >&2; fail "intruder: destination status $rc"; }
grep -q "wrong proof of the session secret" "$work/intruder-d.err" || fail "intruder: not refused by its proof"
grep -q "a plain stranger was refused" "$work/intruder-e.err" || fail "intruder: a plain stranger was not refused"
grep -q "refused a connection: TLS: the peer does not speak TLS" "$work/intruder-d.err" ||
	{ cat "$work/intruder-d.err" >&2; fail "intruder: the plain stranger was not refused by TLS"; }
check_json "$work/intruder-d.json" '.recoveries == 0' "intruder: counted as a recovery"
echo "migrate-tls-vmm: passed"
