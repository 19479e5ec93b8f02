#!/usr/bin/env bash
# vmm-big-guest: a 6 GiB, 2-vCPU guest, so RAM past 3 GiB sits in the second
# region at guest-physical 4 GiB.  The guest's page tables map virtual =
# RAM offset; the random workload's working set (ws=256M) is the first
# 128 MiB of each vCPU's slice: vCPU 0's below 3 GiB, vCPU 1's past it (in
# the high region, checked from the start line).  KVM has no memslot in
# [3 GiB, 4 GiB): a stray access there stops the VM ("outside RAM").
# Checked: the plain run, a postcopy migration (vmm run --migrate-to /
# --incoming, uffd), one with precopy rounds first (the dirty log of both
# memslots) and a snapshot save + restore (plain and lazy) end with the
# same checksum;
# every one of the 6 GiB of pages arrives exactly once.
# verify=0 and the bounded working set keep it to about a minute: at the
# destination RAM is 4 KiB pages, and touching all 6 GiB there (a random
# working set of all RAM, or the verify pass) took 4 minutes on PVM.
# Needs ~14 GiB available (source and destination side by side): skips
# otherwise.
# timeout: 600
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm
avail_kb=$(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo)
[ "${avail_kb:-0}" -ge $((14 << 20)) ] ||
	skip "MemAvailable is $((${avail_kb:-0} >> 20)) GiB; a 6 GiB guest migrated on one host needs ~14"

mem=6G
pages=$((6 << 18))
cmd="workload=random ws=256M iters=12000 ops=20000 seed=5 quiet=1 verify=0"
run() { "$BIN/vmm" run --image "$GUEST" --mem $mem --vcpus 2 --cmdline "$cmd" "$@"; }

# Plain run: the reference.
run > "$work/ref.out" 2> "$work/ref.err" || { cat "$work/ref.err" >&2; fail "the plain run failed"; }
ref=$(final_checksum "$work/ref.err")
[ -n "$ref" ] || { cat "$work/ref.err" >&2; fail "the plain run printed no checksum"; }
# pages= is the workload's span (from 2 MiB); vCPU 1's half must start past
# 3 GiB, i.e. in the high region.
span=$(sed -n 's/.*cpus=2 pages=\([0-9]*\) .*/\1/p' "$work/ref.out")
[ -n "$span" ] || { cat "$work/ref.out" >&2; fail "no start line"; }
high_start=$(((2 << 20) + span / 2 * 4096))
[ "$high_start" -ge $((3 << 30)) ] || fail "vCPU 1's slice starts at $high_start, below 3 GiB"
echo "plain: checksum $ref; workload spans $span pages, vCPU 1's from RAM offset $high_start (guest-physical $((high_start + (1 << 30))))"

vm_opts=(--mem "$mem" --vcpus 2)
vm_guard=400
migrate() { # name [source options...]
	local name=$1
	shift
	migrate_loopback "$name" "$ref" "$cmd" 500 "$@"
	check_json "$work/$name-d.json" ".pages == $pages" "$name: destination RAM is not 6 GiB of pages"
	echo "$name: checksum $ref equal; $(jq -c '{pages, downtime_us, faults, pages_demand, pages_pushed, pages_precopy, pages_zero, total_ms}' "$work/$name-s.json")"
}

# Pure postcopy; then precopy first, which reads KVM's dirty log of both
# memslots into one bitmap (the high slot's pages after the low ones).
migrate postcopy
migrate precopy --precopy-rounds 3
check_json "$work/precopy-s.json" '.pages_precopy == .pages and .precopy_rounds_done >= 1' \
	"precopy: no precopy round was sent"

# Snapshot: save mid-run, restore, same checksum.
run --save-after 500 "$work/snap" > "$work/save.out" 2> "$work/save.err" ||
	{ cat "$work/save.err" >&2; fail "the save run failed"; }
grep -q "saved state and RAM to $work/snap" "$work/save.err" || { cat "$work/save.err" >&2; fail "no snapshot"; }
grep -q 'guest: done' "$work/save.out" && fail "the guest finished before the save"
"$BIN/vmm" restore "$work/snap" > "$work/r.out" 2> "$work/r.err" ||
	{ cat "$work/r.err" >&2; fail "restore failed"; }
got=$(final_checksum "$work/r.err")
[ "$got" = "$ref" ] || { cat "$work/r.err" >&2; fail "checksum $got after restore, $ref without"; }
echo "save/restore: checksum $got equal"
# Lazily: every page the guest touches is served from the file by a fault.
"$BIN/vmm" restore "$work/snap" --lazy > "$work/rl.out" 2> "$work/rl.err" ||
	{ cat "$work/rl.err" >&2; fail "lazy restore failed"; }
got=$(final_checksum "$work/rl.err")
[ "$got" = "$ref" ] || { cat "$work/rl.err" >&2; fail "checksum $got after lazy restore, $ref without"; }
grep -q "present=[0-9]*/$pages\$" "$work/rl.err" || { cat "$work/rl.err" >&2; fail "lazy restore: no RAM statistics"; }
# Both working sets (128 MiB = 32768 pages each) were faulted in, vCPU 1's
# through the high memslot (guest-physical 4 GiB + x for virtual 3 GiB + x).
present=$(sed -n 's/.* present=\([0-9]*\)\/.*/\1/p' "$work/rl.err")
[ "${present:-0}" -ge 65536 ] || fail "lazy restore: only ${present:-0} pages faulted in, want both working sets"
echo "lazy restore: checksum $got equal; $(grep -o 'faults=.*' "$work/rl.err")"
echo "vmm-big-guest: a 6 GiB guest across both RAM regions: plain, migrated and restored agree"
