#!/usr/bin/env bash
# Check that the kernel series is bisectable: every prefix of
# kernel-patches/series applies to linux-source-6.1 and builds a bzImage
# with the normal node config (tinyconfig + kernel-patches/config), and
# the vm selftests the series adds build against its uapi headers.
#
#   scripts/check-series.sh [FRAGMENT...]
#
# FRAGMENTs are extra config fragments merged after kernel-patches/config
# (e.g. kernel-patches/config-debug).  One tree in build/check-series/ is
# built incrementally, patch after patch, with ccache, so a run costs about
# one kernel build plus a few minutes per patch.  Not part of make test:
# run it before sending or merging a change to the series.
#
# Exit status 0 if every step built; otherwise 1, naming the first patch
# after which the tree does not build (its log is kept).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tarball=/usr/src/linux-source-6.1.tar.xz
patches=kernel-patches
out=build/check-series
src=$out/src
jobs=${JOBS:-$(nproc)}

die() { echo "check-series: $*" >&2; exit 1; }
step() { echo "check-series: $*"; }

[ -r "$tarball" ] || die "$tarball missing: run 'make deps'"
fragments=("$patches/config" "$@")
for f in "${fragments[@]}"; do [ -f "$f" ] || die "$f missing"; done
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series")

export CCACHE_DIR=${CCACHE_DIR:-${POSTCOPY_KERNEL_CACHE:-/var/cache/postcopy-kernel}/ccache}
export CCACHE_BASEDIR=$top/$src
cc=gcc
command -v ccache > /dev/null && cc="ccache gcc"

# build LABEL: bzImage (and headers + the series' selftests) of the tree as it is.
build() {
	local log=$out/$1.log
	if ! make -C "$src" -j"$jobs" CC="$cc" bzImage > "$log" 2>&1; then
		grep -E 'error|Error' "$log" | head -20 >&2
		die "the tree does not build after $1 (log: $log)"
	fi
	make -C "$src" -s headers >> "$log" 2>&1 || die "make headers failed after $1 (log: $log)"
	if [ -f "$src/tools/testing/selftests/vm/remap_anon_pages.c" ]; then
		(cd "$src/tools/testing/selftests/vm" &&
			gcc -static -O2 -Wall -I../../../../usr/include -o remap_anon_pages \
				remap_anon_pages.c vm_util.c) >> "$log" 2>&1 ||
			die "the remap_anon_pages selftest does not build after $1 (log: $log)"
	fi
	step "$1: builds"
}

step "extracting $(basename "$tarball") into $src"
rm -rf "$out"
mkdir -p "$out"
tar -xJf "$tarball" -C "$out"
mv "$out/linux-source-6.1" "$src"
make -C "$src" -s tinyconfig > "$out/config.log" 2>&1
"$src/scripts/kconfig/merge_config.sh" -m -O "$src" "$src/.config" "${fragments[@]}" >> "$out/config.log" 2>&1
make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1
build base

for p in "${series[@]}"; do
	[ -f "$patches/$p" ] || die "series names $p but $patches/$p does not exist"
	patch -d "$src" -p1 --forward --batch --quiet < "$patches/$p" > "$out/patch.log" 2>&1 ||
		{ cat "$out/patch.log" >&2; die "$p does not apply on top of the patches before it"; }
	# A patch may add Kconfig symbols: keep the config complete.
	make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1
	build "$p"
done
step "all ${#series[@]} patches build one by one"
