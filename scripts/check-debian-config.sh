#!/usr/bin/env bash
# Check the kernel series against Debian's own amd64 configuration
# (package linux-config-6.1: config.amd64_none_amd64), for the files the
# series touches: the whole series applies to linux-source-6.1, the tree
# configures with Debian's config, every C file the series changes that
# the config builds compiles to its object, and every function those
# objects define that a module object among them calls is exported (what
# modpost would refuse when linking kvm.ko: Debian builds KVM as a module).
#
#   scripts/check-debian-config.sh
#
# A whole Debian kernel takes hours on two CPUs; this builds "prepare" and
# about a dozen objects (minutes).  It does not link vmlinux or modules:
# objtool, BTF and module signing are not exercised.  Not part of make test;
# run it before merging a change to the series (docs/testing.md).
#
# Exit status 0 if everything above holds, 1 otherwise (its log is kept in
# build/check-debian/).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tarball=/usr/src/linux-source-6.1.tar.xz
config_xz=/usr/src/linux-config-6.1/config.amd64_none_amd64.xz
patches=kernel-patches
out=build/check-debian
src=$out/src
jobs=${JOBS:-$(nproc)}

die() { echo "check-debian-config: $*" >&2; exit 1; }
step() { echo "check-debian-config: $*"; }

[ -r "$tarball" ] || die "$tarball missing: run 'make deps'"
if [ ! -r "$config_xz" ]; then
	[ "$(id -u)" = 0 ] || die "$config_xz missing: apt-get install linux-config-6.1"
	step "installing linux-config-6.1"
	apt-get install -y -qq linux-config-6.1 > /dev/null || die "apt-get install linux-config-6.1 failed"
fi
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series")

# check_exports OBJ...: every global symbol one of the core (built-in)
# objects defines and one of kvm.ko's objects uses must have an
# EXPORT_SYMBOL (a __ksymtab_ entry) in its object.  kvm.ko's objects are
# those of arch/x86/kvm/ and virt/kvm/ (arch/x86/kvm/Makefile links
# virt/kvm/kvm_main.o and its siblings into kvm.ko); symbols defined among
# them need no export.
check_exports() {
	local o core=() mods=() bad=0 sym def
	for o in "$@"; do
		case "$o" in
		arch/x86/kvm/* | virt/kvm/*) mods+=("$o") ;;
		*) core+=("$o") ;;
		esac
	done
	[ ${#mods[@]} -gt 0 ] || die "no kvm.ko object among ${*}: KVM should be a module"
	step "kvm.ko objects: ${mods[*]}"
	(cd "$src" && nm -u "${mods[@]}") | awk 'NF == 2 { print $2 }' | sort -u > "$out/module-undefined"
	(cd "$src" && nm --defined-only "${mods[@]}") | awk 'NF == 3 { print $3 }' | sort -u > "$out/module-defined"
	for def in "${core[@]}"; do
		(cd "$src" && nm "$def") > "$out/nm.txt"
		for sym in $(awk '$2 ~ /^[TDRB]$/ { print $3 }' "$out/nm.txt" | sort -u |
			comm -12 - "$out/module-undefined" | comm -23 - "$out/module-defined"); do
			if grep -q " __ksymtab_$sym\$" "$out/nm.txt"; then
				step "$sym ($def): called from kvm.ko, exported"
			else
				echo "  $sym is defined in $def and called from kvm.ko, but not exported" >&2
				bad=1
			fi
		done
	done
	[ "$bad" = 0 ] || die "unexported symbols: modpost would fail to link the module"
}

configure_and_prepare() {
	# Debian's config names its signing keys and wants BTF; neither matters for
	# compiling objects, and both would need files this tree does not have.
	xz -dc "$config_xz" > "$src/.config"
	"$src/scripts/config" --file "$src/.config" --set-str SYSTEM_TRUSTED_KEYS "" \
		--set-str SYSTEM_REVOCATION_KEYS "" --disable MODULE_SIG_ALL --disable DEBUG_INFO_BTF
	make -C "$src" -s olddefconfig > "$out/config.log" 2>&1 || die "olddefconfig failed (log: $out/config.log)"
	for opt in CONFIG_KVM=m CONFIG_USERFAULTFD=y CONFIG_TRANSPARENT_HUGEPAGE=y CONFIG_HUGETLBFS=y; do
		grep -qx "$opt" "$src/.config" || die "Debian's config should have $opt; it has $(grep "^${opt%%=*}=" "$src/.config" || echo none)"
	done
	step "config: Debian amd64 ($(grep -c '=m$' "$src/.config") modules), KVM=m"

	step "make prepare (log: $out/prepare.log)"
	make -C "$src" -j"$jobs" prepare > "$out/prepare.log" 2>&1 || die "make prepare failed (log: $out/prepare.log)"
	echo "$key" > "$out/key"
}

# A tree prepared for exactly this series and Debian config is reused
# (after "make prepare" it records the key): make then rebuilds only what
# changed.
key=$(cat "$patches/series" "${series[@]/#/$patches/}" "$config_xz" | sha256sum | cut -c1-16)
if [ -f "$out/key" ] && [ "$(cat "$out/key")" = "$key" ]; then
	step "reusing $src (same series and Debian config: $key)"
else
	step "extracting $(basename "$tarball") and applying ${#series[@]} patches"
	rm -rf "$out"
	mkdir -p "$out"
	tar -xJf "$tarball" -C "$out"
	mv "$out/linux-source-6.1" "$src"
	for p in "${series[@]}"; do
		patch -d "$src" -p1 --forward --batch --quiet < "$patches/$p" > "$out/patch.log" 2>&1 ||
			{ cat "$out/patch.log" >&2; die "$p does not apply"; }
	done
	configure_and_prepare
fi

# The C files the series touches.  kbuild compiles a single target even
# when the config does not link it (mm/gup_test.c: Debian has no
# CONFIG_GUP_TEST), which is what is wanted here: every changed file must
# compile in this config.
mapfile -t cfiles < <(for p in "${series[@]}"; do
	sed -n 's|^diff --git a/\([^ ]*\.c\) .*|\1|p' "$patches/$p"
done | grep -v '^tools/' | sort -u)
objs=()
for c in "${cfiles[@]}"; do
	o=${c%.c}.o
	log=$out/${o//\//_}.log
	if ! make -C "$src" -j"$jobs" "$o" > "$log" 2>&1; then
		grep -E 'error|warning' "$log" | head -20 >&2
		die "$c does not compile with Debian's config (log: $log)"
	fi
	# A reused tree rebuilds nothing, so an object that warned must not stay.
	if grep -q 'warning:' "$log"; then
		grep 'warning:' "$log" >&2
		rm -f "$src/$o"
		die "$c compiles with warnings (log: $log)"
	fi
	objs+=("$o")
	step "$c: compiles"
done
check_exports "${objs[@]}"
step "the series applies, configures and compiles with Debian's amd64 config; every call from a module into what it touches is exported"
