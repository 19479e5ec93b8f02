#!/usr/bin/env bash
# vmm-qmp-libvirt: the QMP that libvirt's QEMU driver sends for
#   virsh migrate --live --postcopy --postcopy-after-precopy (--bandwidth 8
#     --postcopy-bandwidth 1 --listen-address 127.0.0.1),
#   virsh domjobabort --postcopy, and
#   virsh migrate --postcopy --postcopy-resume over a second address,
# replayed command for command at both ends (tests/host/lib/libvirt-replay.py,
# written from libvirt 9.x/10.x's src/qemu/qemu_migration*.c and
# qemu_monitor_json.c; each command names the libvirt function that sends
# it).  The destination is started as libvirt starts QEMU for an incoming
# migration (-incoming defer); every reply and event is checked the way
# libvirt's qemuMonitorJSON* functions read it.  What this VMM lacks is
# printed as "gap: ..." (and listed in docs/migration.md) and the replay
# goes on; the test fails if the migration, its pause or its recovery over
# the second address does not go through, or a reply has a shape libvirt
# cannot read.  The guest's checksum after the migration equals an
# unmigrated run's.
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
start_defer_vmm "$dsock" "$work/lv-d.err" "$work/lv-d.json" 280
start_control_vmm "$work/s.sock" "$work/lv-s.err" 280 "$cmd"
p1=$(free_port) p2=$(free_port)
python3 tests/host/lib/libvirt-replay.py "$dsock" "$work/s.sock" \
	"tcp:127.0.0.1:$p1" "tcp:127.0.0.1:$p2" | tee "$work/replay.out"
[ "${PIPESTATUS[0]}" = 0 ] ||
	{ cat "$work/lv-s.err" "$work/lv-d.err" >&2; fail "the libvirt transcript"; }
grep -q "paused by migrate-pause" "$work/lv-s.err" ||
	{ cat "$work/lv-s.err" >&2; fail "the source does not say why its link broke"; }
check_migrated libvirt "$ref" "$spid" "$work/lv-s.err" "$dpid" "$work/lv-d.err" "$work/lv-d.json"
check_json "$work/lv-d.json" '.recoveries == 1' "the destination did not count one recovery"
echo "libvirt transcript: $(grep -c '^-> ' "$work/replay.out") commands replayed, $(grep -c '^gap: ' "$work/replay.out") gap(s)"
