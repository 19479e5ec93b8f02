#!/usr/bin/env bash
# The npm packages the tests use, into build/npm (never committed):
# qemu-qmp, a QMP client this project did not write (tests/host/vmm-qmp-
# thirdparty.sh), and its one dependency chain, at pinned versions.  Quick
# when they are there.  Without node/npm or the registry it says so and
# exits 0: the test that needs them then skips, naming why.
set -uo pipefail
cd "$(dirname "$0")/.."
pkgs=(qemu-qmp@0.5.0 split@1.0.1 through@2.3.8)
dir=build/npm
if [ -f "$dir/node_modules/qemu-qmp/package.json" ] && [ -f "$dir/node_modules/split/package.json" ]; then
	echo "npm-deps: ${pkgs[*]} present"
	exit 0
fi
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
	echo "npm-deps: warning: node or npm missing: the third-party QMP client test will skip" >&2
	exit 0
fi
mkdir -p "$dir"
if timeout 300 npm install --prefix "$dir" --no-save --no-audit --no-fund --no-package-lock \
	"${pkgs[@]}" > "$dir/install.log" 2>&1; then
	echo "npm-deps: installed ${pkgs[*]} into $dir"
else
	tail -5 "$dir/install.log" >&2
	echo "npm-deps: warning: npm install failed (log: $dir/install.log): the third-party QMP client test will skip" >&2
fi
exit 0
