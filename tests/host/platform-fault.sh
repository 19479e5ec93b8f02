#!/usr/bin/env bash
# platform-fault: tests/platform-fault, the one list of the nested
# platform's own faults that run-node-tests (in a node) and tests/run (the
# two-node tests) rerun a failed test for, knows each kind in the lines the
# VMM prints (vmm/vcpu.c, vmm/vm-report.c; a node's console ends them with
# a carriage return), and nothing else: a busy vCPU that takes page faults
# of its own, a vCPU that emulates without injecting faults, a clean run.
set -uo pipefail
. tests/host/plain-lib.bash

found() { # what file... : platform-fault must name the fault
	local said
	said=$(tests/platform-fault "${@:2}") || fail "$1: not found"
	echo "ok: $1: $said"
}
none() { # what file...
	tests/platform-fault "${@:2}" > /dev/null && fail "$1: taken for the platform's fault"
	echo "ok: $1: not the platform's fault"
}

printf 'vmm: vcpu 0: guest shut down (triple fault) (rip 0xfff0)\r\n' > "$tmp/triple"
found "a guest's triple fault" "$tmp/triple"
printf 'vmm: vcpu 1 (thread 311): running; kernel: R\r\nvmm: vcpu 1: KVM in 200 ms: exits +5141, insn_emulation +5142, pf_guest +5142, pf_taken +0\r\n' > "$tmp/stuck"
found "a vCPU stuck in KVM emulation" "$tmp/stuck"
printf 'migrate: something else\n' > "$tmp/clean"
found "the fault in the second of two files" "$tmp/clean" "$tmp/stuck"

printf 'vmm: vcpu 0: KVM in 200 ms: exits +9000, insn_emulation +3000, pf_guest +3000, pf_taken +2500\n' > "$tmp/busy"
none "emulation with page faults of its own (pf_taken)" "$tmp/busy"
printf 'vmm: vcpu 0: KVM in 200 ms: exits +900, insn_emulation +800, pf_guest +3, pf_taken +0\n' > "$tmp/emul"
none "emulation without injected faults" "$tmp/emul"
none "a clean run" "$tmp/clean"
none "a file that is not there" "$tmp/nothing"
exit 0
