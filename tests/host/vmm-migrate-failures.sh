#!/usr/bin/env bash
# vmm-migrate-failures: a long-running source VMM asked over QMP to
# migrate 16 times to destinations that fail, at each phase in turn:
# nothing listens (connection refused), one that accepts and closes at
# once, one that reads the source's first bytes and closes, one that
# answers every channel's handshake and closes after the first read of
# the RAM stream (tests/host/lib/slowdest.py: mid-precopy).  After each
# failure the VM runs on (query-status running); after the warm-up its
# file descriptors, threads and RSS stay flat (a leak of a socket, a
# thread or a buffer per failed migration would grow them by 12); then it
# still migrates to a real destination, every page exactly once: a
# regression guard, nothing of this leaked on main.  That migration runs
# migrate-agent from another directory with --metrics s.json: before the
# fix the VMM wrote s.json in its own working directory and the agent
# said nothing.  (A failed destination VMM ends its process, by
# design: nothing of it lingers to leak.)
# timeout: 400
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent
need_guest
need_kvm

long="workload=random iters=4000000 quiet=1" # killed, never waited for
sock=$work/s.sock
start_control_vmm "$sock" "$work/s.err" 400 "$long"
# The VMM itself, the child of its `timeout`.
vpid=$(children_of "$spid")
[ -n "$vpid" ] && [ "$(cat "/proc/$vpid/comm")" = vmm ] || fail "no vmm under its timeout (pid $spid)"

# The VMM's resources: descriptors, threads, RSS in KiB.
fds() { ls "/proc/$vpid/fd" | wc -l; }
threads() { ls "/proc/$vpid/task" | wc -l; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$vpid/status"; }

# The failing destinations, each on its own port: accept, take N bytes of
# what the source sends, close; for every connection (the source dials
# several channels).
failing_peer() { # port bytes
	python3 - "$1" "$2" << 'EOF' &
import socket, sys, threading
port, want = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
def serve(c):
    got = 0
    c.settimeout(60)
    try:
        while got < want:
            b = c.recv(min(65536, want - got))
            if not b:
                break
            got += len(b)
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
	pids+=($!)
}
dead=$(free_port)
p0=$(free_port)
failing_peer "$p0" 0
p1=$(free_port)
failing_peer "$p1" 16
p2=$(free_port)
python3 tests/host/lib/slowdest.py 127.0.0.1 "$p2" --delay 0 --seconds 600 > "$work/slowdest.out" 2>&1 &
pids+=($!)
for p in "$p0" "$p1" "$p2"; do wait_listen "$p"; done

# Migrate ROUNDS times over the list of URIs, each to "failed", the VM
# running after each; prints the failures' reasons, one a line.
fail_rounds() { # rounds uri...
	python3 - "$sock" "$@" << 'EOF'
import sys, time
sys.path.insert(0, "tests/host/lib")
from qmp import QMP
path, rounds, uris = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
q = QMP(path, timeout=120)
q.command("migrate-set-capabilities",
          capabilities=[{"capability": "postcopy-ram", "state": True},
                        {"capability": "events", "state": True}])
q.command("migrate-set-parameters", **{"x-precopy-rounds": 100})
for i in range(rounds):
    uri = uris[i % len(uris)]
    q.events.clear()
    q.command("migrate", uri=uri)
    end = time.monotonic() + 120  # a hang guard
    while True:
        st = [e["data"]["status"] for e in q.events if e.get("event") == "MIGRATION"]
        if "failed" in st or "completed" in st:
            break
        if time.monotonic() > end:
            raise SystemExit(f"FAIL: round {i} ({uri}): no end after 120 s: {st}")
        q.events.append(q.read())
    if "completed" in st:
        raise SystemExit(f"FAIL: round {i} ({uri}): completed at a failing destination")
    err = q.command("query-migrate").get("error-desc", "")
    run = q.command("query-status")
    if not run.get("running") or run.get("status") != "running":
        raise SystemExit(f"FAIL: round {i} ({uri}): the VM is not running after the failure: {run}")
    print(f"{uri}: {err}")
EOF
}

uris=("tcp:127.0.0.1:$dead" "tcp:127.0.0.1:$p0" "tcp:127.0.0.1:$p1" "tcp:127.0.0.1:$p2")
fail_rounds 4 "${uris[@]}" > "$work/warm.out" || { cat "$work/warm.out" "$work/s.err" >&2; fail "warm-up rounds"; }
sort -u "$work/warm.out" | sed 's/^/warm-up: /' | head -c 2000
# Between migrations: no migration thread left; the counts then settle.
sleep 1
f0=$(fds) t0=$(threads) r0=$(rss)
echo "after the warm-up: $f0 fds, $t0 threads, RSS $r0 KiB"
fail_rounds 12 "${uris[@]}" > "$work/rounds.out" || { cat "$work/rounds.out" "$work/s.err" >&2; fail "failure rounds"; }
[ "$(wc -l < "$work/rounds.out")" = 12 ] || fail "not 12 failed migrations"
[ -d "/proc/$vpid/fd" ] || { cat "$work/s.err" >&2; fail "the source VMM exited"; }
flat() { [ -d "/proc/$vpid/fd" ] && [ "$(fds)" -le "$f0" ] && [ "$(threads)" -le "$t0" ]; }
wait_until "descriptors and threads back to $f0 and $t0 (now $(fds), $(threads))" 30 "$vpid" "$work/s.err" flat
r1=$(rss)
echo "after 12 more failures: $(fds) fds, $(threads) threads, RSS $r1 KiB"
# RSS: 8 MiB of slack (allocator arenas, the guest's own pages); a
# buffer kept per failure (a channel's 1 MiB and up) would pass it.
[ "$r1" -le $((r0 + 8192)) ] || fail "RSS grew from $r0 to $r1 KiB over 12 failed migrations"

# The VM still migrates, whole.  migrate-agent runs in another working
# directory than the VMM's, with a relative --metrics: the file is where
# the agent was told (it was written, or not, in the VMM's directory).
start_vmm_dest real 300
agent=$(cd "$BIN" && pwd)/migrate-agent
mkdir "$work/elsewhere"
(cd "$work/elsewhere" && "$agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" --metrics s.json) \
	2> "$work/agent.err" ||
	{ cat "$work/agent.err" "$work/s.err" "$work/real-d.err" >&2; fail "the migration after the failures"; }
check_json "$work/elsewhere/s.json" '.role == "source" and .pages > 0' "the agent's relative --metrics"
wait_status "$spid" "the source after its migration" 120 || { cat "$work/s.err" >&2; fail "the source VMM failed"; }
wait_line "$work/real-d.err" "incoming migration complete" "the destination" "$dpid" 120
check_exactly_once "$work/real-d.json"
kill "$dpid"
echo "then migrated: every page exactly once"
exit 0
