#!/usr/bin/env bash
# guest-ring3: the guest program runs its workload in ring 3 on every boot
# path (our VMM's ELF entry, QEMU's multiboot entry under KVM with the pc
# and microvm machines, and under TCG), and computes the same checksum on
# all of them.  Why it matters: this host's KVM is PVM, which emulates ring 0
# one instruction at a time; a guest left in ring 0 under QEMU-KVM crawls,
# and the benchmark would compare an emulated QEMU guest with a native one.
# No timing is asserted: the guest reports its privilege level (ring=N on
# its start line).
# timeout: 240
# needs: kvm
. tests/host/vmm-lib.bash
have_qemu "the QEMU boot paths (pc and microvm, KVM and TCG)" || qemu=0
qboot=/usr/share/qemu/qboot.rom
[ "${qemu:-1}" = 0 ] || [ -f "$qboot" ] || fail "$qboot missing (qemu-system-x86 package)"

cmd="workload=random mem=2M iters=2 seed=42"
start_ring() { tr -d '\r' < "$1" | sed -n 's/^guest: workload=.* ring=\([0-9]\).*/\1/p' | head -n1; }
done_sum() { tr -d '\r' < "$1" | sed -n 's/^guest: done .*checksum=\(0x[0-9a-f]*\).*/\1/p' | tail -n1; }

"$BIN/vmm" run --mem 16M --image "$GUEST" --cmdline "$cmd" > "$tmp/vmm.out" 2> "$tmp/vmm.err" ||
	{ cat "$tmp/vmm.out" "$tmp/vmm.err" >&2; fail "vmm run failed"; }
ring=$(start_ring "$tmp/vmm.out")
want=$(done_sum "$tmp/vmm.out")
[ "$ring" = 3 ] || fail "our VMM: guest runs in ring '${ring:-?}', want 3"
[ -n "$want" ] || fail "our VMM: no checksum"
echo "ok: vmm (KVM): ring 3, checksum $want"
[ "${qemu:-1}" = 1 ] || exit 0

# name accel machine-options...: -cpu qemu64 because -cpu host/max abort on
# this KVM (IA32_ARCH_CAPABILITIES cannot be set); qboot because SeaBIOS is
# ring-0 code and slow here.  A ring-0 guest under KVM would take minutes:
# the per-run limit ends it, and the ring check says why.
run_qemu() {
	local name=$1 accel=$2 rc
	shift 2
	if [ "$accel" = kvm ] && [ ! -w /dev/kvm ]; then
		echo "note: $name not run: /dev/kvm not writable"
		return
	fi
	timeout "$(guard 100)" qemu-system-x86_64 -accel "$accel" -cpu qemu64 "$@" -display none \
		-serial "file:$tmp/$name.out" -monitor none -no-reboot -m 16 \
		-device isa-debug-exit,iobase=0xf4,iosize=0x04 \
		-kernel "$GUEST" -append "$cmd" > "$tmp/$name.err" 2>&1 < /dev/null
	rc=$?
	ring=$(start_ring "$tmp/$name.out")
	[ "$ring" = 3 ] || fail "$name: guest runs in ring '${ring:-?}', want 3 (QEMU exit $rc)"
	# isa-debug-exit: QEMU exits with (status << 1) | 1, so 1 = guest status 0.
	[ $rc -eq 1 ] || { tail -5 "$tmp/$name.out" "$tmp/$name.err" >&2; fail "$name: QEMU exited $rc"; }
	got=$(done_sum "$tmp/$name.out")
	[ "$got" = "$want" ] || fail "$name: checksum ${got:-none} != our VMM's $want"
	echo "ok: $name: ring 3, checksum $got"
}

run_qemu qemu-kvm-pc kvm -machine pc -bios "$qboot"
run_qemu qemu-kvm-microvm kvm -machine microvm
run_qemu qemu-tcg-pc tcg -machine pc
run_qemu qemu-tcg-microvm tcg -machine microvm
exit 0
