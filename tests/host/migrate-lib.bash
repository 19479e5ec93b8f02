# Shared helpers of the tests/host/migrate-*.sh tests (sourced, not a test).
# Needs BIN (build/bin or build/san/bin) and jq.  Tests that need KVM call
# need_kvm (tests/host/kvm-lib.bash).
. tests/host/kvm-lib.bash

BIN=${BIN:-build/bin}
work=$(mktemp -d /tmp/migrate-test.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

command -v jq > /dev/null || skip "jq is not installed"

# Wait until a VMM's control socket exists; with a pid (and its stderr
# file), fail at once, with what it said, if that process exited first.
wait_socket() { # path [pid [stderr-file]]
	wait_until "a control socket at $1" 60 "${2:-}" "${3:-}" test -S "$1"
}

# The children of a process (a VMM under its `timeout`), read from /proc:
# a node has no pgrep.
children_of() { # pid
	local d
	for d in /proc/[0-9]*; do
		[ "$(sed 's/.*) //' "$d/stat" 2> /dev/null | cut -d' ' -f2)" = "$1" ] && echo "${d#/proc/}"
	done
}

# A free TCP port on 127.0.0.1 (the kernel picks it).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

listening() { # port
	ss -Hltn "sport = :$1" 2> /dev/null | grep -q LISTEN
}

# Wait until something listens on 127.0.0.1:$1; with a pid (and its stderr
# file), fail at once, saying why, if that process died first (a port
# taken meanwhile by someone else).
wait_listen() { # port [pid [stderr-file]]
	wait_until "a listener on port $1" 60 "${2:-}" "${3:-}" listening "$1"
}

# jq -e on a file, with a readable failure.
check_json() { # file expression what
	jq -e "$2" "$1" > /dev/null || { cat "$1" >&2; fail "$3 ($2)"; }
}

# The destination's accounting: every page exactly once.
check_exactly_once() { # dest.json
	check_json "$1" '.pages_received == .pages' "not every page arrived"
	check_json "$1" '.duplicate_pages == 0' "a page arrived twice"
	check_json "$1" '.pages_demand + .pages_pushed + .pages_precopy == .pages' \
		"demand + pushed + precopy pages do not add up to RAM"
}

GUEST=${GUEST:-build/guest/guest.elf}

# What a test runs must be built: each PROGRAM in $BIN, the guest image.
need_programs() { # program...
	local p
	for p; do [ -x "$BIN/$p" ] || fail "$BIN/$p is not built"; done
}
need_guest() { [ -f "$GUEST" ] || fail "$GUEST is not built"; }

# The final checksum a vmm run printed ("... last: done iter=N checksum=0x...").
final_checksum() { # stderr-file
	sed -n 's/.*last: done iter=[0-9]* checksum=\(0x[0-9a-f]*\).*/\1/p' "$1" | tail -n1
}

# Reference: the same guest, not migrated.
reference_checksum() { # mem cmdline [vmm run options...]
	"$BIN/vmm" run --image "$GUEST" --mem "$1" --cmdline "$2" "${@:3}" > /dev/null 2> "$work/ref.err" ||
		{ cat "$work/ref.err" >&2; fail "the unmigrated reference run failed"; }
	final_checksum "$work/ref.err"
}

# A mig-memtest destination on a free port in the background: sets $dport and $dpid.
start_memtest_dest() { # name [options...]
	local name=$1
	shift
	dport=$(free_port)
	"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$dport" --mem 4M "$@" \
		> /dev/null 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	wait_listen "$dport" "$dpid" "$work/$name-d.err"
}

# A destination VMM (vmm run --mem 32M --incoming) on a free port in the
# background, under a `timeout` of GUARD seconds, its metrics in
# $work/NAME-d.json and its stderr in $work/NAME-d.err: sets $dport and
# $dpid once it listens.
start_vmm_dest() { # name guard [options...]
	local name=$1 guard=$2
	shift 2
	dport=$(free_port)
	timeout "$(guard "$guard")" "$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$dport" \
		--migrate-metrics "$work/$name-d.json" "$@" > /dev/null 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	wait_listen "$dport" "$dpid" "$work/$name-d.err"
}

# A VMM running the guest with CMDLINE (--mem 32M) and its control socket
# at SOCK, in the background under a `timeout` of GUARD seconds, stderr to
# ERR: sets $spid once the socket is there.
start_control_vmm() { # sock err guard cmdline [options...]
	local sock=$1 err=$2 guard=$3 cmd=$4
	shift 4
	timeout "$(guard "$guard")" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" --control "$sock" "$@" \
		> /dev/null 2> "$err" &
	spid=$!
	pids+=("$spid")
	wait_socket "$sock"
}

# A destination VMM as QEMU's -incoming defer: no guest yet, a control
# socket that waits for migrate-incoming; its metrics into METRICS; vmm
# run's OPTIONS after.  Sets dpid and returns once the socket answers.
start_defer_vmm() { # sock err metrics guard [options...]
	local sock=$1 err=$2 metrics=$3 guard=$4
	shift 4
	timeout "$(guard "$guard")" "$BIN/vmm" run --mem 32M --incoming defer --control "$sock" \
		--migrate-metrics "$metrics" "$@" > /dev/null 2> "$err" &
	dpid=$!
	pids+=("$dpid")
	wait_socket "$sock"
}

# The guest's final checksum at a destination (from its stderr file) is
# REF, the unmigrated run's, and every page arrived there exactly once.
check_dest() { # what ref dest-stderr dest-metrics-json
	local got
	[ -n "$2" ] || fail "$1: no reference checksum"
	got=$(final_checksum "$3")
	[ "$got" = "$2" ] || { cat "$3" >&2; fail "$1: checksum $got after migration, $2 without"; }
	check_exactly_once "$4"
}

# A migration started through the source VMM's control socket ends: both
# VMMs exit 0 (hang guards: 120 s for the source, 200 s for the
# destination), then check_dest.
check_migrated() { # what ref source-pid source-stderr dest-pid dest-stderr dest-metrics-json
	wait_status "$3" "$1: the source" 120 || { cat "$4" >&2; fail "$1: the source vmm failed"; }
	wait_status "$5" "$1: the destination" 200 || { cat "$6" >&2; fail "$1: the destination vmm failed"; }
	check_dest "$1" "$2" "$6" "$7"
	echo "$1: migrated, checksum $2 equal"
}

# One postcopy migration between two vmm processes on loopback (vmm run
# --migrate-to/--migrate-after at the source, --incoming at the
# destination), checked: both exit 0, the guest was still running when it
# left, check_dest, and the source's summary agrees.  Both VMMs get the
# options of the array vm_opts (default: --mem 32M) under a `timeout` of
# $vm_guard seconds (default 240); the destination also those of the array
# dest_opts (default none); the source also the guest, CMDLINE and the
# source options.  Output and metrics: $work/NAME-{s,d}.{out,err,json}.
migrate_loopback() { # name ref cmdline migrate-after-ms [source options...]
	local name=$1 ref=$2 cmd=$3 after=$4 port dpid src dst
	shift 4
	local vmopts=(--mem 32M) dopts=() guard=${vm_guard:-240}
	[ -n "${vm_opts+set}" ] && vmopts=("${vm_opts[@]}")
	[ -n "${dest_opts+set}" ] && dopts=("${dest_opts[@]}")
	port=$(free_port)
	timeout "$(guard "$guard")" "$BIN/vmm" run "${vmopts[@]}" "${dopts[@]}" --incoming "tcp:127.0.0.1:$port" \
		--migrate-metrics "$work/$name-d.json" > "$work/$name-d.out" 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	wait_listen "$port" "$dpid" "$work/$name-d.err"
	timeout "$(guard "$guard")" "$BIN/vmm" run --image "$GUEST" "${vmopts[@]}" --cmdline "$cmd" \
		--migrate-to "tcp:127.0.0.1:$port" --migrate-after "$after" "$@" \
		--migrate-metrics "$work/$name-s.json" > "$work/$name-s.out" 2> "$work/$name-s.err"
	src=$?
	wait "$dpid"
	dst=$?
	if [ "$src" != 0 ] || [ "$dst" != 0 ]; then
		cat "$work/$name-s.err" "$work/$name-d.err" >&2
		fail "$name: source exit $src, destination exit $dst"
	fi
	grep -q "migration to tcp:127.0.0.1:$port complete" "$work/$name-s.err" ||
		{ cat "$work/$name-s.err" >&2; fail "$name: the guest finished before it was migrated"; }
	check_dest "$name" "$ref" "$work/$name-d.err" "$work/$name-d.json"
	check_json "$work/$name-s.json" '.duplicate_pages == 0 and .dest_pages_received == .pages' "$name: source summary"
}

# One mig-memtest migration on loopback: the destination with DEST-OPTIONS,
# the source with SOURCE-OPTIONS, both MEM of RAM; fails unless both end
# well, the checksum is verified and every page arrived exactly once.
# Output and metrics: $work/NAME-{s,d}.{out,err,json}.
memtest_pair() { # name mem source-options dest-options
	local name=$1 mem=$2 port dpid
	port=$(free_port)
	"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem "$mem" --metrics "$work/$name-d.json" \
		$4 > "$work/$name-d.out" 2> "$work/$name-d.err" &
	dpid=$!
	pids+=("$dpid")
	wait_listen "$port"
	"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem "$mem" --metrics "$work/$name-s.json" \
		$3 2> "$work/$name-s.err" || { cat "$work/$name-s.err" "$work/$name-d.err" >&2; fail "$name: source failed"; }
	wait "$dpid" || { cat "$work/$name-d.err" >&2; fail "$name: destination failed"; }
	grep -q "checksum ok" "$work/$name-d.err" || fail "$name: no checksum verdict"
	check_exactly_once "$work/$name-d.json"
}
