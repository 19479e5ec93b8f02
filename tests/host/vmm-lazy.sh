#!/usr/bin/env bash
# vmm-lazy: guest RAM served by user-space page faults, with each back end
# this kernel has (uffd = UFFDIO_COPY, uffd-move = UFFDIO_MOVE; in a node on
# the patched kernel also userfault and kvm-exit): a fresh boot whose image
# is faulted in from a staging buffer, and a snapshot restored with RAM
# faulted in from the file (poll and busy-poll fault threads).  Checksums
# must equal the plain runs, and faults must really be served; with
# kvm-exit by the vCPU threads themselves (own=), and a snapshot saved
# from a lazily restored guest (the save ensures every missing page)
# restores to the same checksum.
# timeout: 300
# needs: kvm
. tests/host/vmm-lib.bash

faults() { sed -n 's/^vmm: lazy RAM: backend=\([a-z-]*\).* faults=\([0-9]*\) served=\([0-9]*\).*/\1 \2 \3/p' "$1" | tail -n1; }
own() { sed -n 's/^vmm: lazy RAM: faults served on the faulting thread.* own=\([0-9]*\).*/\1/p' "$1" | tail -n1; }

# kvm-exit: the vCPU threads served the faults (a fault thread serves none there).
check_own() { # backend tag stderr-file
	[ "$1" = kvm-exit ] || return 0
	local n
	n=$(own "$3")
	[ "${n:-0}" -gt 100 ] || { cat "$3" >&2; fail "$2: only ${n:-0} faults served on the faulting thread"; }
	echo "ok: $2: $n faults served on the faulting thread"
}

backends=()
for b in uffd uffd-move userfault kvm-exit; do
	if "$BIN/vmm" probe "$b" > /dev/null 2>&1; then
		backends+=("$b")
	else
		echo "note: back end $b not available on this kernel: $("$BIN/vmm" probe "$b" 2>&1)"
	fi
done
[ ${#backends[@]} -gt 0 ] || { echo "skip: no userfaultfd back end on this kernel" >&2; exit 77; }

boot_cmd="workload=hotset mem=6M iters=3 seed=5"
vmm_guarded 120 run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$boot_cmd" > /dev/null 2> "$tmp/eager.err" ||
	{ cat "$tmp/eager.err" >&2; fail "eager run failed"; }
eager=$(port_sum "$tmp/eager.err")

snap_cmd="workload=random ops=50000 iters=$(sized 300) seed=9 quiet=1"
vmm_guarded 120 run --mem 16M --image "$GUEST" --cmdline "$snap_cmd" > /dev/null 2> "$tmp/ref.err" ||
	{ cat "$tmp/ref.err" >&2; fail "reference run failed"; }
ref=$(port_sum "$tmp/ref.err")
vmm_guarded 120 run --mem 16M --image "$GUEST" --cmdline "$snap_cmd" --save-after 100 "$tmp/snap" \
	> /dev/null 2> "$tmp/save.err" || { cat "$tmp/save.err" >&2; fail "save run failed"; }
grep -q 'saved state and RAM' "$tmp/save.err" || fail "no snapshot"

for b in "${backends[@]}"; do
	for poll in "" --busy-poll; do
		tag="$b${poll:+ $poll}"
		vmm_guarded 120 run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$boot_cmd" --lazy \
			--ram-backend "$b" $poll > /dev/null 2> "$tmp/boot.err" ||
			{ cat "$tmp/boot.err" >&2; fail "$tag: lazy boot failed"; }
		got=$(port_sum "$tmp/boot.err")
		[ "$got" = "$eager" ] || fail "$tag: lazy boot checksum $got != eager $eager"
		read -r name nf ns <<< "$(faults "$tmp/boot.err")"
		[ "$name" = "$b" ] || fail "$tag: back end used was '$name'"
		[ "${ns:-0}" -gt 100 ] || fail "$tag: only ${ns:-0} pages served by faults"
		echo "ok: $tag: lazy boot, checksum $got, $nf faults, $ns pages served"
		check_own "$b" "$tag" "$tmp/boot.err"

		# Both spellings: `restore FILE --lazy` and the issue's `run --lazy-from FILE`.
		if [ -z "$poll" ]; then
			how=(restore "$tmp/snap" --lazy) spelled="restore SNAP --lazy"
		else
			how=(run --lazy-from "$tmp/snap") spelled="run --lazy-from SNAP"
		fi
		vmm_guarded 120 "${how[@]}" --ram-backend "$b" $poll > /dev/null 2> "$tmp/rest.err" ||
			{ cat "$tmp/rest.err" >&2; fail "$tag: lazy restore failed"; }
		got=$(port_sum "$tmp/rest.err")
		[ "$got" = "$ref" ] || fail "$tag: lazy restore checksum $got != uninterrupted $ref"
		read -r name nf ns <<< "$(faults "$tmp/rest.err")"
		[ "${ns:-0}" -gt 100 ] || fail "$tag: only ${ns:-0} pages served on restore"
		echo "ok: $tag: vmm $spelled: checksum $got, $nf faults, $ns pages served"
		check_own "$b" "$tag" "$tmp/rest.err"
	done
done

# kvm-exit: a snapshot saved from a lazily restored guest, while most of
# its pages are still missing: the save reads all of RAM from the main
# thread, which must have each missing page served first (else SIGBUS).
if [[ " ${backends[*]} " == *" kvm-exit "* ]]; then
	vmm_guarded 120 restore "$tmp/snap" --lazy --ram-backend kvm-exit --save-after 20 "$tmp/snap2" \
		> /dev/null 2> "$tmp/resave.err" || { cat "$tmp/resave.err" >&2; fail "kvm-exit: save of a lazy restore failed"; }
	if grep -q 'saved state and RAM' "$tmp/resave.err"; then
		vmm_guarded 120 restore "$tmp/snap2" > /dev/null 2> "$tmp/resave2.err" ||
			{ cat "$tmp/resave2.err" >&2; fail "kvm-exit: restore of the second snapshot failed"; }
		got=$(port_sum "$tmp/resave2.err")
		[ "$got" = "$ref" ] || fail "kvm-exit: snapshot of a lazy restore: checksum $got != uninterrupted $ref"
		echo "ok: kvm-exit: snapshot saved from a lazy restore ($(grep -o 'own=[0-9]*' "$tmp/resave.err"), $(grep -o 'present=[0-9/]*' "$tmp/resave.err")), restored: checksum $got"
	else
		echo "note: kvm-exit: the restored guest finished within 20 ms: no second snapshot"
	fi
fi
exit 0
