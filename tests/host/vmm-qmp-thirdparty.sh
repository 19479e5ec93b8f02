#!/usr/bin/env bash
# vmm-qmp-thirdparty: a QMP client that no one on this project wrote drives
# a migration start to end at both ends (issue 32's "done when"): qemu-qmp
# from the npm registry (scripts/npm-deps.sh puts it in build/npm), through
# tests/host/lib/qmp-thirdparty.js: the destination a `-incoming defer`
# VMM given migrate-incoming, the source migrated with postcopy-ram after a
# precopy ended by migrate-start-postcopy; the VM runs at the destination
# with the guest's checksum equal.  Skips, naming why, without node or the
# package (no npm registry when make deps ran).
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
command -v node > /dev/null || skip "node is not installed (Debian package nodejs)"
[ -f build/npm/node_modules/qemu-qmp/package.json ] ||
	skip "the npm package qemu-qmp is not in build/npm (scripts/npm-deps.sh: no npm registry?)"
need_kvm

cmd="workload=random iters=$(sized 40000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
dsock=$work/d.sock
start_defer_vmm "$dsock" "$work/tp-d.err" "$work/tp-d.json" 280
start_control_vmm "$work/s.sock" "$work/tp-s.err" 280 "$cmd"
NODE_PATH=build/npm/node_modules timeout "$(guard 270)" node tests/host/lib/qmp-thirdparty.js \
	"$dsock" "$work/s.sock" "tcp:127.0.0.1:$(free_port)" ||
	{ cat "$work/tp-s.err" "$work/tp-d.err" >&2; fail "qemu-qmp could not drive the migration"; }
check_migrated thirdparty "$ref" "$spid" "$work/tp-s.err" "$dpid" "$work/tp-d.err" "$work/tp-d.json"
