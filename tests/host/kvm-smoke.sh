# kvm-smoke on this machine's own /dev/kvm: a real-mode guest computes and halts.
# needs: kvm
. tests/host/kvm-lib.bash
need_kvm
exec "$BIN/kvm-smoke"
