# timeout: 900
# The 6.1 tree's own userfaultfd selftest (tools/testing/selftests/vm,
# built by scripts/build-kernel.sh from the patched tree) must pass
# unchanged: the modern ioctl API is not broken by the series.  As the
# tree's run_vmtests.sh runs it, through userfaultfd(2) and through
# /dev/userfaultfd (":dev"): anonymous memory and shmem with 16 bounces
# (every combination of the bounce modes: random, racing faults, verify,
# poll), private hugetlb and shared hugetlbfs with 32.  Sizes are smaller
# than run_vmtests.sh's to keep it to minutes under TCG (its 20 MiB anon run
# took 336 s): 4 MiB for anon and shmem; for hugetlb, as run_vmtests.sh
# sizes it, one huge page per CPU for each of the source and destination
# areas (the selftest needs at least that), from huge pages reserved here
# and given back at the end, with one spare per CPU: when a hugetlb
# UFFDIO_COPY's read of its source faults, 6.1 retries the copy through a
# temporary huge page taken outside the reservations
# (hugetlb_mcopy_atomic_pte(), alloc_huge_page_vma()), and with no page
# spare that copy fails with ENOMEM.  Under load (CI beside two busy CPUs,
# 2026-12-07) that failed "hugetlb 4 32" at its first bounce.
t=/usr/share/postcopy/uffd-selftest
[ -x "$t" ] || { echo "$t missing: build/kernel/uffd-selftest not in the initramfs"; exit 1; }
[ -c /dev/userfaultfd ] || { echo "no /dev/userfaultfd in the node"; exit 1; }
cd /tmp || exit 1

hpage_mb=$(awk '/^Hugepagesize:/ { print $2 / 1024 }' /proc/meminfo)
[ -n "$hpage_mb" ] || { echo "no Hugepagesize in /proc/meminfo: CONFIG_HUGETLBFS missing"; exit 1; }
half_mb=$(( $(nproc) * hpage_mb ))
need=$(( 2 * half_mb / hpage_mb + $(nproc) ))
echo "$need" > /proc/sys/vm/nr_hugepages
got=$(cat /proc/sys/vm/nr_hugepages)
[ "$got" -ge "$need" ] || { echo "reserved $got huge pages of the $need needed"; exit 1; }
mnt=/tmp/hugetlbfs
mkdir -p "$mnt" && mount -t hugetlbfs none "$mnt" || { echo "cannot mount hugetlbfs"; exit 1; }

run() {
	echo "== userfaultfd $*"
	"$t" "$@" > /tmp/uffd-selftest.out 2>&1
	rc=$?
	tail -n 3 /tmp/uffd-selftest.out
	[ "$rc" = 0 ] || { cat /tmp/uffd-selftest.out; echo "userfaultfd $* failed: exit $rc"; exit 1; }
}
for mod in "" ":dev"; do
	run "anon$mod" 4 16
	run "hugetlb$mod" "$half_mb" 32
	run "hugetlb_shared$mod" "$half_mb" 32 "$mnt/uffd-test"
	rm -f "$mnt/uffd-test"
done
run shmem 4 16
umount "$mnt"
echo 0 > /proc/sys/vm/nr_hugepages
