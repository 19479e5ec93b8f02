# Shared set-up of the vmm host tests (sourced, not run: tests/run runs *.sh).
# Gives BIN, GUEST, a scratch directory $tmp removed at exit, fail(),
# port_sum FILE: the checksum of the guest's last report, from the VMM's
# exit line in FILE, and save_snapshot, forge and refused (below).  Needs
# $BIN/vmm and KVM (need_kvm, tests/host/kvm-lib.bash: skips without it,
# and tests/run then runs the test in a node).
. tests/host/plain-lib.bash
. tests/host/kvm-lib.bash
GUEST=build/guest/guest.elf

[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"
[ -f "$GUEST" ] || fail "$GUEST not built"
need_kvm

# $BIN/vmm ARGS under a hang guard of SECONDS (scaled: guard): SIGTERM
# then, which the VMM answers by stopping with its vCPUs' report (state,
# stack, KVM's counters: what tests/platform-fault reads), and SIGKILL 10 s
# later; exit 124 for a hang.  A run in a test's foreground otherwise met
# only the runner's limit, which prints nothing of it (CI, vmm-lazy: a
# kvm-exit lazy boot ran into the node's 600 s and said nothing).
vmm_guarded() { # seconds args...
	local secs
	secs=$(guard "$1")
	shift
	timeout -k 10 "$secs" "$BIN/vmm" "$@"
}

port_sum() { sed -n 's/^vmm: guest exited with status 0; .* last: done .*checksum=\(0x[0-9a-f]*\).*/\1/p' "$1" | tail -n1; }

# A 2-vCPU, 16 MiB guest running CMDLINE saved mid-run (--save-after 300)
# to $tmp/snap; fails unless the snapshot was written before the guest
# finished.  Its output: $tmp/s.out and $tmp/s.err.
save_snapshot() { # cmdline
	"$BIN/vmm" run --mem 16M --vcpus 2 --image "$GUEST" --cmdline "$1" --save-after 300 "$tmp/snap" \
		> "$tmp/s.out" 2> "$tmp/s.err" || { cat "$tmp/s.err" >&2; fail "save run failed"; }
	grep -q "saved state and RAM to $tmp/snap" "$tmp/s.err" || { cat "$tmp/s.err" >&2; fail "no snapshot"; }
	grep -q 'guest: done' "$tmp/s.out" && fail "guest finished before the save: test too short"
	return 0
}

# $tmp/NAME: a copy of $tmp/snap changed by tests/host/lib/snapshot-edit.py
# (OP and its arguments).
forge() { # name snapshot-edit-op args...
	local name=$1
	shift
	cp "$tmp/snap" "$tmp/$name"
	python3 tests/host/lib/snapshot-edit.py "$tmp/$name" "$@" || fail "$name: cannot forge"
}

# vmm restore refuses $tmp/NAME with a message matching MESSAGE, before the
# guest runs.
refused() { # name expected-message
	"$BIN/vmm" restore "$tmp/$1" > "$tmp/$1.out" 2> "$tmp/$1.err" && fail "$1: forged snapshot restored"
	grep -q "$2" "$tmp/$1.err" || { cat "$tmp/$1.err" >&2; fail "$1: no message naming the cause"; }
	grep -q 'guest:' "$tmp/$1.out" && fail "$1: the guest ran"
	echo "ok: $1 refused: $(grep -o 'cannot load.*' "$tmp/$1.err")"
}
