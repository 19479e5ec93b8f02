#!/usr/bin/env bash
# migrate-secrets: key files and secrets in memory (docs/security.md,
# "Secrets in memory and key files").
# Key files (a PSK file, each side's *-key.pem) are checked on the file
# that was opened: a regular file owned by the user who runs the program,
# not readable or writable by group or others; anything else is refused,
# naming the file and the reason.  A symlink is followed: what counts is
# the file it leads to.  Then mig-secrets-check runs a source's and a
# destination's handshakes (plain, PSK, x509) in one process and reads
# its own memory: the session secret only where the two sessions keep
# it, and after closing nothing of the session secret, the TLS exporter
# value, the PSK or the private keys' PEM text anywhere.
# timeout: 120
set -uo pipefail
. tests/host/migrate-lib.bash # $work, fail
check=$BIN/mig-tls-check
need_programs mig-tls-check mig-secrets-check
command -v openssl > /dev/null || fail "openssl (command) missing: make deps"

scripts/make-tls-creds.sh "$work/x509" localhost > /dev/null
(umask 077 && printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/keys.psk")

# The server side given FILE (a PSK file) must refuse it with a message
# matching PATTERN; the client, with the good file, sees the server close.
refused() { # description file pattern
	timeout "$(guard 60)" "$check" --server-psk "$2" --client-psk "$work/keys.psk" > "$work/out" 2>&1
	local rc=$?
	[ $rc = 1 ] || { cat "$work/out" >&2; fail "$1: exit $rc, want 1"; }
	grep -q "^server: $3" "$work/out" || { cat "$work/out" >&2; fail "$1: no clear message"; }
	echo "ok: $1: $(grep '^server: ' "$work/out")"
}
accepted() { # description file
	timeout "$(guard 60)" "$check" --bytes 65536 --server-psk "$2" --client-psk "$work/keys.psk" \
		> "$work/out" 2>&1 || { cat "$work/out" >&2; fail "$1: refused"; }
	echo "ok: $1: accepted"
}
copy() { # name mode: a copy of the good PSK file
	cp "$work/keys.psk" "$work/$1" && chmod "$2" "$work/$1"
}

accepted "a PSK file of mode 0600" "$work/keys.psk"
copy group-read.psk 0640
refused "a group-readable PSK file" "$work/group-read.psk" \
	".*group-read.psk: readable by group or others (mode 0640)"
copy other-read.psk 0604
refused "an other-readable PSK file" "$work/other-read.psk" \
	".*other-read.psk: readable by group or others (mode 0604)"
copy group-write.psk 0620
refused "a group-writable PSK file" "$work/group-write.psk" \
	".*group-write.psk: writable by group or others (mode 0620)"
if [ "$(id -u)" = 0 ]; then
	copy stranger.psk 0600 && chown 65534 "$work/stranger.psk"
	refused "a PSK file owned by another user" "$work/stranger.psk" \
		".*stranger.psk: bad ownership: owned by uid 65534, not by uid 0"
	cp "$work/x509/server-key.pem" "$work/server-key.pem.orig"
	chown 65534 "$work/x509/server-key.pem"
	timeout "$(guard 60)" "$check" --server-creds "$work/x509" --client-creds "$work/x509" \
		--hostname localhost > "$work/out" 2>&1 && fail "an x509 key of another user was accepted"
	grep -q "^server: .*server-key.pem: bad ownership: owned by uid 65534" "$work/out" ||
		{ cat "$work/out" >&2; fail "x509 key of another user: no clear message"; }
	echo "ok: an x509 key owned by another user: $(grep '^server: ' "$work/out")"
	chown 0 "$work/x509/server-key.pem"
else
	echo "ok: (not root: the cases of a file owned by another user need chown, left out)"
fi
chmod 0644 "$work/x509/client-key.pem"
timeout "$(guard 60)" "$check" --server-creds "$work/x509" --client-creds "$work/x509" \
	--hostname localhost > "$work/out" 2>&1 && fail "a world-readable x509 key was accepted"
grep -q "^client: .*client-key.pem: readable by group or others (mode 0644)" \
	"$work/out" || { cat "$work/out" >&2; fail "world-readable x509 key: no clear message"; }
echo "ok: a world-readable x509 key: $(grep '^client: ' "$work/out")"
chmod 0600 "$work/x509/client-key.pem"

# Symlinks are followed (the check is on the file opened, as ssh does):
# one to a good file is accepted, one to a bad file refused under its name.
ln -s "$work/keys.psk" "$work/link.psk"
accepted "a symlink to a good PSK file" "$work/link.psk"
ln -s "$work/group-read.psk" "$work/badlink.psk"
refused "a symlink to a group-readable PSK file" "$work/badlink.psk" \
	".*badlink.psk: readable by group or others (mode 0640)"
mkfifo -m 0600 "$work/fifo.psk"
refused "a FIFO where the PSK file should be" "$work/fifo.psk" ".*fifo.psk: not a regular file"

# Secrets in memory after the handshakes, and after closing.
for mode in plain psk x509; do
	dir=$work/x509
	[ $mode = x509 ] || { dir=$work/mem-$mode && mkdir -p "$dir"; }
	timeout "$(guard 60)" "$BIN/mig-secrets-check" $mode "$dir" > "$work/out" 2>&1
	rc=$?
	cat "$work/out"
	[ $rc = 0 ] || fail "mig-secrets-check $mode: a secret stayed in memory (exit $rc)"
done
exit 0
