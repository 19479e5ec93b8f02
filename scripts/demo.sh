#!/usr/bin/env bash
# make demo: boot a QEMU node on the patched kernel and run a nested KVM
# guest inside it.  (The two-node postcopy migration demo replaces this once
# the migration agent runs between nodes.)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
echo "demo: booting a node (patched kernel $(cat build/kernel/key 2>/dev/null), TCG, nested KVM)"
if tests/node-launch --name demo --timeout 180 -- 'kvm-smoke'; then
	echo "demo: the node ran a nested KVM guest: OK"
else
	echo "demo: FAILED (console log: build/nodes/demo.log)" >&2
	exit 1
fi
