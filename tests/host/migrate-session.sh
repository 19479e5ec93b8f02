#!/usr/bin/env bash
# migrate-session: the handshake's steps (migrate-agent/session.c), one
# implementation for both roles, run against each other by mig-hs-check
# over a socketpair: a new session's secret, the proofs both ways, another
# secret, a busy destination, a source's ERROR (a refusal, never "busy"),
# AUTH before HELLO (the wire refuses it first), a challenge where the secret was due, an impostor
# destination.  Every case checks both ends' results and messages.
# timeout: 120
set -uo pipefail
. tests/host/migrate-lib.bash # $work, fail
need_programs mig-hs-check
timeout "$(guard 100)" "$BIN/mig-hs-check" > "$work/out" 2>&1
rc=$?
cat "$work/out"
[ "$rc" = 0 ] || fail "mig-hs-check: exit status $rc"
[ "$(grep -c '^ok: ' "$work/out")" = 8 ] || fail "mig-hs-check: not 8 cases ok"
exit 0
