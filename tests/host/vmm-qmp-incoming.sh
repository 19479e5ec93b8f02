#!/usr/bin/env bash
# vmm-qmp-incoming: the destination as a QMP object, as QEMU's
# `-incoming defer` (tests/host/lib/qmp-drive.py, case incoming):
# `vmm run --incoming defer --control SOCK` says inmigrate, takes cont as
# QEMU does (autostart: the VM runs when its state arrives) and refuses
# stop, migrate and a bad migrate-incoming; migrate-incoming URI
# starts listening (a second one is refused); a source driven over QMP
# migrates there; the VM runs there with its control socket: RESUME when
# its vCPUs start, stop and cont work; checksum equal.  With the
# capability postcopy-blocktime set at the destination (on the uffd back
# end, which says which thread faulted), its query-migrate has QEMU's
# postcopy-blocktime and postcopy-vcpu-blocktime once completed, and its
# metrics the same; a second migration without the capability has
# neither.  Also: defer without --control is refused at start.  On
# 95e5f5c --incoming refused --control, and defer was a bad URI.
# timeout: 480
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

"$BIN/vmm" run --mem 32M --incoming defer > /dev/null 2> "$work/nodefer.err" &&
	fail "--incoming defer without --control started"
grep -q "defer needs --control" "$work/nodefer.err" || { cat "$work/nodefer.err" >&2; fail "no clear message for defer without --control"; }
echo "ok: --incoming defer without --control refused: $(head -1 "$work/nodefer.err")"

cmd="workload=random iters=$(sized 40000) quiet=1"
vcpus=(--vcpus 2) # a vCPU's index in postcopy-vcpu-blocktime
ref=$(reference_checksum 32M "$cmd" "${vcpus[@]}")
dsock=$work/d.sock
start_defer_vmm "$dsock" "$work/in-d.err" "$work/in-d.json" 280 --ram-backend uffd "${vcpus[@]}"
start_control_vmm "$work/s.sock" "$work/in-s.err" 280 "$cmd" "${vcpus[@]}"
port=$(free_port)
python3 tests/host/lib/qmp-drive.py "$dsock" incoming "tcp:127.0.0.1:$port" "$work/s.sock" ||
	{ cat "$work/in-s.err" "$work/in-d.err" >&2; fail "incoming case"; }
check_migrated incoming "$ref" "$spid" "$work/in-s.err" "$dpid" "$work/in-d.err" "$work/in-d.json"
# The metrics' figures (us precision): demand pages mean a vCPU waited.
check_json "$work/in-d.json" '.postcopy_blocktime_ms as $t | $t >= 0
	and (.vcpu_blocktime_ms | length) == 2 and all(.vcpu_blocktime_ms[]; . >= $t)' "blocktime in the destination's metrics"
check_json "$work/in-d.json" '.pages_demand == 0 or any(.vcpu_blocktime_ms[]; . > 0)' \
	"demand pages, yet no vCPU blocked"
echo "ok: metrics: $(jq -c '{blocktime_ms, postcopy_blocktime_ms, vcpu_blocktime_ms, pages_demand}' "$work/in-d.json")"

# Without the capability: no figures, as QEMU's.
start_defer_vmm "$work/d2.sock" "$work/pl-d.err" "$work/pl-d.json" 250 --ram-backend uffd "${vcpus[@]}"
start_control_vmm "$work/s2.sock" "$work/pl-s.err" 250 "$cmd" "${vcpus[@]}"
port=$(free_port)
python3 tests/host/lib/qmp-drive.py "$work/d2.sock" incoming-plain "tcp:127.0.0.1:$port" "$work/s2.sock" ||
	{ cat "$work/pl-s.err" "$work/pl-d.err" >&2; fail "incoming-plain case"; }
check_migrated incoming-plain "$ref" "$spid" "$work/pl-s.err" "$dpid" "$work/pl-d.err" "$work/pl-d.json"
check_json "$work/pl-d.json" '.postcopy_blocktime_ms == null and .vcpu_blocktime_ms == null' \
	"blocktime figures without the capability"
