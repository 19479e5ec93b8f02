#!/usr/bin/env bash
# vmm-qmp-tls: TLS set up as libvirt sets it up for a TLS migration
# (tests/host/lib/qmp-drive.py, case tls): object-add of a tls-creds-x509
# (a directory of QEMU's file names) at both ends, the parameter tls-creds
# naming it, migrate-incoming and migrate; then libvirt's clean-up
# (tls-creds "", object-del).  Bad objects are refused with the reason
# (another type, no dir, unreadable files, verify-peer false, an unknown
# property), as are tls-creds naming no object, object-del of one in use,
# and server credentials at a source.  The destination's metrics show the
# TLS sessions; the guest's checksum is equal.  Before, object-add was
# CommandNotFound and tls-creds had to be a directory.
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
command -v openssl > /dev/null || fail "openssl (command) missing: make deps"
need_kvm

scripts/make-tls-creds.sh "$work/creds" 127.0.0.1 > /dev/null || fail "cannot make credentials"
cmd="workload=random iters=$(sized 40000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
dsock=$work/d.sock
start_defer_vmm "$dsock" "$work/tls-d.err" "$work/tls-d.json" 280
start_control_vmm "$work/s.sock" "$work/tls-s.err" 280 "$cmd"
python3 tests/host/lib/qmp-drive.py "$dsock" tls "tcp:127.0.0.1:$(free_port)" "$work/s.sock" \
	"$work/creds" || { cat "$work/tls-s.err" "$work/tls-d.err" >&2; fail "tls case"; }
check_migrated tls "$ref" "$spid" "$work/tls-s.err" "$dpid" "$work/tls-d.err" "$work/tls-d.json"
check_json "$work/tls-d.json" '.tls.sessions >= 2' "the destination's metrics show no TLS session"
grep -q "plain TCP" "$work/tls-d.err" && { cat "$work/tls-d.err" >&2; fail "the destination warned of plain TCP"; }
echo "ok: TLS by object-add at both ends"
