#!/usr/bin/env bash
# vmm-control-request: what a control request may not do, and where the
# control socket may not be made.  Each case failed on main before the fix:
# - a QMP request over 64 KiB whose start is a valid migrate, and one
#   with a NUL inside: refused whole (in the line protocol before QMP, a
#   valid prefix of such a request migrated the VM); the NUL is the QMP
#   spec's reset byte, answered "JSON parse error, stray '\x00'" as QEMU
#   answers it, and what was read of the request is dropped;
# - numbers out of range (precopy=, compress=, recover-ms=): refused, not
#   atoi()'d;
# - a VMM started with --tls-psk: a request naming only tls-hostname= (it
#   used to migrate in plain text), or other TLS files: refused;
# - a regular file, or a live VMM's socket, at the --control path: the new
#   VMM refuses to start and removes nothing (it used to unlink both);
#   a stale socket left by a dead VMM is replaced.
# After every refusal the VM goes on; the owner then migrates it (checksum
# equal to a run without migration).
# timeout: 300
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent
need_guest
need_kvm

# Negotiate QMP, send raw bytes (python escapes: \n, \x00), print the answer's text.
ctl_raw() { # socket python-bytes-literal
	python3 - "$1" "$2" << 'EOF'
import ast, json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
s.connect(sys.argv[1])
f = s.makefile("rb")
json.loads(f.readline())  # the greeting
s.sendall(b'{"execute": "qmp_capabilities"}\n')
json.loads(f.readline())
s.sendall(ast.literal_eval("b'" + sys.argv[2] + "'"))
line = f.readline()
msg = json.loads(line) if line else {}
print("error " + msg["error"]["desc"] if "error" in msg else "ok" if "return" in msg else "closed")
EOF
}

# The answer to a request must be a refusal naming why; the VM goes on.
refused() { # what socket payload expected-text vmm-pid vmm-stderr
	local ans
	ans=$(ctl_raw "$2" "$3")
	case "$ans" in
	"error "*"$4"*) echo "$1: $ans" ;;
	*) cat "$6" >&2; fail "$1: answered '$ans', want an error with '$4'" ;;
	esac
	kill -0 "$5" 2> /dev/null || { cat "$6" >&2; fail "$1: the VMM exited"; }
	grep -q "migration to .* complete" "$6" && fail "$1: the VM migrated anyway"
	return 0
}

cmd="workload=random iters=$(sized 20000) quiet=1"
long="workload=random iters=4000000 quiet=1" # killed, never waited for
ref=$(reference_checksum 32M "$cmd")
start_vmm_dest owner 200
grep -q "warning: plain TCP" "$work/owner-d.err" || { cat "$work/owner-d.err" >&2; fail "a plain --incoming gave no warning"; }
echo "plain --incoming: $(grep -o 'warning: plain TCP.*' "$work/owner-d.err" | head -c 100)..."

sock=$work/a.sock
start_control_vmm "$sock" "$work/a.err" 200 "$cmd"
apid=$spid

mig='{"execute": "migrate", "arguments": {"uri": "tcp:127.0.0.1:'$dport'"'
set='{"execute": "migrate-set-parameters", "arguments": '
pad=$(printf '%*s' 70000 '')
refused "over-long request" "$sock" "$mig$pad}}\\n" "over 65536 bytes" "$apid" "$work/a.err"
refused "NUL in a request" "$sock" "$mig\\x00}}\\n" "stray '\\x00'" "$apid" "$work/a.err"
refused "precopy out of range" "$sock" "$set{\"x-precopy-rounds\": 4294967297}}\\n" "x-precopy-rounds" "$apid" "$work/a.err"
refused "negative precopy" "$sock" "$set{\"x-precopy-rounds\": -1}}\\n" "x-precopy-rounds" "$apid" "$work/a.err"
refused "compress 2" "$sock" "$set{\"x-compress\": 2}}\\n" "x-compress" "$apid" "$work/a.err"
refused "recover-ms 0" "$sock" "$set{\"x-recover-ms\": 0}}\\n" "x-recover-ms" "$apid" "$work/a.err"
refused "a string for a number" "$sock" "$set{\"max-bandwidth\": \"1e9\"}}\\n" "max-bandwidth" "$apid" "$work/a.err"
refused "unknown key" "$sock" "$set{\"colour\": \"red\"}}\\n" "unexpected" "$apid" "$work/a.err"

# A live VMM's socket at the --control path: left alone, still served.
"$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" --control "$sock" \
	> /dev/null 2> "$work/l.err" && fail "a second VMM took a live VMM's control socket"
grep -q "another VMM is listening" "$work/l.err" || { cat "$work/l.err" >&2; fail "no clear message for a live socket"; }
refused "the live socket still answers" "$sock" "$set{\"x-compress\": 7}}\\n" "x-compress" "$apid" "$work/a.err"
echo "live socket at --control: refused, left alone"

# TLS given at start is a floor for requests.
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/k.psk"
chmod 600 "$work/k.psk"
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/other.psk"
chmod 600 "$work/other.psk"
psock=$work/p.sock
start_control_vmm "$psock" "$work/p.err" 200 "$long" --tls-psk "$work/k.psk"
ppid=$spid
refused "PSK VMM, parameters name only tls-hostname" "$psock" "$set{\"tls-hostname\": \"x\"}}\\n" "tls-hostname needs tls-creds" "$ppid" "$work/p.err"
refused "PSK VMM, parameters drop the PSK" "$psock" "$set{\"tls-psk\": \"\"}}\\n" "may not change or drop" "$ppid" "$work/p.err"
refused "PSK VMM, parameters name another PSK" "$psock" "$set{\"tls-psk\": \"$work/other.psk\"}}\\n" "may not change or drop" "$ppid" "$work/p.err"
refused "PSK VMM, parameters name x509" "$psock" "$set{\"tls-psk\": \"\", \"tls-creds\": \"$work\"}}\\n" "may not change or drop" "$ppid" "$work/p.err"
kill "$ppid"

# The owner migrates the VM that refused all of the above.
"$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" \
	> "$work/agent.json" 2> "$work/agent.err" || { cat "$work/agent.err" "$work/a.err" "$work/owner-d.err" >&2; fail "the owner could not migrate"; }
check_migrated owner "$ref" "$apid" "$work/a.err" "$dpid" "$work/owner-d.err" "$work/owner-d.json"

# A regular file at the --control path: left alone.
echo precious > "$work/file"
"$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" --control "$work/file" \
	> /dev/null 2> "$work/f.err" && fail "a VMM started with a regular file as its --control"
grep -q "not a socket" "$work/f.err" || { cat "$work/f.err" >&2; fail "no clear message for a file at --control"; }
[ "$(cat "$work/file")" = precious ] || fail "the file at --control was changed"
echo "file at --control: refused, left alone"

# A stale socket (its VMM died) is replaced, and the new socket is 0600.
stale=$work/stale.sock
python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$stale"
[ -S "$stale" ] || fail "could not make a stale socket"
timeout "$(guard 200)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$long" \
	--control "$stale" > /dev/null 2> "$work/s.err" &
spid=$!
pids+=("$spid")
# Sets ans to what the socket answered; fails while nothing answers.
bogus_answered() {
	ans=$(ctl_raw "$stale" '{"execute": "bogus"}\n' 2> /dev/null)
}
wait_until "the VMM's socket replacing a stale one" 60 "$spid" "$work/s.err" bogus_answered
case "$ans" in "error The command bogus has not been found"*) ;; *) fail "the replaced socket answered '$ans'" ;; esac
[ "$(stat -c %a "$stale")" = 600 ] || fail "the control socket has mode $(stat -c %a "$stale")"
kill "$spid"
echo "stale socket: replaced, mode 600"

