#!/usr/bin/env bash
# Build the node initramfs: busybox-static, /init, the project's static
# programs (build/node/bin -> /usr/bin), extra files (build/node/extra ->
# /usr/share/postcopy), the kernel's userfaultfd selftest when built, and
# the in-node tests (tests/node/*.sh -> /tests).
#
# Output: build/initramfs.cpio.gz
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
root=build/initramfs
out=build/initramfs.cpio.gz

die() { echo "mkinitramfs: $*" >&2; exit 1; }
is_static() { file -L "$1" 2>/dev/null | grep -q 'statically linked'; }
busybox=/bin/busybox
[ -x "$busybox" ] && is_static "$busybox" ||
	die "a static $busybox is needed: run 'make deps' (package busybox-static)"

rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/share/postcopy,proc,sys,dev,tmp,root,etc,tests,run,var}
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
install -m 0755 guest-image/init "$root/init"
install -m 0755 guest-image/run-node-tests guest-image/must-pass guest-image/wait-listen tests/splat-scan \
	tests/platform-fault "$root/usr/bin/"

count=0
if [ -d build/node/bin ]; then
	for f in build/node/bin/*; do
		[ -f "$f" ] || continue
		is_static "$f" || die "$f is not statically linked"
		install -m 0755 "$f" "$root/usr/bin/"
		count=$((count + 1))
	done
fi
if [ -d build/node/extra ]; then
	cp -a build/node/extra/. "$root/usr/share/postcopy/"
fi
for t in uffd-selftest rap-selftest; do
	if [ -x "build/kernel/$t" ]; then
		install -m 0755 "build/kernel/$t" "$root/usr/share/postcopy/$t"
	fi
done
tests=0
for t in tests/node/*.sh; do
	[ -e "$t" ] || continue
	install -m 0755 "$t" "$root/tests/"
	tests=$((tests + 1))
done
echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) |
	gzip -6 > "$out.tmp"
mv "$out.tmp" "$out"
echo "mkinitramfs: $out: $count programs, $tests in-node tests, $(du -h "$out" | cut -f1)"
