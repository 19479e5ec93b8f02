#!/usr/bin/env bash
# vmm-usage-errors: vmm run's migration flags that do not go together are
# usage errors: exit 64 (EX_USAGE) with a message naming the flags, before
# any VM is made (no /dev/kvm opened, so no KVM needed).  Before the fix
# they were checked only after the VM was created, exit 70 (EX_SOFTWARE),
# and on a host without KVM the user saw only "cannot open /dev/kvm";
# and `--save-after MS` without its FILE said "vmm: MS needs a value".
# A --control path too long for a unix socket is one too (it was found
# when the socket was made: for a source, after its vCPUs had started).
# timeout: 60
. tests/host/plain-lib.bash
[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"

usage_error() { # message-regex args...
	local re=$1
	shift
	"$BIN/vmm" run "$@" > "$tmp/out" 2> "$tmp/err"
	local rc=$?
	[ $rc -eq 64 ] || { cat "$tmp/err" >&2; fail "vmm run $*: exit $rc, want 64"; }
	grep -Eq -- "$re" "$tmp/err" || { cat "$tmp/err" >&2; fail "vmm run $*: no message matching '$re'"; }
	grep -q "/dev/kvm" "$tmp/err" && { cat "$tmp/err" >&2; fail "vmm run $*: /dev/kvm opened before the refusal"; }
	echo "ok: vmm run $* -> $(grep -E -- "$re" "$tmp/err" | head -n1)"
}

to=(--migrate-to tcp:127.0.0.1:7 --migrate-after 100)
usage_error "--incoming cannot be combined with --migrate-to" --incoming tcp:127.0.0.1:7 "${to[@]}"
usage_error "--incoming defer needs --control" --incoming defer
usage_error "--incoming: bad address" --incoming bogus
usage_error "--migrate-to: .*any address" --image x --migrate-to tcp::7 --migrate-after 100
usage_error "--migrate-to and --migrate-after go together" --image x --migrate-to tcp:127.0.0.1:7
usage_error "--migrate-to and --migrate-after go together" --image x --migrate-after 100
usage_error "--postcopy-manual needs --control" --image x --postcopy-manual "${to[@]}"
usage_error "--tls-creds and --tls-psk exclude each other" --image x "${to[@]}" --tls-creds "$tmp" --tls-psk "$tmp/k"
usage_error "--tls-hostname needs --tls-creds" --image x "${to[@]}" --tls-hostname h
usage_error "--save-after needs MS and FILE" --image x --save-after 100
usage_error "--control: a path of 120 bytes" --image x --control "/$(printf 'c%.0s' {1..119})"
exit 0
