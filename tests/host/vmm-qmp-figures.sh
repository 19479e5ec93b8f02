#!/usr/bin/env bash
# vmm-qmp-figures: QEMU's figures, events and run states at the source,
# asked by a QMP client written from QEMU's wire format
# (tests/host/lib/qmp-drive.py, case figures), against the source's own
# metrics: during precopy mbps and pages-per-second > 0 (last second),
# setup-time, no downtime, every byte precopy's, query-status running;
# MIGRATION_PASS 1, 2, ... as the passes start; STOP after "device" and
# before "postcopy-active"; run states running, then finish-migrate and
# postmigrate only; once completed normal + duplicate = the pages sent,
# normal-bytes = normal * 4096, the byte splits add up to transferred,
# downtime present; then the source still answers (postmigrate), refuses
# cont and migrate, and quit ends it with exit status 0.  On main
# (c6cfe5f) normal counted zero markers, mbps and duplicate were missing,
# no MIGRATION_PASS or STOP was sent, query-status said running while the
# source was paused, and the source VMM exited by itself after completed.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

# A guest that outlives the migration (the destination is killed at the end).
start_vmm_dest figures 280
start_control_vmm "$work/s.sock" "$work/s.err" 280 "workload=random iters=4000000 quiet=1"
python3 tests/host/lib/qmp-drive.py "$work/s.sock" figures "tcp:127.0.0.1:$dport" "$work/figures-s.json" ||
	{ cat "$work/s.err" "$work/figures-d.err" >&2; fail "figures case"; }
wait_status "$spid" "the source after quit" 30 || { cat "$work/s.err" >&2; fail "the source did not exit 0 after quit"; }
echo "ok: the source exited 0 on quit"
grep -q "postmigrate: waiting for 'quit'" "$work/s.err" || { cat "$work/s.err" >&2; fail "the source did not say it waits for quit"; }
kill -0 "$dpid" 2> /dev/null || { cat "$work/figures-d.err" >&2; fail "the destination is not running the VM"; }
echo "ok: the VM runs on at the destination"
kill "$dpid"
