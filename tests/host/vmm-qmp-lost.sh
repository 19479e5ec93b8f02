#!/usr/bin/env bash
# vmm-qmp-lost: a postcopy migration driven over QMP that fails for good
# after the switch-over (the destination VMM killed, x-recover-ms 500 so
# that the source gives up): the source VMM stays, as a QEMU source does,
# so that the operator reads query-migrate's failed and its error-desc;
# query-status says the VM does not run, cont and a new migrate are
# refused (the VM's memory is split), and quit ends it with status 70 (the VMM failed).
# Before, the source VMM exited at the failure, control socket or not: a
# tool polling query-migrate read EOF.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

start_vmm_dest lost 280
start_control_vmm "$work/s.sock" "$work/lost-s.err" 280 "workload=random iters=$(sized 40000) quiet=1"
python3 tests/host/lib/qmp-drive.py "$work/s.sock" lost "tcp:127.0.0.1:$dport" "$dpid" ||
	{ cat "$work/lost-s.err" "$work/lost-d.err" >&2; fail "lost case"; }
wait_status "$spid" "the source after quit" 120
rc=$?
[ "$rc" = 70 ] || { cat "$work/lost-s.err" >&2; fail "the source exited $rc after quit, not the VMM's failure 70 (the VM was lost)"; }
grep -q "waiting for 'quit'" "$work/lost-s.err" ||
	{ cat "$work/lost-s.err" >&2; fail "the source did not say it waits for quit"; }
echo "ok: the source stayed until quit and exited 1"
