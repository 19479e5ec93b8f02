#!/usr/bin/env bash
# vmm-lazy: guest RAM served by user-space page faults, with each back end
# this kernel has (uffd = UFFDIO_COPY, uffd-move = UFFDIO_MOVE): a fresh boot
# whose image is faulted in from a staging buffer, and a snapshot restored
# with RAM faulted in from the file (poll and busy-poll fault threads).
# Checksums must equal the plain runs, and faults must really be served.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

faults() { sed -n 's/^vmm: lazy RAM: backend=\([a-z-]*\).* faults=\([0-9]*\) served=\([0-9]*\).*/\1 \2 \3/p' "$1" | tail -n1; }

backends=()
for b in uffd uffd-move; do
	if "$BIN/vmm" probe "$b" > /dev/null 2>&1; then
		backends+=("$b")
	else
		echo "note: back end $b not available on this kernel: $("$BIN/vmm" probe "$b" 2>&1)"
	fi
done
[ ${#backends[@]} -gt 0 ] || { echo "skip: no userfaultfd back end on this kernel" >&2; exit 77; }

boot_cmd="workload=hotset mem=6M iters=3 seed=5"
"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$boot_cmd" > /dev/null 2> "$tmp/eager.err" ||
	fail "eager run failed"
eager=$(port_sum "$tmp/eager.err")

snap_cmd="workload=random ops=50000 iters=$(sized 300) seed=9 quiet=1"
"$BIN/vmm" run --mem 16M --image "$GUEST" --cmdline "$snap_cmd" > /dev/null 2> "$tmp/ref.err" ||
	fail "reference run failed"
ref=$(port_sum "$tmp/ref.err")
"$BIN/vmm" run --mem 16M --image "$GUEST" --cmdline "$snap_cmd" --save-after 100 "$tmp/snap" \
	> /dev/null 2> "$tmp/save.err" || fail "save run failed"
grep -q 'saved state and RAM' "$tmp/save.err" || fail "no snapshot"

for b in "${backends[@]}"; do
	for poll in "" --busy-poll; do
		tag="$b${poll:+ $poll}"
		"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$boot_cmd" --lazy \
			--ram-backend "$b" $poll > /dev/null 2> "$tmp/boot.err" ||
			{ cat "$tmp/boot.err" >&2; fail "$tag: lazy boot failed"; }
		got=$(port_sum "$tmp/boot.err")
		[ "$got" = "$eager" ] || fail "$tag: lazy boot checksum $got != eager $eager"
		read -r name nf ns <<< "$(faults "$tmp/boot.err")"
		[ "$name" = "$b" ] || fail "$tag: back end used was '$name'"
		[ "${ns:-0}" -gt 100 ] || fail "$tag: only ${ns:-0} pages served by faults"
		echo "ok: $tag: lazy boot, checksum $got, $nf faults, $ns pages served"

		# Both spellings: `restore FILE --lazy` and the issue's `run --lazy-from FILE`.
		if [ -z "$poll" ]; then
			how=(restore "$tmp/snap" --lazy) spelled="restore SNAP --lazy"
		else
			how=(run --lazy-from "$tmp/snap") spelled="run --lazy-from SNAP"
		fi
		"$BIN/vmm" "${how[@]}" --ram-backend "$b" $poll > /dev/null 2> "$tmp/rest.err" ||
			{ cat "$tmp/rest.err" >&2; fail "$tag: lazy restore failed"; }
		got=$(port_sum "$tmp/rest.err")
		[ "$got" = "$ref" ] || fail "$tag: lazy restore checksum $got != uninterrupted $ref"
		read -r name nf ns <<< "$(faults "$tmp/rest.err")"
		[ "${ns:-0}" -gt 100 ] || fail "$tag: only ${ns:-0} pages served on restore"
		echo "ok: $tag: vmm $spelled: checksum $got, $nf faults, $ns pages served"
	done
done
exit 0
