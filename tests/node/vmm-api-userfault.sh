#!/bin/sh
# vmm-api-userfault: vmm-api-test (vmm/tests/api-test.c) inside a node with
# the userfault back end: a VM started from an in-memory state blob with
# RAM served by an asynchronous source and a racing background push,
# through remap_anon_pages and the article protocol's wake; both VMs end
# with the uninterrupted run's checksum, every page installed exactly once.
# timeout: 180
GUEST=/usr/share/postcopy/guest.elf
[ -c /dev/kvm ] || { echo "skip: no /dev/kvm in this node" >&2; exit 77; }
if ! timeout 60 kvm-smoke > /tmp/vmm-api-smoke 2>&1; then
	echo "skip: nested KVM does not run a guest in this node (kvm-smoke: $(tail -n1 /tmp/vmm-api-smoke))" >&2
	exit 77
fi
if ! vmm probe userfault > /dev/null 2>&1; then
	echo "skip: this kernel lacks the userfault back end ($(vmm probe userfault 2>&1))" >&2
	exit 77
fi
timeout 170 vmm-api-test "$GUEST" userfault
