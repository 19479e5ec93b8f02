#!/usr/bin/env bash
# Build the patched node kernel: linux-source-6.1 + kernel-patches/series +
# tinyconfig with kernel-patches/config.
#
# The result is cached outside the clone, keyed by the hash of everything
# that determines it (source tarball, series, patches, config fragment and
# this script), so an unchanged rebuild takes seconds on any clone.
#
# Output: build/kernel/bzImage, build/kernel/config and build/kernel/uffd-selftest
# (the tree's own userfaultfd selftest, static, for the nodes).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

tarball=/usr/src/linux-source-6.1.tar.xz
# Overridable for the harness's own tests (tests/host/harness.sh).
patches=${POSTCOPY_PATCHES:-kernel-patches}
out=${POSTCOPY_KERNEL_OUT:-build/kernel}
src=$out/src
cache_root=${POSTCOPY_KERNEL_CACHE:-/var/cache/postcopy-kernel}
jobs=${JOBS:-$(nproc)}

die() { echo "build-kernel: $*" >&2; exit 1; }
step() { echo "build-kernel: $*"; }

[ -r "$tarball" ] || die "$tarball missing: run 'make deps' (package linux-source-6.1)"
[ -f "$patches/series" ] || die "$patches/series missing"
[ -f "$patches/config" ] || die "$patches/config missing"

# Patches named in the series, in order; blank lines and # comments skipped.
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series")
for p in "${series[@]}"; do
	[ -f "$patches/$p" ] || die "series names $p but $patches/$p does not exist"
done

key=$( {
	stat -c '%s %Y' "$tarball"
	cat "$patches/series" "$patches/config" "$0"
	for p in "${series[@]}"; do cat "$patches/$p"; done
} | sha256sum | cut -c1-16)
cache=$cache_root/$key

mkdir -p "$out"
if [ -f "$cache/bzImage" ] && [ -f "$cache/uffd-selftest" ]; then
	cp "$cache/bzImage" "$cache/config" "$cache/uffd-selftest" "$out/"
	echo "$key" > "$out/key"
	step "cached kernel $key (${#series[@]} patches), nothing to build"
	exit 0
fi

step "key $key not cached: extracting $(basename "$tarball")"
rm -rf "$src" "$out/linux-source-6.1"
tar -xJf "$tarball" -C "$out"
mv "$out/linux-source-6.1" "$src"

for p in "${series[@]}"; do
	step "applying $p"
	if ! patch -d "$src" -p1 --forward --batch --quiet < "$patches/$p" > "$out/patch.log" 2>&1; then
		cat "$out/patch.log" >&2
		die "patch $p does not apply to linux-source-6.1 (see above)"
	fi
done

step "configuring: tinyconfig + $patches/config"
make -C "$src" -s tinyconfig > "$out/config.log" 2>&1 || { cat "$out/config.log" >&2; die "tinyconfig failed"; }
"$src/scripts/kconfig/merge_config.sh" -m -O "$src" "$src/.config" "$patches/config" >> "$out/config.log" 2>&1 ||
	{ cat "$out/config.log" >&2; die "merge_config failed"; }
make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1 || { cat "$out/config.log" >&2; die "olddefconfig failed"; }

# Every option the fragment asks for must have survived dependency resolution.
missing=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=n) opt=${line%%=*}; grep -q "^$opt=" "$src/.config" && { echo "  $opt is set, fragment wants it off" >&2; missing=1; } ;;
	CONFIG_*=*) grep -qx "$line" "$src/.config" || { echo "  $line did not take (dependency missing?)" >&2; missing=1; } ;;
	esac
done < "$patches/config"
[ "$missing" = 0 ] || die "config fragment $patches/config not satisfied (see above)"

export CCACHE_DIR=${CCACHE_DIR:-$cache_root/ccache}
export CCACHE_BASEDIR=$top/$src
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
mkdir -p "$CCACHE_DIR"
cc="gcc"
command -v ccache > /dev/null && cc="ccache gcc"

step "building bzImage with make -j$jobs (a few minutes the first time; log: $out/build.log)"
start=$(date +%s)
if ! make -C "$src" -j"$jobs" CC="$cc" KBUILD_BUILD_TIMESTAMP=postcopy \
	KBUILD_BUILD_USER=postcopy KBUILD_BUILD_HOST=postcopy bzImage > "$out/build.log" 2>&1; then
	grep -E 'error|Error' "$out/build.log" | head -40 >&2
	die "kernel build failed (full log: $out/build.log)"
fi
step "built in $(( $(date +%s) - start ))s"

# The tree's own userfaultfd selftest, built against the patched uapi
# headers: it must still pass in a node, proving the modern API unchanged.
# (Its Makefile refuses 'make userfaultfd' by design, so build it directly.)
step "building the 6.1 userfaultfd selftest"
make -C "$src" -s headers > "$out/headers.log" 2>&1 || { cat "$out/headers.log" >&2; die "make headers failed"; }
(cd "$src/tools/testing/selftests/vm" &&
	gcc -static -O2 -I../../../../usr/include -o userfaultfd userfaultfd.c vm_util.c -lpthread) \
	> "$out/selftest.log" 2>&1 || { cat "$out/selftest.log" >&2; die "userfaultfd selftest build failed"; }

cp "$src/arch/x86/boot/bzImage" "$out/bzImage"
cp "$src/.config" "$out/config"
cp "$src/tools/testing/selftests/vm/userfaultfd" "$out/uffd-selftest"
echo "$key" > "$out/key"
mkdir -p "$cache.tmp.$$"
cp "$out/bzImage" "$out/config" "$out/uffd-selftest" "$cache.tmp.$$/"
rm -rf "$cache" && mv "$cache.tmp.$$" "$cache"
step "cached as $cache"
