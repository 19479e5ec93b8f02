#!/usr/bin/env bash
# vmm-qmp-incoming: the destination as a QMP object, as QEMU's
# `-incoming defer` (tests/host/lib/qmp-drive.py, case incoming):
# `vmm run --incoming defer --control SOCK` says inmigrate and refuses
# stop, cont, migrate and a bad migrate-incoming; migrate-incoming URI
# starts listening (a second one is refused); a source driven over QMP
# migrates there; the VM runs there with its control socket: RESUME when
# its vCPUs start, stop and cont work; checksum equal.  Also: defer
# without --control is refused at start.  On 95e5f5c --incoming refused
# --control, and defer was a bad URI.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
for p in vmm; do [ -x "$BIN/$p" ] || fail "$BIN/$p is not built"; done
[ -f "$GUEST" ] || fail "$GUEST is not built"
need_kvm

"$BIN/vmm" run --mem 32M --incoming defer > /dev/null 2> "$work/nodefer.err" &&
	fail "--incoming defer without --control started"
grep -q "defer needs --control" "$work/nodefer.err" || { cat "$work/nodefer.err" >&2; fail "no clear message for defer without --control"; }
echo "ok: --incoming defer without --control refused: $(head -1 "$work/nodefer.err")"

cmd="workload=random iters=$(sized 40000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
dsock=$work/d.sock
start_defer_vmm "$dsock" "$work/in-d.err" "$work/in-d.json" 280
start_control_vmm "$work/s.sock" "$work/in-s.err" 280 "$cmd"
port=$(free_port)
python3 tests/host/lib/qmp-drive.py "$dsock" incoming "tcp:127.0.0.1:$port" "$work/s.sock" ||
	{ cat "$work/in-s.err" "$work/in-d.err" >&2; fail "incoming case"; }
check_migrated incoming "$ref" "$spid" "$work/in-s.err" "$dpid" "$work/in-d.err" "$work/in-d.json"
