#!/usr/bin/env bash
# vmm-qmp: the control API driven by a QMP client written from QEMU's wire
# format (tests/host/lib/qmp-drive.py), not by migrate-agent:
# 1. parameters set and read back, an unknown command, a bad value, a
#    second migrate while one runs; a migration in manual-postcopy precopy
#    cancelled: the VM runs on at the source, the destination gives up at
#    once with the reason;
# 2. two clients, one only watching and leaving; precopy, then
#    migrate-start-postcopy; migrate_cancel after the switch-over refused;
#    MIGRATION events to completed; checksum equal at the destination.
# Then migrate-agent status on a VMM that has not migrated.
# timeout: 300
set -uo pipefail
. tests/host/migrate-lib.bash
for p in vmm migrate-agent; do [ -x "$BIN/$p" ] || fail "$BIN/$p is not built"; done
[ -f "$GUEST" ] || fail "$GUEST is not built"
[ -w /dev/kvm ] || skip "no usable /dev/kvm"

cmd="workload=random iters=40000 quiet=1"
ref=$(reference_checksum 32M "$cmd")
sock=$work/vm.sock
timeout 250 "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" --control "$sock" \
	> /dev/null 2> "$work/s.err" &
spid=$!
pids+=("$spid")
wait_socket "$sock"

"$BIN/migrate-agent" status --vmm "$sock" > "$work/status.json" || fail "migrate-agent status failed"
[ "$(jq -c . "$work/status.json")" = "{}" ] || fail "status before any migration: $(cat "$work/status.json")"

# 1. Cancelled in precopy.
d1=$(free_port)
timeout 250 "$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$d1" > /dev/null 2> "$work/d1.err" &
d1pid=$!
pids+=("$d1pid")
wait_listen "$d1" "$d1pid" "$work/d1.err"
python3 tests/host/lib/qmp-drive.py "$sock" cancel "tcp:127.0.0.1:$d1" ||
	{ cat "$work/s.err" "$work/d1.err" >&2; fail "cancel case"; }
wait "$d1pid" && fail "the destination of a cancelled migration exited 0"
grep -q "cancelled at the source" "$work/d1.err" || { cat "$work/d1.err" >&2; fail "the destination did not say why it gave up"; }
kill -0 "$spid" 2> /dev/null || fail "the source VMM exited after a cancel"
echo "cancel: the destination gave up: $(grep -o 'source reported.*' "$work/d1.err" | head -1)"

# 2. Precopy, then postcopy when told, to completion.
d2=$(free_port)
timeout 250 "$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$d2" \
	--migrate-metrics "$work/d2.json" > /dev/null 2> "$work/d2.err" &
d2pid=$!
pids+=("$d2pid")
wait_listen "$d2" "$d2pid" "$work/d2.err"
python3 tests/host/lib/qmp-drive.py "$sock" migrate "tcp:127.0.0.1:$d2" ||
	{ cat "$work/s.err" "$work/d2.err" >&2; fail "migrate case"; }
wait_status "$spid" "the source" 120 || { cat "$work/s.err" >&2; fail "the source vmm failed"; }
wait_status "$d2pid" "the destination" 200 || { cat "$work/d2.err" >&2; fail "the destination vmm failed"; }
got=$(final_checksum "$work/d2.err")
[ "$got" = "$ref" ] || fail "checksum $got after migration, $ref without"
check_exactly_once "$work/d2.json"
echo "migrate: completed, checksum equal"
