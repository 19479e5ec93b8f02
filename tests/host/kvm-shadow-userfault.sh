# kvm-shadow-userfault: kvm-userfault's accesses to missing MADV_USERFAULT
# guest RAM again, in a node whose KVM uses shadow paging (kvm_amd.npt=0),
# on the normal and the debug kernel: guest page tables in a missing page
# give no KVM_EXIT_MEMORY_FAULT but a #PF injected into the guest (a triple
# fault here, KVM_EXIT_SHUTDOWN); an emulated access still exits
# KVM_EXIT_MMIO and a kvmclock update is still skipped
# (docs/kernel-interfaces.md, "KVM guests").  The TDP case is in the node
# tests (tests/node/kernel-kvm-userfault.sh).
# timeout: 600
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
# It runs no program of $BIN: the sanitized pass would only repeat the nodes.
case "${BIN:-}" in */san/*)
	echo "kvm-shadow-userfault uses no program of BIN=$BIN: checked in the plain pass only" >&2
	exit 77 ;;
esac
for f in build/kernel/bzImage build/kernel-debug/bzImage build/initramfs.cpio.gz; do
	[ -r "$f" ] || fail "$f missing: run make kernel guest-image first"
done
for k in kernel kernel-debug; do
	log=build/nodes/kvm-shadow-$k.log
	tests/node-launch --name "kvm-shadow-$k" --kernel "build/$k/bzImage" --timeout 280 --quiet \
		--append kvm_amd.npt=0 -- \
		'[ "$(cat /sys/module/kvm_amd/parameters/npt)" = N ] || { echo "npt still on"; exit 1; }; kvm-userfault other' ||
		{ tail -n 30 "$log"; fail "kvm-userfault other on $k with shadow paging"; }
	grep -q "page tables, shadow paging: 0 memory faults, guest shut down" "$log" ||
		{ tail -n 30 "$log"; fail "$k: the shadow-paging case did not run"; }
	echo "$k: shadow paging: $(grep -o 'kvm-userfault: all [0-9]* checks passed' "$log")"
done
