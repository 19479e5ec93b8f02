#!/usr/bin/env bash
# vmm-qmp: the control API driven by a QMP client written from QEMU's wire
# format (tests/host/lib/qmp-drive.py), not by migrate-agent:
# 1. parameters set and read back, an unknown command, a bad value, a
#    second migrate while one runs; a migration in manual-postcopy precopy
#    cancelled: the VM runs on at the source, the destination gives up at
#    once with the reason;
# 2. over unix:PATH; two clients, one only watching and leaving; precopy, then
#    migrate-start-postcopy; migrate_cancel after the switch-over refused;
#    MIGRATION events to completed; checksum equal at the destination.
# Before 1, migrate-agent status on a VMM that has not migrated.  Each case
# has its own source VMM: 1's guest outlives it (killed), 2's ends at the
# destination (one guest for both outlived the waits in a node).
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent
need_guest
need_kvm

sock=$work/vm.sock
# 1. A guest that outlives any wait (killed at the end of the case).
start_control_vmm "$sock" "$work/s.err" 280 "workload=random iters=4000000 quiet=1"

"$BIN/migrate-agent" status --vmm "$sock" > "$work/status.json" || fail "migrate-agent status failed"
[ "$(jq -c . "$work/status.json")" = "{}" ] || fail "status before any migration: $(cat "$work/status.json")"

# 1. Cancelled in precopy.
start_vmm_dest cancel 280
python3 tests/host/lib/qmp-drive.py "$sock" cancel "tcp:127.0.0.1:$dport" ||
	{ cat "$work/s.err" "$work/cancel-d.err" >&2; fail "cancel case"; }
wait "$dpid" && fail "the destination of a cancelled migration exited 0"
grep -q "cancelled at the source" "$work/cancel-d.err" || { cat "$work/cancel-d.err" >&2; fail "the destination did not say why it gave up"; }
kill -0 "$spid" 2> /dev/null || fail "the source VMM exited after a cancel"
echo "cancel: the destination gave up: $(grep -o 'source reported.*' "$work/cancel-d.err" | head -1)"
kill "$spid"

# 2. Precopy, then postcopy when told, to completion: a guest that ends
# (sized: a fourth in a node, where it runs ten times slower).
cmd="workload=random iters=$(sized 20000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
sock=$work/vm2.sock
start_control_vmm "$sock" "$work/s2.err" 280 "$cmd"
# Over a unix socket (QEMU's unix:PATH), the destination's own.
msock=$work/mig.sock
timeout "$(guard 280)" "$BIN/vmm" run --mem 32M --incoming "unix:$msock" \
	--migrate-metrics "$work/migrate-d.json" > /dev/null 2> "$work/migrate-d.err" &
dpid=$!
pids+=("$dpid")
wait_socket "$msock"
python3 tests/host/lib/qmp-drive.py "$sock" migrate "unix:$msock" ||
	{ cat "$work/s2.err" "$work/migrate-d.err" >&2; fail "migrate case"; }
check_migrated migrate "$ref" "$spid" "$work/s2.err" "$dpid" "$work/migrate-d.err" "$work/migrate-d.json"
