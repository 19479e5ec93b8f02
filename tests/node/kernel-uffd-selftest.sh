# timeout: 300
# The 6.1 tree's own userfaultfd selftest (tools/testing/selftests/vm,
# built by scripts/build-kernel.sh from the patched tree) must pass
# unchanged: the modern ioctl API is not broken by the series.  As the
# tree's run_vmtests.sh runs it: anonymous memory through userfaultfd(2)
# and through /dev/userfaultfd, and shmem, 16 bounces each so that every
# combination of the bounce modes (random, racing faults, verify, poll) runs;
# 4 MiB instead of run_vmtests.sh's 20 keeps it to about a minute under TCG
# (20 MiB took 336 s on the normal kernel).
t=/usr/share/postcopy/uffd-selftest
[ -x "$t" ] || { echo "$t missing: build/kernel/uffd-selftest not in the initramfs"; exit 1; }
[ -c /dev/userfaultfd ] || { echo "no /dev/userfaultfd in the node"; exit 1; }
cd /tmp || exit 1
for mem in anon anon:dev shmem; do
	echo "== userfaultfd $mem 4 16"
	"$t" "$mem" 4 16 > /tmp/uffd-selftest.out 2>&1
	rc=$?
	tail -n 3 /tmp/uffd-selftest.out
	[ "$rc" = 0 ] || { cat /tmp/uffd-selftest.out; echo "userfaultfd $mem failed: exit $rc"; exit 1; }
done
