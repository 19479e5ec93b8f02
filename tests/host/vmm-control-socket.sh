#!/usr/bin/env bash
# vmm-control-socket: only the VMM's owner may start a migration through its
# control socket.  The socket is created 0600; another user (nobody, through
# setpriv) cannot connect; and when the mode is opened up anyway, the VMM
# refuses that user by its SO_PEERCRED uid, with a message, and goes on
# serving its owner (who then migrates it: checksum equal).  And
# migrate-agent will not talk to a socket another user serves.
# timeout: 180
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm migrate-agent
need_guest
need_kvm
command -v setpriv > /dev/null || skip "setpriv (util-linux) missing"
[ "$(id -u)" = 0 ] || skip "needs root to act as another user"
id nobody > /dev/null 2>&1 || skip "no user nobody"
as_nobody() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
as_nobody true || skip "setpriv cannot switch to nobody here"

cmd="workload=random iters=4000 quiet=1"
ref=$(reference_checksum 32M "$cmd")
chmod 711 "$work" # other users may reach the socket's directory, not list it
sock=$work/vm.sock
start_vmm_dest owner 120
start_control_vmm "$sock" "$work/s.err" 120 "$cmd"

mode=$(stat -c %a "$sock")
[ "$mode" = 600 ] || fail "the control socket has mode $mode, want 600"
echo "mode: $mode"

as_nobody "$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" \
	> /dev/null 2> "$work/nobody1.err" && fail "nobody started a migration through a 0600 socket"
grep -q "Permission denied" "$work/nobody1.err" || { cat "$work/nobody1.err" >&2; fail "nobody: not refused by the mode"; }
echo "nobody, mode 600: $(cat "$work/nobody1.err")"

chmod 666 "$sock" # a mistake, or a shared directory: the uid check must hold
as_nobody "$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" \
	> /dev/null 2> "$work/nobody2.err" && fail "nobody started a migration through an opened socket"
grep -q "refused: uid $(id -u nobody) does not own this VMM" "$work/nobody2.err" ||
	{ cat "$work/nobody2.err" "$work/s.err" >&2; fail "nobody: not refused by its uid"; }
grep -q "control socket: refused: uid" "$work/s.err" || { cat "$work/s.err" >&2; fail "the VMM did not log the refusal"; }
echo "nobody, mode 666: $(cat "$work/nobody2.err")"

"$BIN/migrate-agent" migrate --vmm "$sock" --to "tcp:127.0.0.1:$dport" \
	> "$work/agent.json" 2> "$work/agent.err" || { cat "$work/agent.err" "$work/s.err" >&2; fail "the owner could not migrate"; }
check_migrated owner "$ref" "$spid" "$work/s.err" "$dpid" "$work/owner-d.err" "$work/owner-d.json"

# The other way round: a socket served by another user is not our VMM, and
# migrate-agent tells it nothing (it would hand that user the request).
mkdir "$work/nb" && chown nobody "$work/nb"
as_nobody /usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)
c, _ = s.accept(); c.settimeout(5)
try: got = c.recv(4096)
except OSError: got = b""
open(sys.argv[1] + ".got", "wb").write(got)' "$work/nb/fake.sock" 2> /dev/null &
pids+=("$!")
wait_socket "$work/nb/fake.sock"
"$BIN/migrate-agent" migrate --vmm "$work/nb/fake.sock" --to "tcp:127.0.0.1:$dport" \
	> /dev/null 2> "$work/fake.err" && fail "migrate-agent talked to another user's socket"
grep -q "served by uid $(id -u nobody), not by you" "$work/fake.err" ||
	{ cat "$work/fake.err" >&2; fail "migrate-agent: no clear refusal of another user's socket"; }
for _ in $(seq 100); do [ -e "$work/nb/fake.sock.got" ] && break; sleep 0.1; done
[ -s "$work/nb/fake.sock.got" ] && fail "the request reached another user's socket: $(cat "$work/nb/fake.sock.got")"
echo "another user's socket: $(cat "$work/fake.err")"
