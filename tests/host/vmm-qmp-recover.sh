#!/usr/bin/env bash
# vmm-qmp-recover: recovery by command, as QEMU's and as libvirt drives it
# (tests/host/lib/qmp-drive.py, case recover): a postcopy migration between
# two VMMs driven over QMP is paused by migrate-pause at the source; both
# ends say postcopy-paused and wait with no deadline; a migrate {resume:
# true} to an address where nothing listens goes back to postcopy-paused,
# and so does one to an impostor that cannot prove the session's secret
# (it is sent nothing after its failed proof);
# migrate-recover at the destination opens a second address and the
# source's resume reaches it; paused again from the destination, it
# recovers over a third; it completes with the guest's checksum equal.
# Commands in the wrong state are refused with QEMU's words.  Before this
# test, migrate resume: true was refused and there was no migrate-pause or
# migrate-recover: a broken link was re-dialled for x-recover-ms, then the
# VM was lost.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

cmd="workload=random iters=$(sized 40000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
dsock=$work/d.sock
start_defer_vmm "$dsock" "$work/rec-d.err" "$work/rec-d.json" 280
start_control_vmm "$work/s.sock" "$work/rec-s.err" 280 "$cmd"
p1=$(free_port) p2=$(free_port) p3=$(free_port) dead=$(free_port)
python3 tests/host/lib/qmp-drive.py "$dsock" recover "tcp:127.0.0.1:$p1" "$work/s.sock" \
	"tcp:127.0.0.1:$p2" "unix:$work/rec3.sock" "tcp:127.0.0.1:$dead" ||
	{ cat "$work/rec-s.err" "$work/rec-d.err" >&2; fail "recover case"; }
grep -q "wrong proof of the session secret: not our destination" "$work/rec-s.err" ||
	{ cat "$work/rec-s.err" >&2; fail "the source does not say the impostor failed its proof"; }
grep -q "paused by migrate-pause" "$work/rec-s.err" ||
	{ cat "$work/rec-s.err" >&2; fail "the source does not say why its link broke"; }
check_migrated recover "$ref" "$spid" "$work/rec-s.err" "$dpid" "$work/rec-d.err" "$work/rec-d.json"
check_json "$work/rec-d.json" '.recoveries == 2' "the destination did not count two recoveries"
