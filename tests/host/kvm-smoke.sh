# kvm-smoke on this machine's own /dev/kvm: a real-mode guest computes and halts.
exec "$BIN/kvm-smoke"
