#!/usr/bin/env bash
# vmm-save-restore: a running guest saved with --save-after (state blob +
# RAM), restored with `vmm restore` (and saved again in place, `vmm
# restore S --save-after MS S`, and restored once more), finishes with the
# checksum of an uninterrupted run; a save that fails part-way (a
# file-size limit: EFBIG) says so and leaves the snapshot it restored from
# as it was, with nothing beside it (it once wrote into it with O_TRUNC:
# the VM, stopped after the failure, was lost with its snapshot), and the
# VM runs on to the same checksum (it was stopped until 40fdcf4), the VMM
# then exiting 70; a corrupted or truncated snapshot is rejected with a
# clear message.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

cmd="workload=random ops=50000 iters=$(sized 12000) seed=11 quiet=1"

"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$cmd" > "$tmp/ref.out" 2> "$tmp/ref.err" ||
	{ cat "$tmp/ref.err" >&2; fail "reference run failed"; }
ref=$(port_sum "$tmp/ref.err")
[ -n "$ref" ] || fail "reference run: no checksum"

"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$cmd" --save-after 150 "$tmp/snap1" \
	> "$tmp/s1.out" 2> "$tmp/s1.err" || { cat "$tmp/s1.err" >&2; fail "save run failed"; }
grep -q "saved state and RAM to $tmp/snap1" "$tmp/s1.err" || { cat "$tmp/s1.err" >&2; fail "no snapshot written"; }
grep -q 'guest: done' "$tmp/s1.out" && fail "guest finished before the save: test too short"

# In place, failing: a file-size limit of half the snapshot (ulimit -f:
# KiB), SIGXFSZ ignored so that the write returns EFBIG.
cp "$tmp/snap1" "$tmp/snap2"
size=$(stat -c %s "$tmp/snap2")
(
	trap '' XFSZ
	ulimit -f $((size / 2048))
	exec "$BIN/vmm" restore "$tmp/snap2" --save-after 150 "$tmp/snap2"
) > "$tmp/f.out" 2> "$tmp/f.err"
rc=$?
[ "$rc" = 70 ] || { cat "$tmp/f.err" >&2; fail "a save under a file-size limit of half the snapshot: exit $rc, not 70"; }
grep -q "cannot save to $tmp/snap2: .*; the VM runs on" "$tmp/f.err" || { cat "$tmp/f.err" >&2; fail "failed save: no message"; }
grep -q "no snapshot was written to $tmp/snap2" "$tmp/f.err" || { cat "$tmp/f.err" >&2; fail "failed save: the exit does not say why"; }
cmp -s "$tmp/snap2" "$tmp/snap1" || fail "the failed save changed the snapshot it restored from (now $(stat -c %s "$tmp/snap2") bytes, was $size)"
left=$(find "$tmp" -name 'snap2?*')
[ -z "$left" ] || fail "a partial file was left behind: $left"
got=$(port_sum "$tmp/f.err")
[ "$got" = "$ref" ] || { cat "$tmp/f.err" >&2; fail "after the failed save the VM did not run on to the uninterrupted checksum: $got, not $ref"; }
echo "ok: a failed save in place ($(grep -o 'cannot save.*' "$tmp/f.err")): the snapshot is unchanged, nothing beside it, the VM ran on to checksum $got, exit 70"

# In place, succeeding: the file is replaced whole by the later snapshot.
"$BIN/vmm" restore "$tmp/snap2" --save-after 150 "$tmp/snap2" > "$tmp/s2.out" 2> "$tmp/s2.err" ||
	{ cat "$tmp/s2.err" >&2; fail "restore + second save (in place) failed"; }
grep -q "saved state and RAM to $tmp/snap2" "$tmp/s2.err" || { cat "$tmp/s2.err" >&2; fail "no second snapshot"; }
cmp -s "$tmp/snap2" "$tmp/snap1" && fail "the snapshot saved in place is the old one"

"$BIN/vmm" restore "$tmp/snap2" > "$tmp/r.out" 2> "$tmp/r.err" || { cat "$tmp/r.err" >&2; fail "final restore failed"; }
got=$(port_sum "$tmp/r.err")
[ "$got" = "$ref" ] || fail "restored run checksum $got != uninterrupted $ref"
grep -q "guest: done .*checksum=$ref" "$tmp/r.out" || fail "serial 'done' line missing after restore"
echo "ok: save, restore, save in place, restore: checksum $got equals the uninterrupted run"

# The first snapshot, restored directly, gives the same result too.
"$BIN/vmm" restore "$tmp/snap1" > "$tmp/r1.out" 2> "$tmp/r1.err" ||
	{ cat "$tmp/r1.err" >&2; fail "restore of snap1 failed"; }
[ "$(port_sum "$tmp/r1.err")" = "$ref" ] || fail "snap1 restore checksum differs"
echo "ok: restore of the first snapshot: same checksum"

# Corruption: one byte of the state blob (checksum), a truncated file, garbage.
cp "$tmp/snap1" "$tmp/bad1"
printf '\xff' | dd of="$tmp/bad1" bs=1 seek=200 conv=notrunc status=none
"$BIN/vmm" restore "$tmp/bad1" > /dev/null 2> "$tmp/bad1.err"
rc=$?
[ $rc -ne 0 ] || fail "corrupted snapshot accepted"
grep -q 'not a valid snapshot' "$tmp/bad1.err" || { cat "$tmp/bad1.err" >&2; fail "corrupted: no clear message"; }
head -c 5000 "$tmp/snap1" > "$tmp/bad2"
"$BIN/vmm" restore "$tmp/bad2" > /dev/null 2> "$tmp/bad2.err" && fail "truncated snapshot accepted"
grep -q 'not a valid snapshot' "$tmp/bad2.err" || fail "truncated: no clear message"
head -c 100000 /dev/urandom > "$tmp/bad3"
"$BIN/vmm" restore "$tmp/bad3" > /dev/null 2> "$tmp/bad3.err" && fail "random file accepted"
grep -q 'not a valid snapshot' "$tmp/bad3.err" || fail "garbage: no clear message"
echo "ok: corrupted, truncated and garbage snapshots rejected"
exit 0
