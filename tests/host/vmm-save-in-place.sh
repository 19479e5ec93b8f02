#!/usr/bin/env bash
# vmm-save-in-place: a save that fails part-way (here a file-size limit:
# EFBIG) says so and leaves FILE as it was, with no partial file beside
# it, even when FILE is the snapshot being restored (`vmm restore S
# --save-after MS S`, a checkpoint in place); a save that succeeds there
# replaces it whole.  On main (83714ab) the save opened FILE with
# O_TRUNC and wrote into it: the failed save left a truncated, partial
# file, and the VM, stopped after the failure, was lost with it.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

cmd="workload=random ops=50000 iters=$(sized 12000) seed=11 quiet=1"
"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$cmd" > "$tmp/ref.out" 2> "$tmp/ref.err" ||
	{ cat "$tmp/ref.err" >&2; fail "reference run failed"; }
ref=$(port_sum "$tmp/ref.err")
[ -n "$ref" ] || fail "reference run: no checksum"

save_snapshot "$cmd"
cp "$tmp/snap" "$tmp/orig"
size=$(stat -c %s "$tmp/snap")

# A file-size limit of half the snapshot (ulimit -f: KiB), SIGXFSZ
# ignored so that the write returns EFBIG.
(
	trap '' XFSZ
	ulimit -f $((size / 2048))
	exec "$BIN/vmm" restore "$tmp/snap" --save-after 150 "$tmp/snap"
) > "$tmp/f.out" 2> "$tmp/f.err"
rc=$?
grep -q 'guest: done' "$tmp/f.out" && fail "the guest finished before the save: test too short"
[ $rc -ne 0 ] || { cat "$tmp/f.err" >&2; fail "the save succeeded under a file-size limit of half the snapshot"; }
grep -q "cannot save to $tmp/snap" "$tmp/f.err" || { cat "$tmp/f.err" >&2; fail "failed save: no message"; }
cmp -s "$tmp/snap" "$tmp/orig" || fail "the failed save changed the snapshot it restored from (now $(stat -c %s "$tmp/snap") bytes, was $size)"
left=$(find "$tmp" -name 'snap?*')
[ -z "$left" ] || fail "a partial file was left behind: $left"
echo "ok: failed save ($(grep -o 'cannot save.*' "$tmp/f.err")): the snapshot is unchanged, nothing left beside it"

# In place, successfully: the file is replaced by the later snapshot.
"$BIN/vmm" restore "$tmp/snap" --save-after 150 "$tmp/snap" > "$tmp/p.out" 2> "$tmp/p.err" ||
	{ cat "$tmp/p.err" >&2; fail "restore + save in place failed"; }
grep -q "saved state and RAM to $tmp/snap" "$tmp/p.err" || { cat "$tmp/p.err" >&2; fail "no snapshot saved in place"; }
cmp -s "$tmp/snap" "$tmp/orig" && fail "the snapshot saved in place is the old one"
"$BIN/vmm" restore "$tmp/snap" > "$tmp/r.out" 2> "$tmp/r.err" || { cat "$tmp/r.err" >&2; fail "restore of the snapshot saved in place failed"; }
got=$(port_sum "$tmp/r.err")
[ "$got" = "$ref" ] || fail "restored checksum $got != uninterrupted $ref"
echo "ok: saved in place and restored: checksum $got equals the uninterrupted run"
exit 0
