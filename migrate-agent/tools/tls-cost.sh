#!/usr/bin/env bash
# tls-cost: the cost of TLS on the push, the library alone (mig-memtest, no
# VM, no faults): builds and modes alternated run by run, each run one line
# of push MiB/s and the CPU seconds (user+sys) of each end, then the median
# of each figure per build and mode.  The machine is shared: compare only
# figures of one invocation.
#   migrate-agent/tools/tls-cost.sh [MEM_MiB] [RUNS] BINDIR...
# MODES: what to alternate (default "plain x509 psk").
set -uo pipefail
MEM=${1:-256}
RUNS=${2:-3}
shift 2
[ $# -gt 0 ] || set -- build/bin
work=$(mktemp -d /tmp/tls-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
scripts/make-tls-creds.sh "$work/x509" 127.0.0.1 > /dev/null
umask 077 # the PSK files are secrets: readable by their owner only
printf 'qemu:%s\n' "$(openssl rand -hex 32)" > "$work/keys.psk"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
flags() {
	case $1 in
	plain) ;;
	x509) echo "--tls-creds $work/x509 --tls-hostname 127.0.0.1" ;;
	psk) echo "--tls-psk $work/keys.psk" ;;
	esac
}
for run in $(seq "$RUNS"); do
	for bin in "$@"; do
		for mode in ${MODES:-plain x509 psk}; do
			p=$(port)
			/usr/bin/time -f '%U %S' -o "$work/dt" "$bin/mig-memtest" dest \
				--listen "tcp:127.0.0.1:$p" --mem "${MEM}M" --touch none \
				$(flags "$mode") > /dev/null 2> "$work/d.err" &
			dpid=$!
			for _ in $(seq 100); do
				ss -Hltn "sport = :$p" | grep -q LISTEN && break
				sleep 0.02
			done
			/usr/bin/time -f '%U %S' -o "$work/st" "$bin/mig-memtest" source \
				--to "tcp:127.0.0.1:$p" --mem "${MEM}M" --metrics "$work/s.json" \
				$(flags "$mode") > /dev/null 2> "$work/s.err" || cat "$work/s.err"
			wait "$dpid" || cat "$work/d.err"
			printf '%s %s %s %s %s\n' "$run" "$bin" "$mode" \
				"$(jq .push_MiB_per_s "$work/s.json")" \
				"$(awk '{ printf "%.2f", $1 + $2 }' "$work/st") $(awk '{ printf "%.2f", $1 + $2 }' "$work/dt")"
		done
	done
done | tee "$work/runs"
echo "medians: build mode push_MiB/s source_cpu_s dest_cpu_s"
python3 - "$work/runs" << 'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, b, m, push, sc, dc = line.split()
    rows.setdefault((b, m), []).append((float(push), float(sc), float(dc)))
for (b, m), v in rows.items():
    print(b, m, *("%.2f" % statistics.median(x[k] for x in v) for k in range(3)))
PY
