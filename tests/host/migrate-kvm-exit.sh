#!/usr/bin/env bash
# migrate-kvm-exit: postcopy migrations whose destination serves guest RAM
# with the kvm-exit back end (--ram-backend kvm-exit: MADV_USERFAULT RAM
# that no userfaultfd claims; a vCPU's KVM_EXIT_MEMORY_FAULT is served on
# the vCPU thread itself).  Each guest's final checksum at the destination
# must equal an unmigrated run's, every page must arrive exactly once, and
# the destination's metrics must show that its faults went through that
# path: ram_backend "kvm-exit", faults_own_thread (counted only by
# ram_fault_wait(), which only this back end's exits and ensures call) at
# least the demand faults, and some.  One case with two vCPUs faulting at
# once (a request in flight per vCPU), one a snapshot taken at the
# destination while pages are still missing (the save ensures them), one
# driven over QMP with postcopy-blocktime set at the destination (its
# figures counted from the vCPU threads' own waits; stop and cont there).
# Needs the patched kernel's KVM_EXIT_MEMORY_FAULT: in a node here.
# timeout: 600
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
[ -x "$BIN/vmm" ] || fail "$BIN/vmm is not built"
[ -f "$GUEST" ] || fail "$GUEST is not built"
need_kvm
if ! "$BIN/vmm" probe kvm-exit > "$work/probe" 2>&1; then
	# The node's kernel is the patched one: there it must be available.
	[ "$POSTCOPY_WHERE" != node ] || fail "kvm-exit not available in the node: $(cat "$work/probe")"
	skip "this kernel has no kvm-exit back end: $(cat "$work/probe")"
fi
# auto never picks it: its vCPU exits need this VMM's handling, its probe cannot see KVM.
"$BIN/vmm" probe | grep -qx 'auto kvm-exit' && fail "auto chose kvm-exit"

dest_opts=(--ram-backend kvm-exit)

# The destination's figures, checked: the kvm-exit path served its faults.
check_own_thread() { # name
	local d="$work/$1-d.json"
	check_json "$d" '.ram_backend == "kvm-exit"' "$1: the destination's back end"
	check_json "$d" '.faults > 0 and .faults_own_thread >= .faults and .pages_demand > 0' \
		"$1: faults not served on the faulting thread"
	grep -q 'lazy RAM: faults served on the faulting thread .* own=[1-9]' "$work/$1-d.err" ||
		{ cat "$work/$1-d.err" >&2; fail "$1: no own-thread faults in the summary"; }
	echo "$1: ok: $(jq -c '{ram_backend, faults, faults_own_thread, pages_demand, pages_pushed, p50: .fault_latency_us.p50, p99: .fault_latency_us.p99, blocktime_ms}' "$d")"
}

migrate_one() { # name cmdline [source options...]
	local name=$1 cmd="$2 quiet=1" ref
	shift 2
	ref=$(reference_checksum "${vm_opts[1]:-32M}" "$cmd" "${vm_opts[@]:2}")
	migrate_loopback "$name" "$ref" "$cmd" 150 "$@"
	check_own_thread "$name"
}

# The push capped at 8 MiB/s: most pages are missing while the guest runs,
# so they come by demand (uncapped, a slow node's guest saw few missing).
vm_opts=(--mem 32M)
migrate_one random "workload=random iters=$(sized 3000)" --max-bandwidth 8388608
migrate_one seq "workload=seq iters=$(sized 6000)" --max-bandwidth 8388608
# Two vCPUs faulting at once: each sends its own request from its thread.
vm_opts=(--mem 32M --vcpus 2)
migrate_one hotset-2vcpu "workload=hotset iters=$(sized 9000)" --max-bandwidth 8388608

# A snapshot at the destination while pages are missing (push at 1 MiB/s):
# the save reads all of RAM from the main thread, which must ensure each
# missing page first (a SIGBUS otherwise).  Restored eagerly, the guest
# ends with the unmigrated checksum.
cmd="workload=random iters=$(sized 3000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
port=$(free_port)
timeout "$(guard 240)" "$BIN/vmm" run --mem 32M --ram-backend kvm-exit --incoming "tcp:127.0.0.1:$port" \
	--save-after 400 "$work/snap" > /dev/null 2> "$work/save-d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port" "$dpid" "$work/save-d.err"
timeout "$(guard 240)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" \
	--migrate-to "tcp:127.0.0.1:$port" --migrate-after 150 --max-bandwidth 1048576 \
	> /dev/null 2> "$work/save-s.err" &
spid=$!
pids+=("$spid")
wait_status "$dpid" "save: the destination" 240 || { cat "$work/save-d.err" >&2; fail "save: the destination failed"; }
grep -q 'saved state and RAM' "$work/save-d.err" || { cat "$work/save-d.err" >&2; fail "save: no snapshot at the destination"; }
grep -q 'own=[1-9]' "$work/save-d.err" || { cat "$work/save-d.err" >&2; fail "save: no own-thread fault"; }
wait_status "$spid" "save: the source" 240 || { cat "$work/save-s.err" >&2; fail "save: the source failed"; }
"$BIN/vmm" restore "$work/snap" > /dev/null 2> "$work/restore.err" || { cat "$work/restore.err" >&2; fail "save: the restore failed"; }
got=$(final_checksum "$work/restore.err")
[ "$got" = "$ref" ] || fail "save: restored checksum $got, unmigrated $ref"
echo "save: ok: a snapshot taken at the kvm-exit destination mid-postcopy restores to checksum $ref ($(grep -o 'own=[0-9]*' "$work/save-d.err"))"
# QEMU's postcopy-blocktime set at a kvm-exit destination over QMP (as
# vmm-qmp-incoming does on uffd), two vCPUs: each vCPU thread starts its
# own wait, so the figures are there; the destination is also stopped and
# continued over QMP while its vCPUs may wait for pages.
cmd="workload=random iters=$(sized 40000) quiet=1"
ref=$(reference_checksum 32M "$cmd" --vcpus 2)
start_defer_vmm "$work/d.sock" "$work/bt-d.err" "$work/bt-d.json" 280 --ram-backend kvm-exit --vcpus 2
start_control_vmm "$work/s.sock" "$work/bt-s.err" 280 "$cmd" --vcpus 2
port=$(free_port)
python3 tests/host/lib/qmp-drive.py "$work/d.sock" incoming "tcp:127.0.0.1:$port" "$work/s.sock" ||
	{ cat "$work/bt-s.err" "$work/bt-d.err" >&2; fail "blocktime: the QMP-driven migration"; }
check_migrated blocktime "$ref" "$spid" "$work/bt-s.err" "$dpid" "$work/bt-d.err" "$work/bt-d.json"
check_json "$work/bt-d.json" '.ram_backend == "kvm-exit" and .faults_own_thread > 0' "blocktime: the kvm-exit path"
check_json "$work/bt-d.json" '.postcopy_blocktime_ms as $t | $t >= 0
	and (.vcpu_blocktime_ms | length) == 2 and all(.vcpu_blocktime_ms[]; . >= $t)' "blocktime: the destination's figures"
check_json "$work/bt-d.json" '.pages_demand == 0 or any(.vcpu_blocktime_ms[]; . > 0)' \
	"blocktime: demand pages, yet no vCPU blocked"
echo "blocktime: ok: $(jq -c '{faults, faults_own_thread, pages_demand, blocktime_ms, postcopy_blocktime_ms, vcpu_blocktime_ms}' "$work/bt-d.json")"
echo "migrate-kvm-exit: every migration's faults served on the vCPU threads, checksums equal"
