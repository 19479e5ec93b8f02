#!/bin/sh
# vmm-lazy-userfault: inside a node on the patched kernel, nested KVM: a
# guest whose RAM is served by the `userfault` back end (MADV_USERFAULT,
# the article's userfaultfd protocol, remap_anon_pages) boots and finishes
# with the checksum of a plain run; so does a snapshot restored lazily.
# The stock `uffd` back end is checked the same way when the kernel has it.
# VMM_LAZY_BACKEND=uffd runs the whole test with another back end (debug).
# timeout: 240
GUEST=/usr/share/postcopy/guest.elf
tmp=/tmp/vmm-lazy-userfault
rm -rf "$tmp"
mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -c /dev/kvm ] || { echo "FAIL: no /dev/kvm in this node" >&2; exit 1; }
[ -f "$GUEST" ] || fail "$GUEST missing from the initramfs"
command -v vmm > /dev/null || fail "vmm missing from the initramfs"
BACKEND=${VMM_LAZY_BACKEND:-userfault}
# Nested KVM itself must work first (the project's smallest guest).
if ! timeout 60 kvm-smoke > "$tmp/smoke" 2>&1; then
	fail "nested KVM does not run a guest in this node (kvm-smoke: $(tail -n1 "$tmp/smoke"))"
fi
vmm probe
if ! vmm probe "$BACKEND" > /dev/null 2>&1; then
	fail "the patched kernel lacks the $BACKEND back end ($(vmm probe "$BACKEND" 2>&1))"
fi

port_sum() { sed -n 's/^vmm: guest exited with status 0; .* last: done .*checksum=\(0x[0-9a-f]*\).*/\1/p' "$1" | tail -n1; }
served() { sed -n 's/^vmm: lazy RAM: backend=\([a-z-]*\).* served=\([0-9]*\).*/\1 \2/p' "$1" | tail -n1; }

cmd="workload=seq mem=1M iters=2 seed=4"
timeout 60 vmm run --mem 4M --image "$GUEST" --cmdline "$cmd" > "$tmp/eager.out" 2> "$tmp/eager.err" ||
	{ cat "$tmp/eager.err" >&2; fail "eager run failed"; }
eager=$(port_sum "$tmp/eager.err")
[ -n "$eager" ] || fail "eager run: no checksum"
echo "eager: checksum $eager"

check_lazy() { # backend
	timeout 60 vmm run --mem 4M --image "$GUEST" --cmdline "$cmd" --lazy --ram-backend "$1" \
		> "$tmp/$1.out" 2> "$tmp/$1.err" || { cat "$tmp/$1.err" >&2; fail "$1: lazy run failed"; }
	got=$(port_sum "$tmp/$1.err")
	set -- $(served "$tmp/$1.err") "$1"
	[ "$1" = "$3" ] || fail "$3: back end used was '$1'"
	[ "$got" = "$eager" ] || fail "$3: lazy checksum $got != eager $eager"
	[ "${2:-0}" -gt 50 ] || fail "$3: only ${2:-0} pages served by faults"
	echo "ok: $3: lazy boot, checksum $got, $2 pages served"
}
check_lazy "$BACKEND"
if [ "$BACKEND" != uffd ] && vmm probe uffd > /dev/null 2>&1; then
	check_lazy uffd
fi

# Snapshot mid-run (half way through the reference run's time), then
# restore with RAM faulted in through the back end.
uptime_ms() { read -r up _ < /proc/uptime; echo $(( ${up%.*} * 1000 + 10#${up#*.} * 10 )); }
long="workload=random mem=1M ops=20000 iters=400 seed=8 quiet=1"
t0=$(uptime_ms)
timeout 60 vmm run --mem 4M --image "$GUEST" --cmdline "$long" > /dev/null 2> "$tmp/ref.err" || fail "reference run failed"
half=$(( ($(uptime_ms) - t0) / 2 ))
[ "$half" -ge 1 ] || half=1
ref=$(port_sum "$tmp/ref.err")
# A run may be faster than the reference (the node's load varies): if the
# guest finished before the snapshot, try again sooner.
for try in 1 2 3 4 5 6; do
	timeout 60 vmm run --mem 4M --image "$GUEST" --cmdline "$long" --save-after "$half" "$tmp/snap" \
		> "$tmp/s.out" 2> "$tmp/s.err" || fail "save run failed"
	grep -q 'saved state and RAM' "$tmp/s.err" && break
	echo "the guest finished within $half ms (try $try): snapshot sooner"
	half=$((half / 4 + 1))
done
grep -q 'saved state and RAM' "$tmp/s.err" || fail "the guest finished within $half ms: no snapshot taken"
timeout 60 vmm restore "$tmp/snap" --lazy --ram-backend "$BACKEND" > /dev/null 2> "$tmp/r.err" ||
	{ cat "$tmp/r.err" >&2; fail "lazy restore failed"; }
got=$(port_sum "$tmp/r.err")
[ "$got" = "$ref" ] || fail "lazy restore checksum $got != uninterrupted $ref"
echo "ok: $BACKEND: lazy restore of a snapshot taken after $half ms, checksum $got, $(served "$tmp/r.err")"
rm -rf "$tmp"
exit 0
