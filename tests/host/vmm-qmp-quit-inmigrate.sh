#!/usr/bin/env bash
# vmm-qmp-quit-inmigrate: quit at a destination that is still waiting
# (inmigrate) ends the VMM, exit 0, after its reply, as docs/migration.md
# says of quit and as QEMU's destination does: waiting for
# migrate-incoming (--incoming defer), listening after migrate-incoming,
# and listening from --incoming URI.  On main (83714ab) quit was answered
# {"return": {}} and the VMM went on waiting (for migrate-incoming, or
# for a source, which it would then have taken the VM from and dropped).
# timeout: 240
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_kvm

# quit on SOCK: its reply must be {"return": {}}.
qmp_quit() { # sock [migrate-incoming-uri]
	PYTHONPATH=tests/host/lib python3 - "$@" << 'EOF'
import sys
from qmp import QMP
q = QMP(sys.argv[1], timeout=60)
if len(sys.argv) > 2:
    q.command("migrate-incoming", uri=sys.argv[2])
st = q.command("query-status")
assert st["status"] == "inmigrate", st
r = q.execute("quit")
assert r.get("return") == {}, r
print("quit answered", r)
EOF
}

# The VMM (pid) ends by itself with status 0 and no longer listens on PORT.
ended() { # what pid err [port]
	local rc
	wait_status "$2" "$1: the VMM after quit" 60 "$3"
	rc=$?
	[ "$rc" = 0 ] || { cat "$3" >&2; fail "$1: the VMM exited $rc after quit, want 0"; }
	if [ -n "${4:-}" ] && listening "$4"; then fail "$1: port $4 still listened on"; fi
	echo "ok: $1: quit ended the VMM, status 0"
}

# 1. --incoming defer, before migrate-incoming.
start_defer_vmm "$work/d1.sock" "$work/d1.err" "$work/d1.json" 200
qmp_quit "$work/d1.sock" || { cat "$work/d1.err" >&2; fail "defer: quit"; }
ended "defer, before migrate-incoming" "$dpid" "$work/d1.err"

# 2. --incoming defer, listening after migrate-incoming (no source comes).
port=$(free_port)
start_defer_vmm "$work/d2.sock" "$work/d2.err" "$work/d2.json" 200
qmp_quit "$work/d2.sock" "tcp:127.0.0.1:$port" || { cat "$work/d2.err" >&2; fail "migrate-incoming: quit"; }
ended "listening after migrate-incoming" "$dpid" "$work/d2.err" "$port"

# 3. --incoming URI: listening from the start.
port=$(free_port)
timeout "$(guard 200)" "$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$port" --control "$work/d3.sock" \
	> /dev/null 2> "$work/d3.err" &
dpid=$!
pids+=("$dpid")
wait_socket "$work/d3.sock" "$dpid" "$work/d3.err"
wait_listen "$port" "$dpid" "$work/d3.err"
qmp_quit "$work/d3.sock" || { cat "$work/d3.err" >&2; fail "--incoming URI: quit"; }
ended "--incoming URI, listening" "$dpid" "$work/d3.err" "$port"
exit 0
