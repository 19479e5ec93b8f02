# timeout: 300
# The 6.1 tree's own userfaultfd selftest (tools/testing/selftests/vm,
# built by scripts/build-kernel.sh from the patched tree) must pass
# unchanged: the modern ioctl API is not broken by the series.
t=/usr/share/postcopy/uffd-selftest
[ -x "$t" ] || { echo "$t missing: build/kernel/uffd-selftest not in the initramfs"; exit 1; }
cd /tmp || exit 1
"$t" anon 16 4
