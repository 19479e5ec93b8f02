#!/usr/bin/env bash
# vmm-save-migrating: a source's --save-after is refused while a migration
# moves its VM out (precopy, held by --postcopy-manual) and after the VM
# left (postmigrate, --control): a snapshot then would restore a second
# copy of a VM that runs at the destination.  The refusal is said, no file
# is written, the migration completes with the checksum of an unmigrated
# run, and the source exits 70 at quit: the snapshot asked for was not
# written.  On main (40fdcf4) the postmigrate source saved its VM, and a
# save during precopy stopped the VM and gave its migration up.
# Each case needs the save's time to fall in its phase: one that comes
# earlier (a loaded machine) is tried again later, never timed.
# timeout: 600
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

cmd="workload=random iters=$(sized 20000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
refusal='--save-after: not saved to'

# A source NAME with --save-after MS, migrating by itself (--migrate-after
# 1, the source's FLAGS after) to a new destination: waits for the save's
# word, the save or its refusal, and sets $said to it.
save_case() { # name ms flags...
	local name=$1 ms=$2
	shift 2
	start_vmm_dest "$name" 280
	start_control_vmm "$work/$name.sock" "$work/$name-s.err" 280 "$cmd" --migrate-to "tcp:127.0.0.1:$dport" \
		--migrate-after 1 --save-after "$ms" "$work/$name.snap" "$@"
	wait_line "$work/$name-s.err" "saved state and RAM\|$refusal" "$name: the save's time" "$spid" 240
	said=$(grep -o "saved state and RAM\|$refusal.*" "$work/$name-s.err" | head -n1)
}

# Tries save_case with MS, then 4 and 16 times it, until the save's word
# matches WANT; an earlier phase's word is reported, the pair killed.
save_in_phase() { # name want ms flags...
	local name=$1 want=$2 ms=$3
	shift 3
	for try in 1 2 3; do
		save_case "$name$try" "$ms" "$@"
		if grep -q -- "$want" <<< "$said"; then
			case=$name$try
			return 0
		fi
		# Saved after the migration had started: the second copy itself.
		awk '/^vmm: migrating to/ { m = 1 } /saved state and RAM/ && m { bad = 1 } END { exit !bad }' \
			"$work/$name$try-s.err" && { cat "$work/$name$try-s.err" >&2; fail "$name: the VM was saved after its migration started"; }
		echo "$name: the save at $ms ms came in an earlier phase ($said): again, later"
		kill "$spid" "$dpid" 2> /dev/null
		ms=$((ms * 4))
	done
	fail "$name: the save never came in its phase"
}

# The refused source CASE: nothing written; QMP MODE (tests/host/lib/
# qmp-drive.py) takes the migration to completed, postmigrate and quit;
# the source exits 70 and the destination has the checksum.
check_refused() { # what mode
	local err=$work/$case-s.err
	[ -e "$work/$case.snap" ] && fail "$1: a snapshot was written"
	left=$(find "$work" -name "$case.snap?*")
	[ -z "$left" ] || fail "$1: a partial file was left: $left"
	python3 tests/host/lib/qmp-drive.py "$work/$case.sock" "$2" || { cat "$err" >&2; fail "$1: QMP $2"; }
	wait_status "$spid" "$1: the source" 120 "$err"
	rc=$?
	[ "$rc" = 70 ] || { cat "$err" >&2; fail "$1: the source exited $rc, not 70 (a snapshot asked for was not written)"; }
	grep -q "no snapshot was written to $work/$case.snap" "$err" || { cat "$err" >&2; fail "$1: the exit does not say why"; }
	wait_status "$dpid" "$1: the destination" 200 "$work/$case-d.err" || { cat "$work/$case-d.err" >&2; fail "$1: the destination failed"; }
	check_dest "$1" "$ref" "$work/$case-d.err" "$work/$case-d.json"
	echo "$1: ok: refused ($(grep -o -- "$refusal.*" "$err")), nothing written, migrated with checksum $ref, source exit 70"
}

# 1. During precopy, held there until migrate-start-postcopy.
save_in_phase active 'a migration is in progress' 3000 --precopy-rounds 1 --postcopy-manual
check_refused "during the migration" after-postcopy

# 2. After completion: the source stays in postmigrate.
save_in_phase away 'has migrated away' 8000
check_refused "after the migration" postmigrate-quit
