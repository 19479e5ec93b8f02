#!/usr/bin/env bash
# vmm-qmp-after: a migration `vmm run --migrate-after` starts is the VM's
# one migration, the one QMP sees (tests/host/lib/qmp-drive.py):
# 1. manual postcopy: query-migrate shows it active, a second migrate is
#    refused with a GenericError, migrate_cancel cancels it (the
#    destination gives up, the VM runs on at the source);
# 2. manual postcopy ended by migrate-start-postcopy, to completed;
#    checksum equal at the destination.
# On main (c859044) query-migrate answered {} throughout, migrate_cancel
# did nothing, migrate-start-postcopy was refused and a QMP migrate started
# a second migration of the same VM.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

flags=(--migrate-after 1 --precopy-rounds 1 --postcopy-manual)

# 1. Cancelled: a guest that outlives any wait (killed at the end).
start_vmm_dest cancel 280
start_control_vmm "$work/c.sock" "$work/c-s.err" 280 "workload=random iters=4000000 quiet=1" \
	--migrate-to "tcp:127.0.0.1:$dport" "${flags[@]}"
cpid=$spid
other=$(free_port)
python3 tests/host/lib/qmp-drive.py "$work/c.sock" after-cancel "tcp:127.0.0.1:$other" ||
	{ cat "$work/c-s.err" "$work/cancel-d.err" >&2; fail "cancel case"; }
wait_status "$dpid" "the cancelled destination" 120 && fail "the destination of a cancelled migration exited 0"
grep -q "cancelled at the source" "$work/cancel-d.err" || { cat "$work/cancel-d.err" >&2; fail "the destination did not say why it gave up"; }
kill -0 "$cpid" 2> /dev/null || fail "the source VMM exited after a cancel"
kill "$cpid"

# 2. Ended by migrate-start-postcopy, to completion.
cmd="workload=random iters=$(sized 20000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
start_vmm_dest post 280
start_control_vmm "$work/p.sock" "$work/p-s.err" 280 "$cmd" --migrate-to "tcp:127.0.0.1:$dport" "${flags[@]}"
python3 tests/host/lib/qmp-drive.py "$work/p.sock" after-postcopy ||
	{ cat "$work/p-s.err" "$work/post-d.err" >&2; fail "postcopy case"; }
check_migrated post "$ref" "$spid" "$work/p-s.err" "$dpid" "$work/post-d.err" "$work/post-d.json"
