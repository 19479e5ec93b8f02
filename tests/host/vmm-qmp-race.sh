#!/usr/bin/env bash
# vmm-qmp-race: QMP commands racing a migration's phases.  Each round (a
# printed seed, reproducible: QMP_RACE_SEED=N) migrates a source VMM with
# --control to a destination started with --incoming defer --control,
# driven over QMP as tests/host/lib/qmp-drive.py drives it, while three
# more clients on each side fire random commands of the control API
# (legal names, some with bad arguments) at random moments
# (tests/host/lib/qmp-race.py).  Checked: every reply is valid JSON with
# its request's id and either return or error {class, desc}, every event
# well-formed; no VMM dies by a signal or exits outside 0, 1, 64, 70; no
# hang (each wait a hang guard); and exactly one outcome: completed (the
# destination's guest ends with the unmigrated run's checksum), failed or
# cancelled before the switch-over (the source's guest runs on to that
# checksum), or lost after it (both sides say so: the source quits with
# 70).  Then quit from two clients at once on each side that is left.
# Also, deterministic: quit at a destination whose postcopy is paused
# (migrate-pause at the source) ends that VMM (it waited for a recovery
# that its closed control socket could no longer be asked for: a hang).
# timeout: 600
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

cmd="workload=random iters=$(sized 12000) quiet=1"
ref=$(reference_checksum 32M "$cmd")
[ -n "$ref" ] || fail "no reference checksum"

# A VMM's exit status is one of the documented ones, never a signal's.
documented() { # what status
	case $2 in
	0 | 1 | 64 | 70) ;;
	124) fail "$1: killed by its timeout guard (a hang)" ;;
	*) fail "$1: exit status $2 (a signal or an undocumented status)" ;;
	esac
}

round() { # seed
	local seed=$1 n=r$1 out sst dst
	mkdir -p "$work/$n"
	start_defer_vmm "$work/$n/d.sock" "$work/$n/d.err" "$work/$n/d.json" 300
	start_control_vmm "$work/$n/s.sock" "$work/$n/s.err" 300 "$cmd"
	port=$(free_port)
	timeout "$(guard 450)" python3 -u tests/host/lib/qmp-race.py chaos "$seed" "$work/$n/s.sock" \
		"$work/$n/d.sock" "tcp:127.0.0.1:$port" "$work/$n" "$work/$n/outcome" ||
		{ tail -n 30 "$work/$n/s.err" "$work/$n/d.err" >&2; fail "seed $seed: the QMP driver"; }
	out=$(cat "$work/$n/outcome")
	wait_status "$spid" "seed $seed: the source" 200 "$work/$n/s.err"
	sst=$?
	wait_status "$dpid" "seed $seed: the destination" 200 "$work/$n/d.err"
	dst=$?
	documented "seed $seed: the source" "$sst"
	documented "seed $seed: the destination" "$dst"
	case $out in
	completed)
		[ "$sst" = 0 ] && [ "$dst" = 0 ] ||
			{ cat "$work/$n/s.err" "$work/$n/d.err" >&2; fail "seed $seed: completed, yet source $sst, destination $dst"; }
		check_dest "seed $seed" "$ref" "$work/$n/d.err" "$work/$n/d.json" ;;
	before)
		[ "$sst" = 0 ] || { cat "$work/$n/s.err" >&2; fail "seed $seed: the source exited $sst"; }
		[ "$(final_checksum "$work/$n/s.err")" = "$ref" ] ||
			{ cat "$work/$n/s.err" >&2; fail "seed $seed: the source's guest ran on to another checksum"; }
		! grep -q "last: done" "$work/$n/d.err" ||
			{ cat "$work/$n/d.err" >&2; fail "seed $seed: the destination's guest ran too"; } ;;
	lost)
		[ "$sst" = 70 ] || { cat "$work/$n/s.err" >&2; fail "seed $seed: lost, yet the source exited $sst"; }
		[ "$dst" != 0 ] || { cat "$work/$n/d.err" >&2; fail "seed $seed: lost, yet the destination exited 0"; } ;;
	*) fail "seed $seed: no outcome ($out)" ;;
	esac
	echo "ok: seed $seed: $out (source exit $sst, destination exit $dst)"
}

base=${QMP_RACE_SEED:-$(date +%s)}
# One round in make test (the node of host tests is CI's longest lane: three
# rounds and the two cases took 401 s there); more by hand.
rounds=${QMP_RACE_ROUNDS:-1}
echo "seeds $base..$((base + rounds - 1)) (QMP_RACE_SEED=$base to run them again)"
for ((i = 0; i < rounds; i++)); do
	round $((base + i))
done

# quit at a destination whose postcopy is paused: the VMM ends (70: the
# VM is lost with it), it does not wait for a recovery nobody can ask for.
start_defer_vmm "$work/qp-d.sock" "$work/qp-d.err" "$work/qp-d.json" 300
start_control_vmm "$work/qp-s.sock" "$work/qp-s.err" 300 "$cmd"
qspid=$spid
port=$(free_port)
timeout "$(guard 300)" python3 -u tests/host/lib/qmp-race.py quit-paused "$work/qp-s.sock" "$work/qp-d.sock" \
	"tcp:127.0.0.1:$port" || { cat "$work/qp-s.err" "$work/qp-d.err" >&2; fail "quit-paused"; }
wait_status "$dpid" "quit at a paused destination" 60 "$work/qp-d.err"
rc=$?
[ "$rc" = 70 ] || { cat "$work/qp-d.err" >&2; fail "quit at a paused destination: exit $rc, not 70"; }
grep -q "quit while its postcopy was paused" "$work/qp-d.err" ||
	{ cat "$work/qp-d.err" >&2; fail "quit at a paused destination: no reason given"; }
echo "ok: quit at a paused destination ends it, exit 70: $(grep -m1 'quit while' "$work/qp-d.err")"
# The source waits for a resume that cannot come: not under test here.
kill -KILL $(children_of "$qspid") 2> /dev/null
wait "$qspid" 2> /dev/null

# stop at a destination whose postcopy is paused: its vCPU waits for a
# page that only the recovery brings; the control socket must still take
# migrate-recover meanwhile (the stop held the lock every command takes:
# a deadlock), and the stop completes once the page comes.
start_defer_vmm "$work/sp-d.sock" "$work/sp-d.err" "$work/sp-d.json" 300
start_control_vmm "$work/sp-s.sock" "$work/sp-s.err" 300 "$cmd"
port=$(free_port)
timeout "$(guard 300)" python3 -u tests/host/lib/qmp-race.py stop-paused "$work/sp-s.sock" "$work/sp-d.sock" \
	"tcp:127.0.0.1:$port" "unix:$work/sp-r.sock" ||
	{ tail -n 20 "$work/sp-s.err" "$work/sp-d.err" >&2; proc_report "$(children_of "$dpid")" >&2; fail "stop-paused"; }
check_migrated stop-paused "$ref" "$spid" "$work/sp-s.err" "$dpid" "$work/sp-d.err" "$work/sp-d.json"
