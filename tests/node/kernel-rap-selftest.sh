# timeout: 60
# The series' own kselftest, tools/testing/selftests/vm/remap_anon_pages
# (added by kernel-patches/), built from the patched tree by
# scripts/build-kernel.sh: MADV_USERFAULT and remap_anon_pages().
t=/usr/share/postcopy/rap-selftest
[ -x "$t" ] || { echo "$t missing: build/kernel/rap-selftest not in the initramfs"; exit 1; }
"$t"
