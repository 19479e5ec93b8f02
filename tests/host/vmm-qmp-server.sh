#!/usr/bin/env bash
# vmm-qmp-server: the QMP server's connection handling, without a VM
# (vmm-qmp-test serves vmm/qmp.c alone; tests/host/lib/qmp-server-check.py
# says what each case checks).  Each failed on main (c859044) before the
# fix: a refused request's connection stayed open until another client
# connected; 16 idle connections locked the owner out and none was ever
# closed; a client that stopped reading for 2 s was cut, and held every
# event meanwhile; nothing said why a client was dropped.  The protocol
# cases failed on e183779, before their fixes:
#   parse: a JSON parse error (or a NUL byte) closed the connection
#   renegotiate: a second qmp_capabilities was a GenericError
#   race: an event overtook the reply to qmp_capabilities (second round)
#   version, commands: no query-version (the greeting said 0.0.0), so
#     query-commands did not list it
# timeout: 300
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm-qmp-test
cases=(refused parse renegotiate race version commands quit idle deadline slow overflow)
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null && id nobody > /dev/null 2>&1 &&
	getent group nogroup > /dev/null; then
	cases+=(uid)
else
	echo "note: the uid case needs root, setpriv, user nobody and group nogroup"
fi
PYTHONPATH=tests/host/lib python3 tests/host/lib/qmp-server-check.py "$BIN/vmm-qmp-test" "$work" \
	"${cases[@]}" || fail "see above"
