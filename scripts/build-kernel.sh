#!/usr/bin/env bash
# Build the patched node kernel: linux-source-6.1 + kernel-patches/series +
# tinyconfig with kernel-patches/config.
#
#   scripts/build-kernel.sh [normal|debug]
#
# Two flavours from the same series: "normal" (the default) and "debug",
# which adds kernel-patches/config-debug (DEBUG_VM, KASAN, lockdep, ...).
#
# The result is cached outside the clone, keyed by the hash of everything
# that determines it (source tarball, series, patches, config fragment and
# this script), so an unchanged rebuild takes seconds on any clone.
#
# Output: build/kernel/bzImage, build/kernel/config, build/kernel/uffd-selftest
# and build/kernel/rap-selftest (the tree's own vm selftests, static, for the
# nodes); the debug
# flavour writes the same files into build/kernel-debug/.
set -euo pipefail

flavour=${1:-normal}
case "$flavour" in
normal | debug) ;;
*) echo "build-kernel: unknown flavour '$flavour' (normal or debug)" >&2; exit 2 ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

tarball=/usr/src/linux-source-6.1.tar.xz
# Overridable for the harness's own tests (tests/host/harness.sh).
patches=${POSTCOPY_PATCHES:-kernel-patches}
default_out=build/kernel
[ "$flavour" = debug ] && default_out=build/kernel-debug
out=${POSTCOPY_KERNEL_OUT:-$default_out}
src=$out/src
cache_root=${POSTCOPY_KERNEL_CACHE:-/var/cache/postcopy-kernel}
jobs=${JOBS:-$(nproc)}

die() { echo "build-kernel: $*" >&2; exit 1; }
step() { echo "build-kernel: $*"; }

[ -r "$tarball" ] || die "$tarball missing: run 'make deps' (package linux-source-6.1)"
[ -f "$patches/series" ] || die "$patches/series missing"
# The config fragments of this flavour, merged in this order.
fragments=("$patches/config")
[ "$flavour" = debug ] && fragments+=("$patches/config-debug")
for f in "${fragments[@]}"; do
	[ -f "$f" ] || die "$f missing"
done

# Patches named in the series, in order; blank lines and # comments skipped.
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series")
for p in "${series[@]}"; do
	[ -f "$patches/$p" ] || die "series names $p but $patches/$p does not exist"
done

key=$( {
	stat -c '%s %Y' "$tarball"
	echo "$flavour"
	cat "$patches/series" "${fragments[@]}" "$0"
	for p in "${series[@]}"; do cat "$patches/$p"; done
} | sha256sum | cut -c1-16)
cache=$cache_root/$key

mkdir -p "$out"
rm -f "$out"/{bzImage,config,key,uffd-selftest,rap-selftest}
# A complete cache entry lists its files in "artifacts", written last.
if [ -f "$cache/artifacts" ]; then
	while read -r a; do cp "$cache/$a" "$out/"; done < "$cache/artifacts"
	echo "$key" > "$out/key"
	step "cached $flavour kernel $key (${#series[@]} patches), nothing to build"
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

step "configuring: tinyconfig + ${fragments[*]}"
make -C "$src" -s tinyconfig > "$out/config.log" 2>&1 || { cat "$out/config.log" >&2; die "tinyconfig failed"; }
"$src/scripts/kconfig/merge_config.sh" -m -O "$src" "$src/.config" "${fragments[@]}" >> "$out/config.log" 2>&1 ||
	{ cat "$out/config.log" >&2; die "merge_config failed"; }
make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1 || { cat "$out/config.log" >&2; die "olddefconfig failed"; }

# Every option the fragments ask for must have survived dependency resolution.
missing=0
for f in "${fragments[@]}"; do
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=n) opt=${line%%=*}; grep -q "^$opt=" "$src/.config" && { echo "  $opt is set, $f wants it off" >&2; missing=1; } ;;
		CONFIG_*=*) grep -qx "$line" "$src/.config" || { echo "  $line ($f) did not take (dependency missing?)" >&2; missing=1; } ;;
		esac
	done < "$f"
done
[ "$missing" = 0 ] || die "config fragments ${fragments[*]} not satisfied (see above)"

export CCACHE_DIR=${CCACHE_DIR:-$cache_root/ccache}
export CCACHE_BASEDIR=$top/$src
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
mkdir -p "$CCACHE_DIR"
cc="gcc"
command -v ccache > /dev/null && cc="ccache gcc"

step "building the $flavour bzImage with make -j$jobs (a few minutes the first time; log: $out/build.log)"
start=$(date +%s)
if ! make -C "$src" -j"$jobs" CC="$cc" KBUILD_BUILD_TIMESTAMP=postcopy \
	KBUILD_BUILD_USER=postcopy KBUILD_BUILD_HOST=postcopy bzImage > "$out/build.log" 2>&1; then
	grep -E 'error|Error' "$out/build.log" | head -40 >&2
	die "kernel build failed (full log: $out/build.log)"
fi
step "built in $(( $(date +%s) - start ))s"

# The tree's own vm selftests, static, built against the patched uapi
# headers: userfaultfd (it must still pass in a node, proving the modern API
# unchanged) and, when the series adds it, remap_anon_pages.  (The vm
# Makefile refuses 'make userfaultfd' by design, so build them directly.)
step "building the vm selftests"
make -C "$src" -s headers > "$out/headers.log" 2>&1 || { cat "$out/headers.log" >&2; die "make headers failed"; }
artifacts=(bzImage config)
vm=$src/tools/testing/selftests/vm
for t in userfaultfd:uffd-selftest remap_anon_pages:rap-selftest; do
	name=${t%%:*} dest=${t#*:}
	[ -f "$vm/$name.c" ] || continue
	(cd "$vm" && gcc -static -O2 -I../../../../usr/include -o "$name" "$name.c" vm_util.c -lpthread) \
		> "$out/selftest.log" 2>&1 || { cat "$out/selftest.log" >&2; die "selftest $name build failed"; }
	cp "$vm/$name" "$out/$dest"
	artifacts+=("$dest")
done

cp "$src/arch/x86/boot/bzImage" "$out/bzImage"
cp "$src/.config" "$out/config"
echo "$key" > "$out/key"
mkdir -p "$cache.tmp.$$"
for a in "${artifacts[@]}"; do cp "$out/$a" "$cache.tmp.$$/"; done
printf '%s\n' "${artifacts[@]}" > "$cache.tmp.$$/artifacts"
rm -rf "$cache" && mv "$cache.tmp.$$" "$cache"
step "cached as $cache"
