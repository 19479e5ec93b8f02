#!/usr/bin/env bash
# vmm-api: the VM API as the migration agent uses it, in one process
# (vmm/tests/api-test.c): repeated pause/resume, a state blob in memory
# (corruptions rejected), and a second VM that starts from the blob with
# lazy RAM served by an asynchronous source plus a background push;
# both VMs end with the checksum of an uninterrupted run, every page
# installed exactly once.  Once per userfaultfd back end this kernel has,
# and with kvm-exit where it is there (in a node): its vCPUs wait on the
# page record for installs made by the test's server and pusher threads,
# and a vCPU waiting on a dead source is released by vm_destroy().
# timeout: 600
# needs: kvm
set -u
BIN=${BIN:-build/bin}
GUEST=build/guest/guest.elf
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -x "$BIN/vmm-api-test" ] || fail "$BIN/vmm-api-test not built"
. tests/host/kvm-lib.bash
need_kvm
ran=0
for b in uffd uffd-move kvm-exit; do
	"$BIN/vmm" probe "$b" > /dev/null 2>&1 || { echo "note: no $b back end here"; continue; }
	echo "== back end $b"
	# Its guest's iterations (api-test.c's DEFAULT_ITERS, 1500), fewer in a
	# node (sized, kvm-lib.bash), as tests/node/vmm-api-userfault does.
	"$BIN/vmm-api-test" "$GUEST" "$b" "$(sized 1500)" || fail "vmm-api-test with $b"
	ran=$((ran + 1))
done
[ $ran -gt 0 ] || { echo "skip: no userfaultfd back end on this kernel" >&2; exit 77; }
exit 0
