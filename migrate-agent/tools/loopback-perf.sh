#!/usr/bin/env bash
# loopback-perf: migrate a guest between two vmm processes on 127.0.0.1
# (uffd back end) and print one line of the source's metrics (push_nonzero:
# the push rate counting only non-zero pages, assuming the zero pages were
# all pushed, not demanded).  Used to compare builds side by side:
# alternate them, the machine is noisy.
#   migrate-agent/tools/loopback-perf.sh [BINDIR] [MEM_MiB] [RUNS]
# With MEMTEST=1, mig-memtest instead (the library alone, no VM, no faults).
# DWRAP: a command prefix for the destination (e.g. "perf record -o F").
# ENDS: options for both ends (e.g. "--tls-psk keys.psk": the cost of TLS).
# VMM_ARGS: more options for both vmm processes (e.g. "--busy-poll").
# KEEP=DIR: keep each run's metrics as DIR/sN.json, DIR/dN.json (for
# migrate-agent/tools/fault-steps.py).
set -uo pipefail
BIN=${1:-build/bin}
MEM=${2:-256}
RUNS=${3:-1}
GUEST=${GUEST:-build/guest/guest.elf}
ITERS=${ITERS:-1500}
work=$(mktemp -d /tmp/loopback-perf.XXXXXX)
trap 'rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for _ in $(seq "$RUNS"); do
	p=$(port)
	if [ "${MEMTEST:-0}" = 1 ]; then
		"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$p" --mem "${MEM}M" --touch none \
			--metrics "$work/d.json" ${ENDS:-} > /dev/null 2> "$work/d.err" &
		dpid=$!
		for _ in $(seq 100); do
			ss -Hltn "sport = :$p" | grep -q LISTEN && break
			sleep 0.02
		done
		"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$p" --mem "${MEM}M" \
			--metrics "$work/s.json" ${ENDS:-} > /dev/null 2> "$work/s.err" || cat "$work/s.err"
		wait "$dpid" || cat "$work/d.err"
		echo "$BIN memtest: $(jq -c '{push: .push_MiB_per_s, push_nonzero: ((.push_MiB_per_s * (.pages_pushed - .pages_zero) / .pages_pushed) | floor), pushed: .pages_pushed, zero: .pages_zero, dup: .duplicate_pages, ms: .postcopy_ms}' "$work/s.json")"
		continue
	fi
	# shellcheck disable=SC2086 # VMM_ARGS and ENDS are lists of options
	${DWRAP:-} "$BIN/vmm" run --mem "${MEM}M" --incoming "tcp:127.0.0.1:$p" ${VMM_ARGS:-} \
		--migrate-metrics "$work/d.json" ${ENDS:-} > /dev/null 2> "$work/d.err" &
	dpid=$!
	for _ in $(seq 100); do
		ss -Hltn "sport = :$p" | grep -q LISTEN && break
		sleep 0.02
	done
	# shellcheck disable=SC2086
	"$BIN/vmm" run --image "$GUEST" --mem "${MEM}M" ${VMM_ARGS:-} \
		--cmdline "workload=random mem=$((MEM * 5 / 8))M seed=1 iters=$ITERS quiet=1" \
		--migrate-to "tcp:127.0.0.1:$p" --migrate-after "${AFTER:-1200}" \
		--migrate-metrics "$work/s.json" ${ENDS:-} > /dev/null 2> "$work/s.err" || cat "$work/s.err"
	wait "$dpid" || cat "$work/d.err"
	if [ -n "${KEEP:-}" ]; then
		mkdir -p "$KEEP"
		k=$(find "$KEEP" -name 's*.json' | wc -l)
		cp "$work/s.json" "$KEEP/s$k.json"
		cp "$work/d.json" "$KEEP/d$k.json"
	fi
	echo "$BIN: $(jq -c '{down: .downtime_us, p50: .fault_latency_us.p50, p99: .fault_latency_us.p99, max: .fault_latency_us.max, push: .push_MiB_per_s, push_nonzero: ((.push_MiB_per_s * (.pages_pushed - .pages_zero) / .pages_pushed) | floor), pushed: .pages_pushed, zero: .pages_zero, dem: .pages_demand, dup: .duplicate_pages, infl: .requests_for_pages_in_flight, ms: .postcopy_ms, hist: .fault_latency_us.histogram}' "$work/s.json")"
done
