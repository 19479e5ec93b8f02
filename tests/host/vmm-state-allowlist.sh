#!/usr/bin/env bash
# vmm-state-allowlist: a state blob comes from a file or from a peer, and
# neither is trusted.  A snapshot whose MSRs or CPUID entries are not the
# ones this VMM saves itself (an MSR it never saves such as IA32_APIC_BASE,
# EFER or SPEC_CTRL, one MSR twice, a CPUID leaf this host's KVM does not
# offer, one leaf twice) is refused with a message naming the entry, before
# any vCPU runs; so is a value KVM or the VMM refuses (a non-canonical
# LSTAR, a reserved PAT type).  The same snapshot unmodified still restores.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

cmd="workload=random ops=50000 iters=$(sized 8000) seed=7 quiet=1"
save_snapshot "$cmd"


# The SYSENTER MSRs (0x174-0x176) are saved on every x86 KVM.
forge apic-base msr-index 0x174 0x1b
refused apic-base "vCPU 0: MSR 0x1b in the state is not one this VMM saves"
forge efer msr-index 0x175 0xc0000080
refused efer "vCPU 0: MSR 0xc0000080 in the state is not one this VMM saves"
forge msr-twice msr-index 0x175 0x174
refused msr-twice "vCPU 0: MSR 0x174 appears twice in the state"
forge spec-ctrl msr-index 0x176 0x48
refused spec-ctrl "vCPU 0: MSR 0x48 in the state is not one this VMM saves"
# One entry more than this VMM saves (a forbidden MSR, appended).
forge msr-extra msr-add 0x3a 5
refused msr-extra "vCPU 0: .* MSRs in the state, this VMM saves at most"
# Values: KVM refuses a non-canonical LSTAR; PAT (memory type 2 is
# reserved) is checked by the VMM, as some hosts' KVM takes any.
forge lstar-value msr-set 0xc0000082 0x8000000000000000
refused lstar-value "vCPU 0: KVM refused the value of MSR 0xc0000082"
forge pat-value msr-set 0x277 0x0007040600070402
refused pat-value "vCPU 0: MSR 0x277: 0x7040600070402 is not a valid value"

# No KVM offers leaf 0x20000000 (Xeon Phi's range).
forge leaf cpuid-add 0x20000000 0
refused leaf "vCPU 0: CPUID leaf 0x20000000.0 in the state is not one this host's KVM offers"
forge leaf-twice cpuid-add 0 0
refused leaf-twice "vCPU 0: CPUID leaf 0x0.0 appears twice in the state"

# (Each message names the entry: the rebuilt snapshot itself, RAM image
# moved, was read as valid.)  The unmodified one restores.
"$BIN/vmm" restore "$tmp/snap" > "$tmp/r.out" 2> "$tmp/r.err" ||
	{ cat "$tmp/r.out" "$tmp/r.err" >&2; fail "unmodified snapshot refused"; }
[ -n "$(port_sum "$tmp/r.err")" ] || fail "restored guest did not finish"
echo "ok: the unmodified snapshot restores and its guest finishes"
exit 0
