#!/usr/bin/env bash
# Build the host-tests overlay of the node initramfs: what tests/host/*.sh
# need to run inside a QEMU node when this machine has no usable /dev/kvm
# (tests/run, "host tests in a node").  The kernel unpacks concatenated
# cpio archives in order, so the result is the normal initramfs followed by
# this overlay:
#
#   /usr/local/bin/         bash, GNU coreutils/grep/sed/gawk/findutils,
#                           jq, ss, openssl, setpriv, ps ... (this machine's
#                           dynamic binaries) with their shared libraries
#                           at the same paths, and the dynamic loader
#   /usr/bin/python3.11     with the part of its standard library the
#   /usr/lib/python3.11/    tests' Python imports (socket, ssl, json, ...)
#   /hosttree/              tests/host (with lib/), scripts/make-tls-creds.sh,
#                           docs/security.md, build/guest/guest.elf: the
#                           paths the host tests use, relative to the tree
#   /usr/local/bin/node     with build/npm's packages under /hosttree, when
#                           scripts/npm-deps.sh installed them
#   /etc/passwd, /etc/group root and nobody (vmm-control-socket acts as
#                           another user)
#
# The node flavour of the programs (static, build/node/bin) is already in
# /usr/bin of the base initramfs: the tests run there with BIN=/usr/bin.
#
# Output: build/initramfs-host.cpio.gz (base + overlay).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
base=build/initramfs.cpio.gz
root=build/initramfs-host-overlay
out=build/initramfs-host.cpio.gz
die() { echo "mkhostoverlay: $*" >&2; exit 1; }
[ -r "$base" ] || die "$base missing: run 'make guest-image'"
[ -r build/guest/guest.elf ] || die "build/guest/guest.elf missing: run 'make'"

rm -rf "$root"
mkdir -p "$root"/{usr/local/bin,usr/bin,etc,hosttree/build/guest,hosttree/scripts,hosttree/docs}

# A dynamic binary and every library it needs, at the paths ldd reports.
copy_libs() { # binary
	local lib
	for lib in $(ldd "$1" 2> /dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^\s*\(\/[^ ]*\) (.*/\1/p'); do
		[ -e "$root$lib" ] && continue
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}
add_tool() { # name (from PATH, pyenv shims aside)
	local p
	p=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin type -P "$1") || die "$1 is not installed here"
	p=$(readlink -f "$p")
	cp -L "$p" "$root/usr/local/bin/$1"
	copy_libs "$p"
}

# What the host tests call besides the project's programs.  GNU versions,
# not busybox: the tests are written against them (bash, sed -n with \|,
# date +%s%N, stat -c, ss -H ...).
tools="bash env timeout seq mktemp date sed grep egrep awk gawk cut tr sort uniq head tail wc
	cat cp mv rm ln mkdir rmdir ls stat chmod chown touch sleep od dd cmp diff truncate tee
	printf basename dirname readlink realpath find xargs nproc id whoami kill ps pgrep pkill
	jq ss openssl setpriv unshare base64 sha256sum md5sum cksum xxd expr true false test
	yes split fold nl comm join paste du df sync getconf"
for t in $tools; do
	if PATH=/usr/sbin:/usr/bin:/sbin:/bin type -P "$t" > /dev/null; then
		add_tool "$t"
	else
		echo "mkhostoverlay: note: $t not installed here, not in the overlay" >&2
	fi
done

# Python: the interpreter at its own path (it finds its library from there)
# and the modules the tests' Python code imports, found by importing them.
py=/usr/bin/python3.11
[ -x "$py" ] || die "$py missing (package python3.11-minimal)"
cp -L "$py" "$root/usr/bin/python3.11"
ln -sf python3.11 "$root/usr/bin/python3"
ln -sf /usr/bin/python3.11 "$root/usr/local/bin/python3"
# Scripts' interpreters: #!/usr/bin/env bash, #!/bin/bash.
ln -sf /usr/local/bin/env "$root/usr/bin/env"
ln -sf /usr/local/bin/bash "$root/usr/bin/bash"
copy_libs "$py"
"$py" - "$root" > /dev/null << 'PY'
import os, shutil, subprocess, sys
root = sys.argv[1]
mods = ("socket ssl sys argparse os struct threading time json select errno signal "
        "hashlib hmac base64 binascii random secrets subprocess tempfile shutil "
        "traceback io re collections functools itertools string codecs encodings ast "
        "copy weakref contextlib enum types warnings dataclasses textwrap "
        "encodings.utf_8 encodings.latin_1 encodings.ascii encodings.aliases site")
for m in mods.split():
    __import__(m)
files = set()
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None)
    if f and f.startswith(sys.prefix):
        files.add(f)
        if os.path.basename(f) == "__init__.py":
            d = os.path.dirname(f)
            for n in os.listdir(d):
                if n.endswith(".py"):
                    files.add(os.path.join(d, n))
# os.py is Python's landmark for finding its prefix.
files.add(os.__file__)
for f in sorted(files):
    dst = root + f
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(f, dst)
    if f.endswith(".so"):
        print(f)
PY
# The extension modules' own libraries (libssl, libcrypto, ...).
for so in $(find "$root/usr/lib/python3.11" -name '*.so'); do
	copy_libs "${so#"$root"}"
done

# openssl's configuration (openssl req needs it: scripts/make-tls-creds.sh).
mkdir -p "$root/usr/lib/ssl" "$root/etc/ssl"
cp -L /usr/lib/ssl/openssl.cnf "$root/etc/ssl/openssl.cnf"
ln -sf /etc/ssl/openssl.cnf "$root/usr/lib/ssl/openssl.cnf"

# Node.js and the npm packages of scripts/npm-deps.sh (build/npm), for the
# test that drives the VMM with a QMP client this project did not write
# (vmm-qmp-thirdparty): both when both are there; else that test skips.
if [ -f build/npm/node_modules/qemu-qmp/package.json ] &&
	PATH=/usr/sbin:/usr/bin:/sbin:/bin type -P node > /dev/null; then
	add_tool node
	mkdir -p "$root/hosttree/build/npm"
	cp -a build/npm/node_modules "$root/hosttree/build/npm/"
fi

# /bin is busybox's in the base initramfs; bash beside it.
mkdir -p "$root/bin"
ln -sf /usr/local/bin/bash "$root/bin/bash"

# The dynamic loader at the path the binaries name.
for ld in /lib64/ld-linux-x86-64.so.2; do
	mkdir -p "$root$(dirname "$ld")"
	cp -L "$ld" "$root$ld"
done

# The tree the host tests expect under their working directory.
mkdir -p "$root/hosttree/tests"
cp -a tests/host "$root/hosttree/tests/host"
cp scripts/make-tls-creds.sh "$root/hosttree/scripts/"
cp docs/security.md "$root/hosttree/docs/"
ln -sf /usr/share/postcopy/guest.elf "$root/hosttree/build/guest/guest.elf"
ln -sf /usr/bin "$root/hosttree/build/node-bin"

printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "nobody:x:65534:65534:nobody:/nonexistent:/bin/false" > "$root/etc/passwd"
printf '%s\n' "root:x:0:" "nogroup:x:65534:" > "$root/etc/group"

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) |
	gzip -6 > "$out.tmp"
cat "$base" "$out.tmp" > "$out.tmp2"
rm -f "$out.tmp"
mv "$out.tmp2" "$out"
echo "mkhostoverlay: $out: base $(du -h "$base" | cut -f1) + overlay $(du -sh "$root" | cut -f1) unpacked"
