#!/usr/bin/env bash
# Check that the kernel series is bisectable: every prefix of
# kernel-patches/series applies to linux-source-6.1 and builds a bzImage
# with the normal node config (tinyconfig + kernel-patches/config), and
# the vm selftests the series adds build against its uapi headers.
#
#   scripts/check-series.sh [--from PATCH] [FRAGMENT...]
#
# --from PATCH (a file name of the series, or its number, e.g. 0005)
# applies the patches before it all at once and builds that tree as the
# first step, then goes on one patch at a time from PATCH: a cheaper
# check of the later patches when the earlier ones were checked already.
#
# FRAGMENTs are extra config fragments merged after kernel-patches/config
# (e.g. kernel-patches/config-debug, or kernel-patches/config-modular:
# KVM as modules, as distributions build it).  Every option a fragment
# sets must survive dependency resolution, or the check fails before
# building.  When the config has CONFIG_MODULES=y, each step also builds
# "modules", so modpost runs: a module calling something the series adds
# to the core kernel without an export fails the step.
#
# One tree per set of fragments (build/check-series/, or
# build/check-series-FRAGMENT.../) is built incrementally, patch after
# patch, with ccache, so a run costs about one kernel build plus a few
# minutes per patch (more for patches that change widely included
# headers).  Not part of make test: run it, in the node config and in the
# modular one, before sending or merging a change to the series.
#
# Exit status 0 if every step built; otherwise 1, naming the first patch
# after which the tree does not build (its log is kept).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tarball=/usr/src/linux-source-6.1.tar.xz
patches=kernel-patches
jobs=${JOBS:-$(nproc)}

die() { echo "check-series: $*" >&2; exit 1; }
step() { echo "check-series: $*"; }

[ -r "$tarball" ] || die "$tarball missing: run 'make deps'"
from=
if [ "${1:-}" = --from ]; then
	[ $# -ge 2 ] || die "--from needs a patch"
	from=$2
	shift 2
fi
fragments=("$patches/config" "$@")
out=build/check-series
for f in "$@"; do out+=-$(basename "$f"); done
src=$out/src
for f in "${fragments[@]}"; do [ -f "$f" ] || die "$f missing"; done
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series")
# The patches applied before the first build (all of them before --from).
first=0
if [ -n "$from" ]; then
	while [ "$first" -lt ${#series[@]} ] && [ "${series[$first]}" != "$from" ] &&
		[ "${series[$first]%%-*}" != "$from" ]; do
		first=$((first + 1))
	done
	[ "$first" -lt ${#series[@]} ] || die "--from $from: no such patch in $patches/series"
fi

export CCACHE_DIR=${CCACHE_DIR:-${POSTCOPY_KERNEL_CACHE:-/var/cache/postcopy-kernel}/ccache}
export CCACHE_BASEDIR=$top/$src
cc=gcc
command -v ccache > /dev/null && cc="ccache gcc"

# build LABEL: bzImage, the modules if the config has them (modpost), and
# headers + the series' selftests, of the tree as it is.
build() {
	local log=$out/$1.log targets=(bzImage)
	grep -q '^CONFIG_MODULES=y' "$src/.config" && targets+=(modules)
	if ! make -C "$src" -j"$jobs" CC="$cc" "${targets[@]}" > "$log" 2>&1; then
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
	step "$1: builds (${targets[*]})"
}

step "extracting $(basename "$tarball") into $src"
rm -rf "$out"
mkdir -p "$out"
tar -xJf "$tarball" -C "$out"
mv "$out/linux-source-6.1" "$src"
make -C "$src" -s tinyconfig > "$out/config.log" 2>&1
"$src/scripts/kconfig/merge_config.sh" -m -O "$src" "$src/.config" "${fragments[@]}" >> "$out/config.log" 2>&1
make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1
# Every option the fragments ask for must have survived dependency
# resolution (as in build-kernel.sh): a modular check whose KVM=m did not
# take would build KVM in and prove nothing.
# A later fragment overrides an earlier one (config-modular's KVM=m over
# config's KVM=y), so only the last value of each option is checked.
declare -A want=() origin=()
for f in "${fragments[@]}"; do
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=*) want[${line%%=*}]=$line origin[${line%%=*}]=$f ;;
		esac
	done < "$f"
done
missing=0
for opt in "${!want[@]}"; do
	line=${want[$opt]}
	case "$line" in
	*=n) grep -q "^$opt=" "$src/.config" && { echo "  $opt is set, ${origin[$opt]} wants it off" >&2; missing=1; } ;;
	*) grep -qx "$line" "$src/.config" || { echo "  $line (${origin[$opt]}) did not take (dependency missing?)" >&2; missing=1; } ;;
	esac
done
[ "$missing" = 0 ] || die "config fragments ${fragments[*]} not satisfied (see above)"
step "config: tinyconfig + ${fragments[*]}"
if [ "$first" = 0 ]; then build base; fi

apply() {
	[ -f "$patches/$1" ] || die "series names $1 but $patches/$1 does not exist"
	patch -d "$src" -p1 --forward --batch --quiet < "$patches/$1" > "$out/patch.log" 2>&1 ||
		{ cat "$out/patch.log" >&2; die "$1 does not apply on top of the patches before it"; }
	# A patch may add Kconfig symbols: keep the config complete.
	make -C "$src" -s olddefconfig >> "$out/config.log" 2>&1
}

for ((i = 0; i < ${#series[@]}; i++)); do
	p=${series[$i]}
	apply "$p"
	if [ "$i" -lt "$first" ]; then
		if [ "$i" = $((first - 1)) ]; then build "upto-$p"; fi
		continue
	fi
	build "$p"
done
if [ "$first" = 0 ]; then
	step "all ${#series[@]} patches build one by one (tinyconfig + ${fragments[*]})"
else
	step "patches ${series[$first]} to the last ($(( ${#series[@]} - first )) of ${#series[@]}) build one by one on top of the ones before (tinyconfig + ${fragments[*]})"
fi
