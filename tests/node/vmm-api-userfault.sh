#!/bin/sh
# vmm-api-userfault: vmm-api-test (vmm/tests/api-test.c) inside a node with
# the userfault back end: a VM started from an in-memory state blob with
# RAM served by an asynchronous source and a racing background push,
# through remap_anon_pages and the article protocol's wake; both VMs end
# with the uninterrupted run's checksum, every page installed exactly once.
# timeout: 300
GUEST=/usr/share/postcopy/guest.elf
[ -c /dev/kvm ] || { echo "FAIL: no /dev/kvm in this node" >&2; exit 1; }
if ! timeout 60 kvm-smoke > /tmp/vmm-api-smoke 2>&1; then
	echo "FAIL: nested KVM does not run a guest in this node (kvm-smoke: $(tail -n1 /tmp/vmm-api-smoke))" >&2
	exit 1
fi
if ! vmm probe userfault > /dev/null 2>&1; then
	echo "FAIL: the patched kernel lacks the userfault back end ($(vmm probe userfault 2>&1))" >&2
	exit 1
fi
timeout 290 vmm-api-test "$GUEST" userfault 150
