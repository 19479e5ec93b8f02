# Shared set-up of the vmm host tests (sourced, not run: tests/run runs *.sh).
# Gives BIN, GUEST, a scratch directory $tmp removed at exit, fail(), and
# port_sum FILE: the checksum of the guest's last report, from the VMM's
# exit line in FILE.  Needs $BIN/vmm and /dev/kvm (skips without it).
set -u
BIN=${BIN:-build/bin}
GUEST=build/guest/guest.elf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"
[ -f "$GUEST" ] || fail "$GUEST not built"
[ -c /dev/kvm ] || { echo "skip: no /dev/kvm here" >&2; exit 77; }

port_sum() { sed -n 's/^vmm: guest exited with status 0; .* last: done .*checksum=\(0x[0-9a-f]*\).*/\1/p' "$1" | tail -n1; }
