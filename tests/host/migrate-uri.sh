#!/usr/bin/env bash
# migrate-uri: QEMU's migration URI forms (migrate-agent/addr.c), each a
# whole mig-memtest migration on loopback, every page exactly once:
#   tcp:localhost:P (a host name, resolved; the source tries each address)
#   tcp:[::1]:P (IPv6), tcp::P and tcp:0:P (any address: reached over
#   IPv4 and IPv6), unix:PATH (a stale socket file left by the previous
#   case is replaced, as QEMU replaces it);
# then bad URIs, each refused at once with a message that says what is
# wrong: no scheme, no port, a port out of range, an IPv6 address without
# brackets, an empty unix path, a name that does not resolve, and "any
# address" given to a source.  On main (5c80047) all but tcp:localhost:P
# and tcp:127.0.0.1:P were refused.
# timeout: 240
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest

# A unix socket at PATH made after the file STAMP (not the stale one).
fresh_socket() { # path stamp
	[ -S "$1" ] && [ "$1" -nt "$2" ]
}

# One migration: the destination listens on LISTEN-URI, the source goes to
# TO-URI; WAIT is a port to wait on, or a unix socket path.
pair() { # name listen-uri to-uri wait
	local name=$1 dpid
	"$BIN/mig-memtest" dest --listen "$2" --mem 4M --metrics "$work/$name-d.json" \
		> "$work/$name-d.out" 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	if [[ $4 == /* ]]; then
		wait_until "$name: the destination's socket" 60 "$dpid" "$work/$name-d.err" \
			fresh_socket "$4" "$work/$name.start"
	else
		wait_listen "$4" "$dpid" "$work/$name-d.err"
	fi
	"$BIN/mig-memtest" source --to "$3" --mem 4M --metrics "$work/$name-s.json" \
		2> "$work/$name-s.err" || { cat "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: source failed"; }
	wait "$dpid" || { cat "$work/$name-d.err" >&2; fail "$name: destination failed"; }
	grep -q "checksum ok" "$work/$name-d.err" || fail "$name: no checksum verdict"
	check_exactly_once "$work/$name-d.json"
	echo "ok: $name: --listen $2, --to $3"
}

p=$(free_port)
touch "$work/name.start"
pair name "tcp:localhost:$p" "tcp:localhost:$p" "$p"

p=$(free_port)
pair ipv6 "tcp:[::1]:$p" "tcp:[::1]:$p" "$p"

p=$(free_port)
pair any-v4 "tcp::$p" "tcp:127.0.0.1:$p" "$p"

p=$(free_port)
pair any-v6 "tcp:0:$p" "tcp:[::1]:$p" "$p"

sock=$work/mig.sock
touch "$work/unix.start"
sleep 1 # a new socket file is newer than the mark
pair unix "unix:$sock" "unix:$sock" "$sock"
touch "$work/unix2.start"
sleep 1
pair unix2 "unix:$sock" "unix:$sock" "$sock" # the first case's file is stale now

# Bad URIs: refused at once, with the reason.
bad() { # role uri message-regex
	local opt=--listen
	[ "$1" = source ] && opt=--to
	timeout "$(guard 30)" "$BIN/mig-memtest" "$1" "$opt" "$2" --mem 4M > /dev/null 2> "$work/bad.err"
	local rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$work/bad.err" >&2; fail "$1 $2: exit $rc, not a refusal"; }
	grep -Eq "$3" "$work/bad.err" || { cat "$work/bad.err" >&2; fail "$1 $2: no message matching '$3'"; }
	echo "ok: $1 '$2' refused: $(grep -Eo "$3.*" "$work/bad.err" | head -1 | head -c 120)"
}
bad dest "127.0.0.1:$p" "bad address.*expected tcp:HOST:PORT"
bad dest "tcp:127.0.0.1" "bad address"
bad dest "tcp:127.0.0.1:65536" "bad port"
bad dest "tcp:127.0.0.1:x" "bad port"
bad dest "tcp:::1:$p" "bad address"
bad dest "tcp:[::1]$p" "bad address"
bad dest "unix:" "needs a path"
bad dest "tcp:no-such-host.invalid:$p" "bad address.*no-such-host.invalid"
bad source "tcp::$p" "any address"
bad source "tcp:0:$p" "any address"
exit 0
