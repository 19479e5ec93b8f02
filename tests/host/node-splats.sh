# node-splats: a node run whose console shows a kernel splat fails, whatever
# the command's exit status, for every kind tests/splat-scan lists.
#  1. tests/splat-scan finds each kind in a real-format console line, and
#     nothing in a clean boot log or in user-space fault reports.
#  2. tests/node-launch fails a run whose command exits 0 after printing
#     those lines through /dev/kmsg (the normal kernel), naming each one.
#  3. Real splats provoked with LKDTM on the debug kernel (build/kernel-debug):
#     WARNING, KASAN use-after-free, soft lockup, RCU stall and hung task in
#     one node; BUG() (kernel BUG at / invalid opcode) and a NULL dereference
#     (a general protection fault under KASAN) each panic their own node.
# The nodes' limits are hang guards: a debug kernel boots slowly under TCG on
# a host whose CPUs are taken (a BUG node took more than 180 s there).
# timeout: 1200
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
# It runs no program of $BIN: the sanitized pass would only repeat the nodes.
case "${BIN:-}" in */san/*)
	echo "node-splats uses no program of BIN=$BIN: checked in the plain pass only" >&2
	exit 77 ;;
esac
work=$(mktemp -d /tmp/node-splats.XXXXXX)
trap 'rm -rf "$work"' EXIT
for f in build/kernel/bzImage build/kernel-debug/bzImage build/initramfs.cpio.gz; do
	[ -r "$f" ] || fail "$f missing: run make kernel guest-image first"
done

# One line of each kind, as the 6.1 kernel prints it on x86.
cat > "$work/splats" <<'EOF'
[   12.345678] BUG: KASAN: use-after-free in lkdtm_READ_AFTER_FREE+0x1c4/0x230
[   12.345678] BUG: kernel NULL pointer dereference, address: 0000000000000000
[   12.345678] BUG: sleeping function called from invalid context at mm/gup.c:1234
[   12.345678] WARNING: CPU: 1 PID: 80 at drivers/misc/lkdtm/bugs.c:88 lkdtm_WARNING+0x9/0x10
[   12.345678] WARNING: possible circular locking dependency detected
[   12.345678] WARNING: possible recursive locking detected
[   12.345678] kernel BUG at mm/huge_memory.c:2095!
[   12.345678] Kernel BUG at __split_huge_pmd+0x1b2/0x1c0 [verbose debug info unavailable]
[   12.345678] invalid opcode: 0000 [#1] PREEMPT SMP KASAN
[   12.345678] Oops: 0002 [#1] PREEMPT SMP KASAN
[   12.345678] general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP
[   12.345678] general protection fault: 0000 [#1] SMP
[   12.345678] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [sh:80]
[   12.345678] rcu: INFO: rcu_sched self-detected stall on CPU
[   12.345678] rcu: INFO: rcu_preempt self-detected stall on CPU
[   12.345678] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[   12.345678] INFO: task sh:80 blocked for more than 120 seconds.
[   12.345678] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[   12.345678] UBSAN: array-index-out-of-bounds in mm/memory.c:42:1
[   12.345678] Kernel panic - not syncing: Fatal exception
[   12.345678] Call Trace:
EOF
cat > "$work/clean" <<'EOF'
[    0.000000] Linux version 6.1.192 (postcopy@postcopy) (gcc (Debian 12.2.0-14) 12.2.0) #1 SMP
[    0.812345] kvm: Nested Virtualization enabled
[    1.234567] traps: madv-userfault[80] general protection fault ip:401234 sp:7ffc0 error:0 in madv-userfault[401000+9000]
[    1.234567] traps: guest[81] trap invalid opcode ip:401234 sp:7ffc0 error:0 in guest[401000+9000]
[    1.234567] madv-userfault[82]: segfault at 7f0000000000 ip 0000000000401234 sp 00007ffc0 error 6
node: up: 6.1.192, 2 cpus, kvm: yes
@@TEST kernel-uffd-selftest PASS 0 31
EOF

# 1. The scanner, line by line.
[ -x tests/splat-scan ] || fail "tests/splat-scan missing"
n=0
while IFS= read -r line; do
	printf '%s\r\n' "$line" | tests/splat-scan > /dev/null || fail "splat-scan missed: $line"
	n=$((n + 1))
done < "$work/splats"
tests/splat-scan "$work/clean" && fail "splat-scan reported a clean log (above)"
echo "scanner: ok ($n kinds found, clean log and user-space faults not reported)"

# 2. node-launch on the normal kernel: the command prints the lines through
# the kernel log (level 2 reaches the console) and exits 0.  (Compressed:
# the command travels on the kernel command line.)
sed 's/^\[[ 0-9.]*\] //; s/^/<2>/' "$work/splats" > "$work/kmsg"
cmd=$(printf 'echo %s | base64 -d | gunzip | while IFS= read -r l; do echo "$l" > /dev/kmsg; done; exit 0' \
	"$(gzip -9 < "$work/kmsg" | base64 -w0)")
tests/node-launch --name splats-kmsg --quiet --timeout 120 --append printk.devkmsg=on -- "$cmd" > "$work/2.out" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$work/2.out"; fail "a node whose console showed splats returned $rc, want 1"; }
while IFS= read -r line; do
	grep -qF -- "${line#<2>}" "$work/2.out" || { cat "$work/2.out"; fail "node-launch did not name: ${line#<2>}"; }
done < "$work/kmsg"
echo "node-launch, normal kernel: ok (exit 0 in the node became 1, each line named)"

# 3. Real splats on the debug kernel, through LKDTM.  The in-node scripts
# travel base64-encoded: the console echoes the command, and its text must
# not be what the scan finds.
innode() { printf 'echo %s | base64 -d | sh' "$(printf '%s\n' "$1" | base64 -w0)"; }
# provoke NAME ERE: write NAME to LKDTM's DIRECT trigger in the background
# (some never return) and wait until the kernel log shows ERE.
lkdtm='d=/sys/kernel/debug/provoke-crash/DIRECT
[ -w $d ] || { echo "no LKDTM in this kernel"; exit 9; }
await() { i=0; until dmesg | grep -qE "$1"; do i=$((i + 1)); [ $i -lt 900 ] || { echo "never saw $1"; exit 9; }; sleep 0.2; done; }
provoke() { echo "$1" > $d & await "$2"; }'
nonfatal="$lkdtm
echo 1 > /proc/sys/kernel/hung_task_timeout_secs
echo 1 > /proc/sys/kernel/watchdog_thresh
provoke WARNING 'WARNING: CPU'
provoke READ_AFTER_FREE 'KASAN: .*use-after-free'
provoke HUNG_TASK 'blocked for more than'
provoke SOFTLOCKUP 'soft lockup'
await 'rcu_(sched|preempt) (self-)?detected stall'
exit 0"
tests/node-launch --name splats-lkdtm --kernel build/kernel-debug/bzImage --quiet --timeout 600 \
	--append "rcupdate.rcu_cpu_stall_timeout=3" -- "$(innode "$nonfatal")" > "$work/3.out" 2>&1
rc=$?
grep -q "no LKDTM\|never saw" build/nodes/splats-lkdtm.log && { cat "$work/3.out"; fail "a splat could not be provoked"; }
[ "$rc" = 1 ] || { cat "$work/3.out"; fail "LKDTM splats in a node that exited 0 gave $rc, want 1"; }
for want in 'WARNING: CPU' 'BUG: KASAN: .*use-after-free' 'blocked for more than' 'BUG: soft lockup' \
	'rcu_(sched|preempt) (self-)?detected stall'; do
	grep -qE -- "$want" "$work/3.out" || { cat "$work/3.out"; fail "node-launch did not name '$want'"; }
done
echo "node-launch, debug kernel, LKDTM WARNING, KASAN, hung task, soft lockup, RCU stall: ok"

# BUG() and a NULL dereference; oops=panic ends the node.  Under KASAN
# inline the NULL dereference is caught as a general protection fault (the
# shadow of address 0 is not canonical), without KASAN it is an Oops.
for kind in BUG:'kernel BUG at.*invalid opcode' \
	EXCEPTION:'general protection fault.*0000 \[#1\]|BUG: kernel NULL pointer dereference.*Oops'; do
	name=${kind%%:*} want=${kind#*:}
	tests/node-launch --name "splats-$name" --kernel build/kernel-debug/bzImage --quiet --timeout 300 \
		-- "$(innode "$lkdtm
echo $name > \$d
exit 0")" > "$work/4.out" 2>&1
	rc=$?
	grep -q "no LKDTM" "build/nodes/splats-$name.log" && fail "no LKDTM in the debug kernel"
	[ "$rc" = 1 ] || { cat "$work/4.out"; fail "LKDTM $name gave $rc, want 1"; }
	tr '\n' ' ' < "$work/4.out" | grep -qE -- "$want" || { cat "$work/4.out"; fail "LKDTM $name: '$want' not named"; }
	echo "node-launch, debug kernel, LKDTM $name: ok"
done
