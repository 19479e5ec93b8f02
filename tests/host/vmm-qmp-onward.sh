#!/usr/bin/env bash
# vmm-qmp-onward: a VM that arrived by migration migrates on, as a QEMU
# destination can (tests/host/lib/qmp-drive.py, case onward): A migrates to
# B (--incoming defer); B's migrate is refused while pages are still on
# their way, taken once every page arrived, and the VM goes on to C;
# the guest's checksum at C equals an unmigrated run's; B's arrival report
# (--migrate-metrics) is not overwritten by its departure.  Before this
# test, a migrated VM's migrate was refused for good.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

cmd="workload=random iters=$(sized 60000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
start_defer_vmm "$work/b.sock" "$work/b.err" "$work/b.json" 280
bpid=$dpid
start_defer_vmm "$work/c.sock" "$work/c.err" "$work/c.json" 280
cpid=$dpid
start_control_vmm "$work/a.sock" "$work/a.err" 280 "$cmd"
python3 tests/host/lib/qmp-drive.py "$work/b.sock" onward "tcp:127.0.0.1:$(free_port)" \
	"$work/c.sock" "$work/a.sock" "tcp:127.0.0.1:$(free_port)" ||
	{
		cat "$work/a.err" "$work/b.err" "$work/c.err" >&2
		for v in spid bpid cpid; do # how each VMM ended, if it did (a crash says so)
			kill -0 "${!v}" 2> /dev/null && echo "$v: still running" >&2 && continue
			wait "${!v}"
			echo "$v: exit status $?" >&2
		done
		fail "onward case"
	}
wait_status "$spid" "A" 120 || { cat "$work/a.err" >&2; fail "A failed"; }
check_migrated onward "$ref" "$bpid" "$work/b.err" "$cpid" "$work/c.err" "$work/c.json"
check_json "$work/b.json" '.pages_received == .pages and .pages > 0' "B's arrival report was overwritten or lost"
