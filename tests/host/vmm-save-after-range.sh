#!/usr/bin/env bash
# vmm-save-after-range: --save-after MS (vmm run and vmm restore) takes
# 1..86400000 ms, as --migrate-after does, and refuses anything else as a
# usage error before a VM exists; no KVM needed.  On main (83714ab) any
# 64-bit number was taken: 4294967301 (2^32 + 5) became a 5 ms poll()
# timeout (the int cast of ms_until()), and 18446744073710 wrapped the
# nanosecond deadline, so the VM was saved and stopped at once instead of
# weeks later; here, without KVM, those went on to /dev/kvm (exit 70).
# timeout: 60
. tests/host/plain-lib.bash
[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"

for ms in 4294967301 18446744073710 86400001 0; do
	for cmd in "run --image $tmp/no-image" "restore $tmp/no-snapshot"; do
		# shellcheck disable=SC2086
		"$BIN/vmm" $cmd --save-after "$ms" "$tmp/snap" > /dev/null 2> "$tmp/err"
		rc=$?
		[ $rc -eq 64 ] || { cat "$tmp/err" >&2; fail "vmm ${cmd%% *} --save-after $ms: exit $rc, want 64 (usage)"; }
		grep -q -- "--save-after: '$ms' is not a positive number of milliseconds up to 86400000" "$tmp/err" ||
			{ cat "$tmp/err" >&2; fail "vmm ${cmd%% *} --save-after $ms: no message naming the range"; }
		[ -e "$tmp/snap" ] && fail "vmm ${cmd%% *} --save-after $ms: a snapshot was written"
		echo "ok: vmm ${cmd%% *} --save-after $ms refused: $(head -n1 "$tmp/err")"
	done
done

# The largest value is taken: the run goes on to what fails next (no
# image or snapshot here), not a usage error.
for cmd in "run --image $tmp/no-image" "restore $tmp/no-snapshot"; do
	# shellcheck disable=SC2086
	"$BIN/vmm" $cmd --save-after 86400000 "$tmp/snap" > /dev/null 2> "$tmp/err"
	rc=$?
	if [ $rc -eq 64 ] || [ $rc -eq 0 ]; then
		cat "$tmp/err" >&2
		fail "vmm ${cmd%% *} --save-after 86400000: exit $rc"
	fi
	grep -q -- '--save-after' "$tmp/err" && { cat "$tmp/err" >&2; fail "vmm ${cmd%% *} --save-after 86400000 refused"; }
	echo "ok: vmm ${cmd%% *} --save-after 86400000 taken (then: $(head -n1 "$tmp/err"))"
done
exit 0
