#!/usr/bin/env bash
# vmm-cpuid-tsc: the CPUID a guest saw and its TSC travel with it.  A
# restored guest keeps running with its saved CPUID, and its time never
# goes back (the guest checks its TSC and exits 5 if it ever does); a
# snapshot whose guest was shown a CPU feature this host does not offer, or
# another vendor, is refused with a message that names it, before any vCPU
# runs.
# timeout: 300
. tests/host/vmm-lib.bash
edit=tests/host/lib/snapshot-edit.py

cmd="workload=random ops=50000 iters=8000 seed=5 quiet=1"
"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$cmd" --save-after 300 "$tmp/snap" \
	> "$tmp/s.out" 2> "$tmp/s.err" || { cat "$tmp/s.err" >&2; fail "save run failed"; }
grep -q "saved state and RAM to $tmp/snap" "$tmp/s.err" || { cat "$tmp/s.err" >&2; fail "no snapshot"; }
grep -q 'guest: done' "$tmp/s.out" && fail "guest finished before the save: test too short"

# Restored at once: the destination VM is younger than the guest's TSC.
"$BIN/vmm" restore "$tmp/snap" > "$tmp/r.out" 2> "$tmp/r.err" ||
	{ cat "$tmp/r.out" "$tmp/r.err" >&2; fail "restore failed (TSC backwards: exit 5)"; }
grep -q 'TSC went backwards' "$tmp/r.out" && fail "guest saw its TSC go backwards"
[ -n "$(port_sum "$tmp/r.err")" ] || fail "restored guest did not finish"
echo "ok: restored guest finished, its TSC never went back"

refused() { # name expected-message
	"$BIN/vmm" restore "$tmp/$1" > "$tmp/$1.out" 2> "$tmp/$1.err" && fail "$1: forged snapshot restored"
	grep -q "$2" "$tmp/$1.err" || { cat "$tmp/$1.err" >&2; fail "$1: no message naming the cause"; }
	grep -q 'guest:' "$tmp/$1.out" && fail "$1: the guest ran"
	echo "ok: $1 refused: $(grep -o 'cannot load.*' "$tmp/$1.err")"
}

# Leaf 1 EDX bit 10 is reserved: no host offers it.
cp "$tmp/snap" "$tmp/feature"
python3 "$edit" "$tmp/feature" cpuid-set 1 0 edx 10
refused feature "CPUID leaf 0x1.0 EDX bit 10, which this host's KVM does not offer"

cp "$tmp/snap" "$tmp/vendor"
python3 "$edit" "$tmp/vendor" cpuid-vendor "NotARealCPU!"
refused vendor "vendor differs from this host's"
exit 0
