#!/usr/bin/env bash
# vmm-cpuid-tsc: the CPUID a guest saw and its TSC travel with it.  A
# restored guest keeps running with its saved CPUID, and its time never
# goes back (the guest checks its TSC and exits 5 if it ever does); a
# snapshot whose guest was shown a CPU feature this host does not offer, or
# another vendor, is refused with a message that names it, before any vCPU
# runs.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

cmd="workload=random ops=50000 iters=$(sized 8000) seed=5 quiet=1"
save_snapshot "$cmd"

# Restored at once: the destination VM is younger than the guest's TSC.
"$BIN/vmm" restore "$tmp/snap" > "$tmp/r.out" 2> "$tmp/r.err" ||
	{ cat "$tmp/r.out" "$tmp/r.err" >&2; fail "restore failed (TSC backwards: exit 5)"; }
grep -q 'TSC went backwards' "$tmp/r.out" && fail "guest saw its TSC go backwards"
[ -n "$(port_sum "$tmp/r.err")" ] || fail "restored guest did not finish"
echo "ok: restored guest finished, its TSC never went back"

# Leaf 1 EDX bit 10 is reserved: no host offers it.
forge feature cpuid-set 1 0 edx 10
refused feature "CPUID leaf 0x1.0 EDX bit 10, which this host's KVM does not offer"

forge vendor cpuid-vendor "NotARealCPU!"
refused vendor "vendor differs from this host's"
exit 0
