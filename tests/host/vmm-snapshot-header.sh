#!/usr/bin/env bash
# vmm-snapshot-header: a snapshot's header is checked before anything is
# used, without KVM (the checks come before the VM is created).  A
# minimal snapshot (tests/host/lib/snapshot-edit.py new: a valid header
# and state blob, RAM all holes) passes them; the same snapshot whose
# ram_offset + ram_size wraps past 2^64 to the file's size is refused as
# "not a valid snapshot".  On main (83714ab) it passed: the file-size check
# summed the two in 64 bits, so `vmm restore` created the VM and then read
# guest RAM at an offset past 2^63 (pread: EINVAL), and `--lazy` started
# the guest and failed at its first page fault.
# timeout: 60
. tests/host/plain-lib.bash
[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"
edit() { python3 tests/host/lib/snapshot-edit.py "$@" || fail "snapshot-edit.py $*"; }

mem=$((2 << 20))
edit "$tmp/good" new $mem

# The control: the file's form is accepted, whatever comes next (no KVM
# here, or a state without sections there).
"$BIN/vmm" restore "$tmp/good" > /dev/null 2> "$tmp/good.err"
grep -q 'not a valid snapshot' "$tmp/good.err" &&
	{ cat "$tmp/good.err" >&2; fail "the minimal snapshot was refused: the test's forgery is wrong"; }
echo "ok: minimal snapshot passes the header checks ($(head -n1 "$tmp/good.err"))"

# ram_offset + ram_size = 2^64 + the file's size (4096: header and blob).
cp "$tmp/good" "$tmp/wrap"
edit "$tmp/wrap" header ram_offset $((4096 - mem))
truncate -s 4096 "$tmp/wrap" || fail "truncate"
for lazy in "" --lazy; do
	# shellcheck disable=SC2086
	"$BIN/vmm" restore "$tmp/wrap" $lazy > "$tmp/wrap.out" 2> "$tmp/wrap.err"
	rc=$?
	[ $rc -ne 0 ] || fail "restore $lazy: a wrapping header was accepted and the guest ran"
	grep -q 'not a valid snapshot' "$tmp/wrap.err" ||
		{ cat "$tmp/wrap.err" >&2; fail "restore $lazy: ram_offset + ram_size wrapping past 2^64 not refused as an invalid snapshot"; }
	echo "ok: restore $lazy: wrapping ram_offset refused: $(head -n1 "$tmp/wrap.err")"
done
exit 0
