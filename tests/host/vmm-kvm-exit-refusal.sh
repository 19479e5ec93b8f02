#!/usr/bin/env bash
# vmm-kvm-exit-refusal: --ram-backend kvm-exit is refused, with the reason,
# before anything starts, wherever the patched kvm-exit path is missing:
#  - on a kernel without MADV_USERFAULT (any stock kernel, such as this
#    host's): `vmm probe kvm-exit` says no and what it needs (exit 77), and
#    `vmm run --incoming` and `vmm run --lazy` exit with the VMM's failure
#    status (that of a missing image) and one line naming
#    it, leaving nothing behind (nothing listens on the destination's
#    port, no metrics written);
#  - on the patched kernel whose KVM runs with shadow paging (a node booted
#    with kvm_amd.npt=0), where a guest page table on a missing page would
#    get the guest a #PF instead of an exit: the probe and `vmm run --lazy`
#    refuse it, naming two-dimensional paging.
# `auto` never picks kvm-exit.  A KVM without KVM_CAP_MEMORY_FAULT_INFO
# but with MADV_USERFAULT does not exist here (a stock 6.8+ KVM has the
# capability and no MADV_USERFAULT, which is asked first).  `vmm restore
# --lazy` takes the same path after its snapshot's check.
# timeout: 400
set -uo pipefail
BIN=${BIN:-build/bin}
GUEST=${GUEST:-build/guest/guest.elf}
tmp=$(mktemp -d /tmp/vmm-kvm-exit-refusal.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$BIN/vmm" ] || fail "$BIN/vmm is not built"

ran=0

# The patched kernel with shadow paging, in a node: the KVM half of the check.
shadow_node() {
	local log=build/nodes/kvm-exit-shadow.log
	case "$BIN" in */san/*)
		echo "note: shadow-paging node part in the plain pass only (the node has build/node/bin)"
		return 0 ;;
	esac
	if [ ! -r build/kernel/bzImage ] || [ ! -r build/initramfs.cpio.gz ]; then
		echo "note: shadow-paging node part not run: build/kernel/bzImage or the initramfs missing"
		return 0
	fi
	tests/node-launch --name kvm-exit-shadow --timeout 280 --quiet --append kvm_amd.npt=0 -- \
		'[ "$(cat /sys/module/kvm_amd/parameters/npt)" = N ] || { echo "npt still on"; exit 1; }
		 vmm probe kvm-exit; echo "@@PROBE $?"
		 vmm run --mem 16M --image /nonexistent.elf; echo "@@FAILED $?"
		 vmm run --mem 16M --lazy --ram-backend kvm-exit --image /usr/share/postcopy/guest.elf \
			--cmdline "workload=seq iters=1"; echo "@@RUN $?"' ||
		{ tail -n 30 "$log"; fail "shadow-paging node failed"; }
	tr -d '\r' < "$log" > "$tmp/shadow.log"
	grep -q '^@@PROBE 77' "$tmp/shadow.log" && grep -q '^kvm-exit no .*two-dimensional paging' "$tmp/shadow.log" ||
		{ tail -n 30 "$tmp/shadow.log"; fail "shadow paging: vmm probe kvm-exit did not refuse it, naming TDP"; }
	failed=$(sed -n 's/^@@FAILED //p' "$tmp/shadow.log")
	[ -n "$failed" ] && [ "$failed" != 0 ] && grep -q "^@@RUN $failed\$" "$tmp/shadow.log" &&
		grep -q "^vmm: the kvm-exit RAM back end needs two-dimensional paging (EPT/NPT)" "$tmp/shadow.log" ||
		{ tail -n 30 "$tmp/shadow.log"; fail "shadow paging: vmm run --ram-backend kvm-exit was not refused, naming TDP"; }
	echo "ok: shadow paging (kvm_amd.npt=0, patched kernel): $(grep '^vmm: the kvm-exit' "$tmp/shadow.log" | head -n1)"
	ran=$((ran + 1))
}

"$BIN/vmm" probe kvm-exit > "$tmp/probe" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
	echo "note: this kernel has the kvm-exit back end ($(cat "$tmp/probe")): its MADV_USERFAULT refusal is shown where it lacks it"
	shadow_node
	[ "$ran" -gt 0 ] || { echo "SKIP: nothing here lacks kvm-exit" >&2; exit 77; }
	exit 0
fi
[ "$rc" = 77 ] || { cat "$tmp/probe" >&2; fail "vmm probe kvm-exit: exit $rc, 77 expected"; }
grep -q '^kvm-exit no .*MADV_USERFAULT.*KVM_EXIT_MEMORY_FAULT' "$tmp/probe" ||
	{ cat "$tmp/probe" >&2; fail "vmm probe kvm-exit does not say what is missing"; }
echo "ok: $(cat "$tmp/probe")"
"$BIN/vmm" probe | grep -qx 'auto kvm-exit' && fail "auto chose kvm-exit"

# The VMM's failure status (1 here; 70 from main's sysexits change on), as a
# VMM that cannot start for another reason (an image that is not there) exits.
"$BIN/vmm" run --mem 16M --image "$tmp/none.elf" > /dev/null 2>&1
failed=$?
[ "$failed" != 0 ] || fail "vmm run of a missing image exited 0"

# One refusal: the VMM's failure status, one line naming the back end and what it needs.
refused() { # what vmm-args...
	local what=$1
	shift
	timeout 30 "$BIN/vmm" "$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	[ "$rc" = "$failed" ] || { cat "$tmp/err" >&2; fail "$what: exit $rc, the VMM's failure status $failed expected"; }
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
shadow_node
echo "vmm-kvm-exit-refusal: refused with the reason, nothing started"
