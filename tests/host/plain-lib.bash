# The set-up every vmm host test shares (sourced, not run: tests/run runs
# *.sh): set -u, BIN, a scratch directory $tmp removed at exit, and
# fail().  The tests that need no KVM source it alone; vmm-lib.bash
# sources it for the rest.
set -u
BIN=${BIN:-build/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
