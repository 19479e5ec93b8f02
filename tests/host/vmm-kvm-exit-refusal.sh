#!/usr/bin/env bash
# vmm-kvm-exit-refusal: on a kernel without the patched kvm-exit path (no
# MADV_USERFAULT: any stock kernel, such as this host's), --ram-backend
# kvm-exit is refused before anything starts: `vmm probe kvm-exit` says no
# and why (exit 77), and `vmm run --incoming` and `vmm run --lazy` exit 1
# with one line naming what the back end needs, leaving nothing behind
# (nothing listens on the destination's port, no metrics written).  `vmm
# restore --lazy` takes the same path after its snapshot's check, which
# needs a snapshot made with KVM: not here.  `auto` never picks kvm-exit.  Where the kernel
# has it (a node), the refusal cannot be shown and the test skips; the
# KVM half of the check (KVM_CAP_MEMORY_FAULT_INFO, TDP) has no kernel
# here without it (a stock 6.8+ KVM has the capability but no
# MADV_USERFAULT, which is asked first).
# timeout: 60
set -uo pipefail
BIN=${BIN:-build/bin}
GUEST=${GUEST:-build/guest/guest.elf}
tmp=$(mktemp -d /tmp/vmm-kvm-exit-refusal.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$BIN/vmm" ] || fail "$BIN/vmm is not built"

"$BIN/vmm" probe kvm-exit > "$tmp/probe" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
	echo "SKIP: this kernel has the kvm-exit back end ($(cat "$tmp/probe")): its refusal is shown where it lacks it" >&2
	exit 77
fi
[ "$rc" = 77 ] || { cat "$tmp/probe" >&2; fail "vmm probe kvm-exit: exit $rc, 77 expected"; }
grep -q '^kvm-exit no .*MADV_USERFAULT.*KVM_EXIT_MEMORY_FAULT' "$tmp/probe" ||
	{ cat "$tmp/probe" >&2; fail "vmm probe kvm-exit does not say what is missing"; }
echo "ok: $(cat "$tmp/probe")"
"$BIN/vmm" probe | grep -qx 'auto kvm-exit' && fail "auto chose kvm-exit"

# One refusal: exit 1, one line naming the back end and what it needs.
refused() { # what vmm-args...
	local what=$1
	shift
	timeout 30 "$BIN/vmm" "$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	[ "$rc" = 1 ] || { cat "$tmp/err" >&2; fail "$what: exit $rc, 1 expected"; }
	grep -q "RAM back end 'kvm-exit' is not available on this kernel: .*it needs MADV_USERFAULT.*KVM_EXIT_MEMORY_FAULT" "$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "$what: no reason given"; }
	[ "$(wc -l < "$tmp/err")" = 1 ] || { cat "$tmp/err" >&2; fail "$what: more than the one line"; }
	echo "ok: $what: $(cat "$tmp/err")"
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
refused "destination" run --mem 32M --ram-backend kvm-exit --incoming "tcp:127.0.0.1:$port" \
	--migrate-metrics "$tmp/metrics.json"
! ss -Hltn "sport = :$port" 2> /dev/null | grep -q LISTEN || fail "destination: something listens on $port"
[ ! -e "$tmp/metrics.json" ] || fail "destination: metrics written for a migration that never began"
refused "lazy boot" run --image "$GUEST" --mem 16M --lazy --ram-backend kvm-exit
echo "vmm-kvm-exit-refusal: refused with the reason, nothing started"
