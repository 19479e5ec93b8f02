#!/usr/bin/env bash
# Postcopy live migration between two QEMU nodes on the patched kernel.
#
# Node a (10.77.0.1) runs the guest program under the project's VMM, nested
# on its /dev/kvm; node b (10.77.0.2) waits with `vmm run --incoming`, its
# guest RAM armed with the `userfault` back end (MADV_USERFAULT + the
# article's userfaultfd protocol + remap_anon_pages).  Node a first runs the
# same guest unmigrated for the reference checksum, then runs it again and
# migrates it to node b while it runs.  The run fails unless the checksum
# after migration equals the reference and every page arrived exactly once.
#
# Used by `make demo` (scripts/demo.sh) and tests/twonode/migrate-nodes.sh.
usage() {
	cat <<'USAGE'
usage: scripts/twonode-migrate.sh [options]
  --mem SIZE        guest RAM (default 8M)
  --workload ARGS   guest command line (default: workload=random mem=2M ops=20000 iters=1500 seed=8)
  --after MS        migrate this long after the guest starts (default: a
                    quarter of the reference run's time in node a, so the
                    guest is mid-run whatever the machine's speed)
  --backend NAME    destination RAM back end (default userfault)
  --name NAME       node name prefix for logs in build/nodes (default migrate)
  --timeout SECONDS limit for each node (default 560)
  --tls             both channels over TLS 1.3 with a fresh PSK (the node
                    kernel seals the sends: kTLS); the run fails unless both
                    ends' metrics say so
  --max-bandwidth BYTES  cap the source's push at BYTES a second (default:
                    no cap; demand pages are never capped)
USAGE
}
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

mem=8M
workload="workload=random mem=2M ops=20000 iters=1500 seed=8"
after=auto
backend=userfault
name=migrate
limit=560
tls=
cap_opt=
while [ $# -gt 0 ]; do
	case "$1" in
	--mem) mem=$2; shift 2 ;;
	--workload) workload=$2; shift 2 ;;
	--after) after=$2; shift 2 ;;
	--backend) backend=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--timeout) limit=$2; shift 2 ;;
	--tls) tls=1; shift ;;
	--max-bandwidth) cap_opt="--max-bandwidth $2"; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "twonode-migrate: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
done

say() { echo "migrate-demo: $*"; }
fail() { echo "migrate-demo: FAILED: $*" >&2; exit 1; }
port=$((47000 + RANDOM % 1000 * 2))
G=/usr/share/postcopy/guest.elf
sum='sed -n "s/^vmm: guest exited with status 0; .* last: done .*checksum=\(0x[0-9a-f]*\).*/\1/p"'
alog=build/nodes/$name-a.log
blog=build/nodes/$name-b.log
# --tls: the same fresh PSK written in both nodes (a test key: it travels
# on the node's command line), and the option both VMMs take.
tls_setup= tls_opt=
if [ -n "$tls" ]; then
	command -v openssl > /dev/null || fail "--tls: openssl (command) missing: make deps"
	tls_setup="umask 077;echo qemu:$(openssl rand -hex 32)>/tmp/k.psk"
	tls_opt="--tls-psk /tmp/k.psk"
fi

# Inside node b: the destination.  Its summary and checksum come back on the
# console as @@ lines.
b_cmd="$tls_setup
nc -l -p 7200 > /dev/null &
echo '@@PHASE destination ready, waiting on 10.77.0.2:7100 (back end $backend)'
timeout $((limit - 40)) vmm run --mem $mem --incoming tcp:10.77.0.2:7100 --ram-backend $backend $tls_opt \
	--recover-ms 20000 --migrate-metrics /tmp/d.json > /tmp/d.out 2> /tmp/d.err
rc=\$?
cat /tmp/d.err
echo \"@@DEST_SUM \$($sum /tmp/d.err)\"
echo \"@@DEST_JSON \$(tr -d '\n' < /tmp/d.json 2>/dev/null)\"
exit \$rc"

# Inside node a: the reference run, then the run that migrates.
a_cmd="$tls_setup
echo '@@PHASE the link alone: 32 MiB of raw TCP to node b'
for i in \$(seq 60); do
	s=\$(cut -d' ' -f1 /proc/uptime)
	dd if=/dev/zero bs=65536 count=512 2> /dev/null | nc 10.77.0.2 7200 2> /dev/null && break
	sleep 1
done
e=\$(cut -d' ' -f1 /proc/uptime)
echo \"@@LINK_MIBS \$(awk -v s=\$s -v e=\$e 'BEGIN { printf \"%.1f\", 32 / (e - s) }')\"
echo '@@PHASE reference run (not migrated)'
t0=\$(cut -d' ' -f1 /proc/uptime)
timeout 200 vmm run --mem $mem --image $G --cmdline '$workload' > /dev/null 2> /tmp/ref.err || { cat /tmp/ref.err; exit 1; }
t1=\$(cut -d' ' -f1 /proc/uptime)
echo \"@@REF_SUM \$($sum /tmp/ref.err)\"
after=$after
[ \$after = auto ] && after=\$(awk -v a=\$t0 -v b=\$t1 'BEGIN { ms = (b - a) * 250; print (ms < 50 ? 50 : int(ms)) }')
echo \"@@PHASE source run, migrating to node b after \$after ms\"
timeout $((limit - 240)) vmm run --mem $mem --image $G --cmdline '$workload' --migrate-to tcp:10.77.0.2:7100 $tls_opt $cap_opt \
	--migrate-after \$after --recover-ms 20000 --migrate-metrics /tmp/s.json > /dev/null 2> /tmp/s.err
rc=\$?
cat /tmp/s.err
echo \"@@SRC_JSON \$(tr -d '\n' < /tmp/s.json 2>/dev/null)\"
exit \$rc"

rm -f "$alog" "$blog"
say "booting node a (source) and node b (destination): patched kernel $(cat build/kernel/key 2>/dev/null), QEMU TCG, nested KVM, link over 127.0.0.1:$port"
tests/node-launch --name "$name-b" --link b --link-port "$port" --timeout "$limit" --quiet -- "$b_cmd" &
b=$!
tests/node-launch --name "$name-a" --link a --link-port "$port" --timeout "$limit" --quiet -- "$a_cmd" &
a=$!

# Follow both consoles: phases and the VMM's own lines, as they happen.
(tail --pid=$$ -n +1 -F "$alog" 2> /dev/null | sed -un 's/\r$//; s/^@@PHASE /  [node a] /p; s/^\(vmm\|migrate\): /  [node a] &/p') &
fa=$!
(tail --pid=$$ -n +1 -F "$blog" 2> /dev/null | sed -un 's/\r$//; s/^@@PHASE /  [node b] /p; s/^\(vmm\|migrate\): /  [node b] &/p') &
fb=$!

wait $a
a_rc=$?
# Node b waits for a migration; if node a never sent one, do not wait for
# node b's whole time limit.
if [ "$a_rc" != 0 ]; then
	(sleep 30; for c in $(pgrep -P "$b"); do kill "$c" 2> /dev/null; done) &
fi
wait $b
b_rc=$?
sleep 0.5
# The followers are subshells running tail | sed: end their tails (or they
# outlive this script and keep its output open); sed then reads the end of
# its input and the subshells return.  With SIGPIPE, the signal of a reader
# that went away: bash reports a pipeline element that SIGTERM killed
# ("Terminated", in the middle of the demo's output), never one SIGPIPE did.
pkill -PIPE -x tail -P "$fa,$fb" 2> /dev/null
wait $fa $fb 2> /dev/null

field() { tr -d '\r' < "$1" | sed -n "s/^@@$2 //p" | tail -n1; }
ref=$(field "$alog" REF_SUM)
got=$(field "$blog" DEST_SUM)
sjson=$(field "$alog" SRC_JSON)
djson=$(field "$blog" DEST_JSON)
link=$(field "$alog" LINK_MIBS)

[ "$a_rc" = 0 ] || fail "node a (source) exited $a_rc; console: $alog"
[ "$b_rc" = 0 ] || fail "node b (destination) exited $b_rc; console: $blog"
# grep reads to the end (no -q): with pipefail, a grep that quits at its
# first match makes tr die of SIGPIPE on a long console log, and the
# pipeline fail although the line is there.
tr -d '\r' < "$alog" | grep "^vmm: migration to tcp:10.77.0.2:7100 complete" > /dev/null ||
	fail "the source did not migrate (the guest finished first?); console: $alog"
tr -d '\r' < "$blog" | grep "^vmm: lazy RAM: backend=$backend " > /dev/null ||
	fail "the destination did not use the $backend back end; console: $blog"
[ -n "$sjson" ] && [ -n "$djson" ] || fail "a node did not report its migration summary"

j() { printf '%s' "$1" | jq -r "$2"; }
echo
say "summary"
printf '  %-34s %s\n' \
	"guest" "$mem, $workload" \
	"downtime (source clock)" "$(j "$sjson" '.downtime_us') us (pause $(j "$sjson" '.switchover_us.pause') us, save $(j "$sjson" '.switchover_us.save_state') us, send $(j "$sjson" '.switchover_us.send_state') us)" \
	"state received to vCPUs running" "$(j "$djson" '.state_to_resume_us') us" \
	"demand faults served" "$(j "$djson" '.faults') faults, $(j "$djson" '.pages_requested') pages requested, $(j "$djson" '.pages_demand') sent on demand" \
	"demand-fault latency" "p50 $(j "$djson" '.fault_latency_us.p50') us, p99 $(j "$djson" '.fault_latency_us.p99') us, max $(j "$djson" '.fault_latency_us.max') us" \
	"vCPU blocked time" "$(j "$djson" '.blocktime_ms') ms" \
	"pages pushed in the background" "$(j "$djson" '.pages_pushed') of $(j "$djson" '.pages') ($(j "$djson" '.pages_zero') zero pages sent as markers)" \
	"duplicate pages" "$(j "$djson" '.duplicate_pages')" \
	"bytes sent" "$(j "$sjson" '.bytes_sent.total') (pages $(j "$sjson" '.bytes_sent.pages'), state $(j "$sjson" '.bytes_sent.state'), overhead $(j "$sjson" '.bytes_sent.overhead'))" \
	"postcopy phase" "$(j "$djson" '.postcopy_ms') ms" \
	"postcopy rate (page bytes)" "$(j "$sjson" '.bytes_sent.pages / 1048576 / (1e-3 * '"$(j "$djson" '.postcopy_ms')"') | . * 10 | round / 10') MiB/s; the link alone: ${link:-?} MiB/s (raw TCP, node a to b, before the run)" \
	"checksum, unmigrated run" "${ref:-none}" \
	"checksum after migration" "${got:-none}"
echo
[ -n "$ref" ] && [ "$ref" = "$got" ] || fail "the guest's checksum after migration differs from the unmigrated run"
printf '%s' "$djson" | jq -e '.pages_received == .pages and .duplicate_pages == 0 and
	.pages_demand + .pages_pushed + .pages_precopy == .pages' > /dev/null ||
	fail "pages not accounted for exactly once"
if [ -n "$tls" ]; then
	for js in "$sjson" "$djson"; do
		printf '%s' "$js" | jq -e '.tls.sessions >= 2 and .tls.ktls_send' > /dev/null ||
			fail "--tls: an end's sends were not sealed by the kernel: $(printf '%s' "$js" | jq -c .tls)"
	done
	say "TLS 1.3 (PSK) on both channels, sends sealed by each node's kernel: $(printf '%s' "$sjson" | jq -c .tls)"
fi
say "OK: the VM moved from node a to node b while running; memory identical, every page sent once"
