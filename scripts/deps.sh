#!/usr/bin/env bash
# Install every Debian package the project needs; quick when all are there.
set -euo pipefail

packages=(
	# build
	build-essential make gcc clang llvm libclang-rt-14-dev pkg-config
	liburing-dev libzstd-dev libvirt-dev libjson-c-dev
	# kernel
	linux-source-6.1 flex bison bc libelf-dev libssl-dev cpio ccache xz-utils
	kmod patch file
	# nodes and networking
	qemu-system-x86 busybox-static iproute2
	# bench and tools
	libvirt-daemon-system libvirt-clients gnuplot-nox jq python3 clang-format openssl
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all ${#packages[@]} packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q > /dev/null || { echo "deps: apt-get update failed" >&2; exit 1; }
apt-get install -y -q --no-install-recommends "${missing[@]}" > /tmp/postcopy-deps.log 2>&1 || {
	tail -20 /tmp/postcopy-deps.log >&2
	echo "deps: apt-get install failed (log above, full: /tmp/postcopy-deps.log)" >&2
	exit 1
}
echo "deps: installed ${#missing[@]} packages"
