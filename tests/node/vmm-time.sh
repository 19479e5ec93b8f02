#!/bin/sh
# vmm-time: inside a node on the 6.1-based patched kernel, nested KVM: a
# guest saved and restored at once keeps its time.  Linux 6.1 drops a
# restored IA32_TSC that lands within a second of the young destination
# VM's own count (its vCPU-synchronisation heuristic), so without the VMM's
# read-back-and-offset fix the guest sees its TSC go back and exits 5.
# The guest runs by TSC deadline (secs=), so a restored run ends on its own.
# timeout: 240
GUEST=/usr/share/postcopy/guest.elf
tmp=/tmp/vmm-time
rm -rf "$tmp"
mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -c /dev/kvm ] || fail "no /dev/kvm in this node"
cmd="workload=random mem=1M secs=3 quiet=1"
vmm run --mem 8M --image "$GUEST" --cmdline "$cmd" --save-after 400 "$tmp/snap" \
	> "$tmp/save.out" 2> "$tmp/save.err" || { cat "$tmp/save.err" >&2; fail "save run failed"; }
grep -q "saved state and RAM" "$tmp/save.err" || fail "no snapshot written"
grep -q 'guest: done' "$tmp/save.out" && fail "guest finished before the save"

vmm restore "$tmp/snap" > "$tmp/rest.out" 2> "$tmp/rest.err"
rc=$?
cat "$tmp/rest.out"
grep -q 'TSC went backwards' "$tmp/rest.out" && fail "the restored guest saw its TSC go back"
[ $rc = 0 ] || { cat "$tmp/rest.err" >&2; fail "restore exited $rc"; }
grep -q 'guest: done' "$tmp/rest.out" || fail "the restored guest did not finish"
echo "ok: restored at once, the guest's TSC never went back"
