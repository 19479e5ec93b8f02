# Where the host tests find KVM, and how big their guests are there
# (sourced by vmm-lib.bash and migrate-lib.bash, and by the tests that use
# neither; not a test).
#
# On a machine without a usable /dev/kvm, tests/run runs the tests that
# need it inside a QEMU node (TCG, nested KVM) instead of skipping them
# (docs/testing.md, "Host tests that need KVM").  To try that path on a
# machine that has KVM: POSTCOPY_HOST_KVM=0 tests/run --host-only.
#
#   host_kvm          true when KVM may be used here: /dev/kvm is writable
#                     and, outside a node, POSTCOPY_HOST_KVM is not 0
#   need_kvm          skip (77) unless host_kvm, telling tests/run (through
#                     the file named by POSTCOPY_NEEDS_KVM) that the test
#                     wants a node
#   kvm_part WHAT     for a test that runs without KVM but has a part that
#                     needs it: true when host_kvm, else notes WHAT was not
#                     run here and tells tests/run the same
#   POSTCOPY_WHERE    host, or node when run inside a node by
#                     run-node-tests --host-tests
#   sized N           N on the host; in a node N/NODE_SHRINK (at least 1).
#                     Guest iteration counts go through it: the nested,
#                     emulated guest runs about 10 times slower than on the
#                     host, and the node of host tests is the longest
#                     part of CI without KVM (tests/run).  Only amounts of
#                     work, never time limits (those are hang guards, scaled up by
#                     tests/run), nor anything a checksum is compared
#                     across (both runs of a comparison use the same N).
POSTCOPY_WHERE=${POSTCOPY_WHERE:-host}
NODE_SHRINK=${NODE_SHRINK:-4}

host_kvm() {
	if [ "$POSTCOPY_WHERE" != node ] && [ "${POSTCOPY_HOST_KVM:-1}" = 0 ]; then
		return 1
	fi
	[ -w /dev/kvm ]
}

kvm_missing_reason() {
	if [ "$POSTCOPY_WHERE" != node ] && [ "${POSTCOPY_HOST_KVM:-1}" = 0 ]; then
		echo "POSTCOPY_HOST_KVM=0: this host's /dev/kvm is not to be used"
	elif [ -e /dev/kvm ]; then
		echo "/dev/kvm is not writable here"
	else
		echo "no /dev/kvm here"
	fi
}

need_kvm() {
	host_kvm && return 0
	[ -z "${POSTCOPY_NEEDS_KVM:-}" ] || echo "whole" > "$POSTCOPY_NEEDS_KVM"
	echo "SKIP: needs KVM: $(kvm_missing_reason)" >&2
	exit 77
}

kvm_part() { # what
	host_kvm && return 0
	[ -z "${POSTCOPY_NEEDS_KVM:-}" ] || echo "part: $1" >> "$POSTCOPY_NEEDS_KVM"
	echo "note: $1 not run here: needs KVM: $(kvm_missing_reason)"
	return 1
}

sized() { # n
	if [ "$POSTCOPY_WHERE" = node ]; then
		local n=$(($1 / NODE_SHRINK))
		echo $((n > 0 ? n : 1))
	else
		echo "$1"
	fi
}

# guard N: a hang guard of N seconds for a process a test starts, times
# the time scale its runner gives the whole test (run-node-tests
# --time-scale exports POSTCOPY_TIME_SCALE: the node of host tests runs
# each 2x longer, and its guards must grow with it, or a busy machine
# kills a process that was only slow).  Hang guards only, never a time
# that is asserted.
guard() { # seconds
	echo $(($1 * ${POSTCOPY_TIME_SCALE:-1}))
}

# A part of a test that cannot run where the test runs (in a node: what
# needs a program the node lacks).  The test goes on; the part is reported
# by tests/run as a skip of its own, with REASON, never folded into a pass.
skip_part() { # what reason
	[ -z "${POSTCOPY_SKIPPED_PARTS:-}" ] || echo "$1: $2" >> "$POSTCOPY_SKIPPED_PARTS"
	echo "note: $1 not run: $2"
}

# QEMU for the tests that compare with it: on the host it must be there; in
# a node it is not (about 50 MB with its libraries, and QEMU's TCG inside
# the node's TCG would be slower still): the comparison is skipped there.
have_qemu() { # what
	command -v qemu-system-x86_64 > /dev/null && return 0
	if [ "$POSTCOPY_WHERE" = node ]; then
		skip_part "$1" "no qemu-system-x86_64 in the node initramfs"
		return 1
	fi
	echo "FAIL: qemu-system-x86_64 missing (make deps)" >&2
	exit 1
}

. tests/host/wait-lib.bash
