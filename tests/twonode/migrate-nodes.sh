#!/usr/bin/env bash
# migrate-nodes: postcopy live migration between two QEMU nodes on the
# patched kernel, over their link (node a 10.77.0.1 -> node b 10.77.0.2),
# nested KVM, destination RAM served by the `userfault` back end
# (MADV_USERFAULT + the article's userfaultfd protocol + remap_anon_pages).
# Node a runs the guest once unmigrated (the reference checksum), then again
# with --migrate-to; node b runs `vmm run --incoming`.  The checksum at b
# must equal the reference, and b must have received every page exactly once.
# Skips (77) when a node has no usable nested KVM or lacks the back end.
# MIGRATE_NODES_BACKEND=uffd runs it with the stock back end (debugging).
# timeout: 600
set -u
logs=build/tests/logs
mkdir -p "$logs"
port=$((47000 + RANDOM % 1000 * 2))
G=/usr/share/postcopy/guest.elf
be=${MIGRATE_NODES_BACKEND:-userfault}
cmd="workload=random mem=1M ops=20000 iters=1500 seed=8 quiet=1"
sum='sed -n "s/^vmm: guest exited with status 0; .* last: done .*checksum=\(0x[0-9a-f]*\).*/\1/p"'

b_cmd="[ -c /dev/kvm ] || { echo '@@SKIP no /dev/kvm in node b'; exit 77; }
vmm probe $be > /dev/null 2>&1 || { echo \"@@SKIP no $be back end: \$(vmm probe $be 2>&1)\"; exit 77; }
timeout 400 vmm run --mem 4M --incoming tcp:10.77.0.2:7100 --ram-backend $be --recover-ms 20000 \
	--migrate-metrics /tmp/d.json > /tmp/d.out 2> /tmp/d.err
rc=\$?
cat /tmp/d.err
echo \"@@DEST_SUM \$($sum /tmp/d.err)\"
echo \"@@DEST_JSON \$(tr -d '\n' < /tmp/d.json 2>/dev/null)\"
echo \"@@DEST_RC \$rc\"
exit \$rc"

a_cmd="[ -c /dev/kvm ] || { echo '@@SKIP no /dev/kvm in node a'; exit 77; }
timeout 60 kvm-smoke > /dev/null 2>&1 || { echo '@@SKIP nested KVM does not run a guest'; exit 77; }
timeout 200 vmm run --mem 4M --image $G --cmdline '$cmd' > /dev/null 2> /tmp/ref.err
echo \"@@REF_SUM \$($sum /tmp/ref.err)\"
timeout 300 vmm run --mem 4M --image $G --cmdline '$cmd' --migrate-to tcp:10.77.0.2:7100 \
	--migrate-after 200 --recover-ms 20000 --migrate-metrics /tmp/s.json > /dev/null 2> /tmp/s.err
rc=\$?
cat /tmp/s.err
echo \"@@SRC_JSON \$(tr -d '\n' < /tmp/s.json 2>/dev/null)\"
echo \"@@SRC_RC \$rc\"
exit \$rc"

tests/node-launch --name migrate-b --link b --link-port "$port" --timeout 560 --quiet -- "$b_cmd" &
b=$!
tests/node-launch --name migrate-a --link a --link-port "$port" --timeout 560 --quiet -- "$a_cmd"
a_rc=$?
# Node b waits for a migration; if a never sent one, do not wait 10 minutes.
# (Stopping node-launch's children, its qemu timeout among them, ends it.)
( sleep 120; for c in $(pgrep -P "$b"); do kill "$c" 2> /dev/null; done ) &
watchdog=$!
wait $b
b_rc=$?
kill "$watchdog" 2> /dev/null
alog=$(tr -d '\r' < build/nodes/migrate-a.log)
blog=$(tr -d '\r' < build/nodes/migrate-b.log)
field() { printf '%s\n' "$1" | sed -n "s/^@@$2 //p" | tail -n1; }
if printf '%s\n%s\n' "$alog" "$blog" | grep -q '^@@SKIP'; then
	printf '%s\n%s\n' "$alog" "$blog" | sed -n 's/^@@SKIP //p' | head -n1 >&2
	exit 77
fi
ref=$(field "$alog" REF_SUM)
got=$(field "$blog" DEST_SUM)
djson=$(field "$blog" DEST_JSON)
sjson=$(field "$alog" SRC_JSON)
printf '%s\n' "$alog" | grep -E '^(vmm|migrate):' | sed 's/^/a| /'
printf '%s\n' "$blog" | grep -E '^(vmm|migrate):' | sed 's/^/b| /'
echo "node a: exit $a_rc, reference checksum $ref"
echo "node b: exit $b_rc, checksum after migration $got"
echo "source summary: $sjson"
echo "destination summary: $djson"
[ "$a_rc" = 0 ] && [ "$b_rc" = 0 ] || { echo "FAIL: a node failed"; exit 1; }
[ -n "$ref" ] && [ "$ref" = "$got" ] || { echo "FAIL: checksum differs"; exit 1; }
printf '%s\n' "$alog" | grep -q "vmm: migration to tcp:10.77.0.2:7100 complete" ||
	{ echo "FAIL: the source did not migrate (guest finished first?)"; exit 1; }
printf '%s\n' "$blog" | grep -q "^vmm: lazy RAM: backend=$be " ||
	{ echo "FAIL: the destination did not use the $be back end"; exit 1; }
echo "$djson" | jq -e '.pages_received == .pages and .duplicate_pages == 0 and
	.pages_demand + .pages_pushed + .pages_precopy == .pages' > /dev/null ||
	{ echo "FAIL: pages not accounted for exactly once"; exit 1; }
echo "migrate-nodes: passed"
