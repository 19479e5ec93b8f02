#!/usr/bin/env bash
# migrate-user-files: the files and paths a user names to the migration
# library (through mig-memtest, as vmm run and a migrate over the control
# socket reach them), each bad one a clear error that loses nothing:
# - --tls-creds DIR whose ca-cert.pem or client-cert.pem is a FIFO, whose
#   server-cert.pem is a directory, or is missing, empty or garbage, or
#   whose key does not match its certificate: refused at once, naming the
#   file and why.  Before the fix a FIFO hung the program for good (OpenSSL
#   opened it by path and waited for a writer), a missing file was only
#   "cannot load the CA certificate" and a key of another pair "cannot
#   load the server key";
# - --metrics /dev/full at the source and at the destination: the
#   migration completes (checksum ok, every page once) and each side says
#   "cannot write metrics ...: No space left on device".  Before the fix
#   nothing was said: the error showed only at the unchecked fclose();
# - a destination told to listen at unix:PATH where another program's
#   socket is live: refused ("Address already in use"), the socket file
#   stays and its owner still accepts on it.  Before the fix it was
#   unlinked (as QEMU does), cutting its owner off.
# No KVM needed.
# timeout: 240
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest
command -v openssl > /dev/null || skip "openssl is not installed"

scripts/make-tls-creds.sh "$work/good" 127.0.0.1 > /dev/null || fail "cannot make test credentials"

# A copy of the good credentials with FILE replaced by what COMMAND makes
# (COMMAND gets the path).
creds() { # name file command...
	local dir=$work/$1 file=$2
	shift 2
	cp -r "$work/good" "$dir"
	rm -f "$dir/$file"
	"$@" "$dir/$file"
}

# mig-memtest ROLE with --tls-creds DIR refuses it at once (a hang guard,
# not a speed limit) with a message matching REGEX.
refused() { # name role dir regex
	local opt=(--listen "tcp:127.0.0.1:$(free_port)") rc
	[ "$2" = source ] && opt=(--to "tcp:127.0.0.1:$(free_port)" --tls-hostname 127.0.0.1)
	timeout "$(guard 30)" "$BIN/mig-memtest" "$2" "${opt[@]}" --mem 4M --tls-creds "$3" \
		> /dev/null 2> "$work/$1.err"
	rc=$?
	[ "$rc" = 124 ] && fail "$1: still running after the guard: hung on the file"
	[ "$rc" != 0 ] || { cat "$work/$1.err" >&2; fail "$1: accepted"; }
	grep -Eq "$4" "$work/$1.err" || { cat "$work/$1.err" >&2; fail "$1: no message matching '$4'"; }
	echo "ok: $1: $(grep -Eo "$4.*" "$work/$1.err" | head -1 | head -c 140)"
}

creds ca-fifo ca-cert.pem mkfifo
refused ca-fifo dest "$work/ca-fifo" "ca-fifo/ca-cert.pem: not a regular file"
creds client-fifo client-cert.pem mkfifo
refused client-fifo source "$work/client-fifo" "client-fifo/client-cert.pem: not a regular file"
creds cert-dir server-cert.pem mkdir
refused cert-dir dest "$work/cert-dir" "cert-dir/server-cert.pem: not a regular file"
creds ca-missing ca-cert.pem true
refused ca-missing dest "$work/ca-missing" "ca-missing/ca-cert.pem: No such file or directory"
creds cert-empty server-cert.pem touch
refused cert-empty dest "$work/cert-empty" "cert-empty/server-cert.pem: cannot load the server certificate"
creds cert-garbage server-cert.pem sh -c 'head -c 3000 /dev/urandom > "$1"' -
refused cert-garbage dest "$work/cert-garbage" "cert-garbage/server-cert.pem: cannot load the server certificate"
creds key-other server-key.pem cp -p "$work/good/client-key.pem"
refused key-other dest "$work/key-other" "key-other/server-key.pem does not match"
refused no-dir dest "$work/no-such-dir" "no-such-dir/server-key.pem: No such file or directory"

# Metrics to a full disk: the migration is whole, each side says why it
# has no metrics.
port=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 4M --metrics /dev/full \
	> /dev/null 2> "$work/full-d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port" "$dpid" "$work/full-d.err"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 4M --metrics /dev/full 2> "$work/full-s.err" ||
	{ cat "$work/full-s.err" "$work/full-d.err" >&2; fail "full: the source failed"; }
wait_status "$dpid" "full: the destination" 60 "$work/full-d.err" ||
	{ cat "$work/full-d.err" >&2; fail "full: the destination failed"; }
grep -q "checksum ok" "$work/full-d.err" || fail "full: no checksum verdict"
for side in s d; do
	grep -q "cannot write.*metrics.*No space left on device" "$work/full-$side.err" ||
		{ cat "$work/full-$side.err" >&2; fail "full: the $side side did not say its metrics were lost"; }
done
echo "ok: full: migrated, both sides said: $(grep -ho 'cannot write.*' "$work/full-s.err")"

# A live socket at the unix path: left alone, its owner undisturbed.
sock=$work/live.sock
python3 - "$sock" > "$work/live.out" 2>&1 << 'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(4)
print("listening", flush=True)
s.settimeout(600)
while True:  # the refused destination's probe is accepted too
    c, _ = s.accept()
    print("accepted %r" % c.recv(1), flush=True)  # the probe's close: b''; the check's b'x'
EOF
lpid=$!
pids+=("$lpid")
wait_line "$work/live.out" listening "the other program's socket" "$lpid"
ino=$(stat -c %i "$sock")
timeout "$(guard 30)" "$BIN/mig-memtest" dest --listen "unix:$sock" --mem 4M > /dev/null 2> "$work/live.err"
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$work/live.err" >&2; fail "live: exit $rc: it listened on a live socket's path"; }
grep -q "cannot listen on unix:$sock: Address already in use" "$work/live.err" ||
	{ cat "$work/live.err" >&2; fail "live: no message"; }
[ "$(stat -c %i "$sock" 2> /dev/null)" = "$ino" ] || fail "live: the other program's socket was replaced"
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.send(b"x")' "$sock" ||
	fail "live: the other program cannot be reached at its socket"
wait_line "$work/live.out" "accepted b'x'" "live: the other program accepts" "$lpid"
kill "$lpid"
echo "ok: live: refused, $(grep -o 'Address already in use.*' "$work/live.err"); the owner still accepts"
exit 0
