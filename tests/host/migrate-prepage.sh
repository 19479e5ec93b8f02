#!/usr/bin/env bash
# migrate-prepage: the adaptive pre-paging window (migrate-agent/
# source-prepage.h).  The policy on made-up fault sequences
# (mig-prepage-check), then mig-memtest under sequential, stride and random
# touch, adaptive and fixed: the RAM checksum equal at both ends, every page
# accounted for exactly once, nothing sent twice, and the metrics' "prepage"
# object naming the policy that ran.
# timeout: 180
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest mig-prepage-check

"$BIN/mig-prepage-check" || fail "the policy's unit checks"

run() { # name source-options dest-options policy
	local name=$1
	memtest_pair "$name" 32M "$2" "$3"
	local s=$work/$name-s.json
	check_json "$s" '.duplicate_pages == 0 and .dest_pages_received == .pages' "$name: pages lost or doubled"
	check_json "$s" ".prepage.policy == \"$4\" and .prepage.late <= .prepage.followed" "$name: prepage metrics"
	echo "$name: ok: $(jq -c '{faults, blocktime_ms, p50: .fault_latency_us.p50, prepage}' "$s")"
}

# 32 MiB = 8192 pages: seq and stride start half-way, away from the push's cursor.
for pol in adaptive fixed; do
	opt=""
	[ "$pol" = fixed ] && opt="--prepage-fixed"
	run "seq-$pol" "$opt" "--touch seq --touch-start 4096" "$pol"
	run "stride-$pol" "$opt" "--touch stride --stride 16 --touch-start 4096" "$pol"
	run "random-$pol" "$opt" "--touch random" "$pol"
done
# A downward-growing window never leaves RAM: a stride touch ending at the
# last pages, and one with a huge base window.
run "stride-end" "--prepage 4096" "--touch stride --stride 3 --touch-start 8000" adaptive
echo "migrate-prepage: all runs passed"
