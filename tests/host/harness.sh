# harness: the build and node harness fail clearly instead of hanging or
# passing: a command's exit status comes back from the node; a node that
# hangs is killed at its time limit; a node whose kernel panics is reported
# as such; a patch that does not apply stops the kernel build naming it.
# (The broken-patch case extracts the whole kernel tarball: minutes on a
# busy machine, hence the limit.)
# timeout: 600
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d /tmp/harness.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -r build/kernel/bzImage ] && [ -r build/initramfs.cpio.gz ] || fail "run make kernel guest-image first"

# 1. The in-node command's status is the launcher's status.
tests/node-launch --name harness-status --quiet --timeout 60 -- 'echo hello from the node; exit 3' > "$work/1.out" 2>&1
rc=$?
[ "$rc" = 3 ] || { cat "$work/1.out"; fail "exit status 3 in the node came back as $rc"; }
grep -q "hello from the node" build/nodes/harness-status.log || fail "the command's output is not in the console log"
echo "status: ok (3 came back)"

# 2. A node that never ends is killed at its limit, with a message.
start=$(date +%s)
tests/node-launch --name harness-hang --quiet --timeout 15 -- 'sleep 1000' > "$work/2.out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
[ "$rc" = 1 ] || fail "a hanging node gave status $rc, want 1"
grep -q "timed out after 15s" "$work/2.out" || { cat "$work/2.out"; fail "no time-out message"; }
[ "$secs" -lt 40 ] || fail "the hanging node took ${secs}s to be stopped"
echo "hang: ok (killed after ${secs}s)"

# 3. A kernel panic (no init to run) is reported as one.
tests/node-launch --name harness-panic --quiet --timeout 60 --append "rdinit=/no/such/init init=/no/such/init" -- 'true' > "$work/3.out" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "a panicking node gave status $rc, want 1"
grep -q "kernel trouble in the node: .*Kernel panic" "$work/3.out" || { cat "$work/3.out"; fail "the panic was not named"; }
echo "panic: ok"

# 4. A patch that does not apply stops the build and is named.
mkdir -p "$work/patches"
cp kernel-patches/config "$work/patches/config"
cat > "$work/patches/0001-broken.patch" <<'PATCH'
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] broken on purpose

--- a/mm/gup.c
+++ b/mm/gup.c
@@ -1,3 +1,3 @@
-this line is not in mm/gup.c
+nor is this one
 at all
PATCH
echo "0001-broken.patch" > "$work/patches/series"
POSTCOPY_PATCHES=$work/patches POSTCOPY_KERNEL_OUT=$work/kernel POSTCOPY_KERNEL_CACHE=$work/cache \
	scripts/build-kernel.sh > "$work/4.out" 2>&1
rc=$?
[ "$rc" != 0 ] || fail "the kernel build accepted a broken patch"
grep -q "patch 0001-broken.patch does not apply" "$work/4.out" || { cat "$work/4.out"; fail "the broken patch was not named"; }
[ ! -e "$work/kernel/bzImage" ] || fail "a bzImage was produced anyway"
echo "broken patch: ok"

# 5. A series naming a missing patch is refused before anything is extracted.
echo "0002-missing.patch" >> "$work/patches/series"
POSTCOPY_PATCHES=$work/patches POSTCOPY_KERNEL_OUT=$work/kernel2 POSTCOPY_KERNEL_CACHE=$work/cache \
	scripts/build-kernel.sh > "$work/5.out" 2>&1 && fail "a series naming a missing patch was accepted"
grep -q "series names 0002-missing.patch but .* does not exist" "$work/5.out" || { cat "$work/5.out"; fail "the missing patch was not named"; }
echo "missing patch: ok"
