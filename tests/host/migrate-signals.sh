#!/usr/bin/env bash
# migrate-signals: process hygiene of the VMM's migration (issue 10, defect
# 8).  (1) SIGTERM stops a destination that waits for its source cleanly,
# with a message and its metrics; (2) the CLI interrupted, then the
# migration fails before the switch-over: the source VMM survives (no
# SIGPIPE) and its VM goes on; (3) an idle control client does not keep the
# VMM from exiting; (4) the CLI gives up on a silent (SIGSTOPped) VMM.
# timeout: 120
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent mig-evil
need_guest
need_kvm

# 1. SIGTERM while the destination waits for a source.
port=$(free_port)
"$BIN/vmm" run --mem 16M --incoming "tcp:127.0.0.1:$port" --migrate-metrics "$work/term.json" \
	> /dev/null 2> "$work/term.err" &
vpid=$!
pids+=("$vpid")
wait_listen "$port"
kill -TERM "$vpid"
wait_status "$vpid" "sigterm: the destination" 30
rc=$?
cat "$work/term.err"
[ "$rc" = 70 ] || fail "sigterm: destination exit status $rc, want the VMM's failure 70 (143: killed without a word)"
grep -q "signal 15" "$work/term.err" || fail "sigterm: no message"
check_json "$work/term.json" '.role == "destination"' "sigterm: no metrics"

# 2. The CLI goes away, then the migration fails before the switch-over.
port=$(free_port)
"$BIN/mig-evil" silent-layout "tcp:127.0.0.1:$port" 2> /dev/null &
pids+=($!)
wait_listen "$port"
sock=$work/vm2.sock
"$BIN/vmm" run --image "$GUEST" --mem 16M --cmdline "workload=random iters=1000000 quiet=1" \
	--control "$sock" > /dev/null 2> "$work/pipe.err" &
vpid=$!
pids+=("$vpid")
wait_socket "$sock" "$vpid" "$work/pipe.err"
"$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$port" --recover-ms 1000 \
	> /dev/null 2> /dev/null &
apid=$!
wait_line "$work/pipe.err" "migrating to" "sigpipe" "$vpid"
kill -TERM "$apid" # (a background job ignores SIGINT)
wait "$apid" 2> /dev/null
wait_line "$work/pipe.err" "the VM goes on here" "sigpipe" "$vpid"
sleep 0.2 # the VMM answers the CLI right after that message
kill -0 "$vpid" 2> /dev/null || { cat "$work/pipe.err" >&2; fail "sigpipe: the source VMM died"; }
kill -TERM "$vpid"
wait_status "$vpid" "sigpipe: the source VMM" 30
echo "sigpipe: the source VMM survived its CLI"

# 3. An idle control client: the VMM still exits when its guest is done.
sock=$work/vm3.sock
"$BIN/vmm" run --image "$GUEST" --mem 16M --cmdline "workload=random iters=$(sized 5000) quiet=1" \
	--control "$sock" > /dev/null 2> "$work/idle.err" &
vpid=$!
pids+=("$vpid")
wait_socket "$sock" "$vpid" "$work/idle.err"
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(90)' "$sock" &
pids+=($!)
wait_status "$vpid" "idle client: the VMM" 60
rc=$?
[ "$rc" = 0 ] || { cat "$work/idle.err" >&2; fail "idle client: the VMM exited with status $rc"; }
echo "idle client: the VMM exited when its guest was done"

# 4. A silent (stopped) VMM: the CLI gives up within its deadline.
sock=$work/vm4.sock
"$BIN/vmm" run --image "$GUEST" --mem 16M --cmdline "workload=random iters=1000000 quiet=1" \
	--control "$sock" > /dev/null 2> "$work/stop.err" &
vpid=$!
pids+=("$vpid")
wait_socket "$sock" "$vpid" "$work/stop.err"
kill -STOP "$vpid"
timeout "$(guard 60)" "$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:1" --idle-ms 1000 \
	2> "$work/stop-agent.err"
rc=$?
kill -CONT "$vpid"
kill -TERM "$vpid"
cat "$work/stop-agent.err"
[ "$rc" = 1 ] || fail "silent VMM: migrate-agent exit status $rc (124: it hung)"
grep -q "silent" "$work/stop-agent.err" || fail "silent VMM: no clear message"
echo "migrate-signals: passed"
