#!/usr/bin/env bash
# migrate-stamps: the agent's step stamps (migrate-agent/stamps.c), which the
# benchmark turns into "where each microsecond goes", describe a real
# migration consistently.  One postcopy migration between two vmm processes
# on loopback; then, in both metrics JSONs: one record per demand fault, no
# record dropped; each side's steps in causal order, and across the two
# sides on the shared clock (a request is read after it was sent, a reply
# after it was sent); the switch-over moments in order; the page map has
# every page once, with the destination's demand, pushed and zero counts.
# Only orders and counts are checked, never durations.
# timeout: 60
# needs: kvm
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs vmm
need_guest
need_kvm

cmd="workload=random iters=$(sized 3000) quiet=1"
port=$(free_port)
timeout "$(guard 40)" "$BIN/vmm" run --mem 32M --incoming "tcp:127.0.0.1:$port" \
	--migrate-metrics "$work/d.json" > /dev/null 2> "$work/d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port"
# The push capped (8 MiB/s): the guest runs for seconds with pages missing,
# so demand faults happen however loaded the host (uncapped, the push was
# done before a descheduled vCPU touched anything: '.faults > 0' failed).
timeout "$(guard 40)" "$BIN/vmm" run --image "$GUEST" --mem 32M --cmdline "$cmd" \
	--migrate-to "tcp:127.0.0.1:$port" --migrate-after 150 --max-bandwidth 8388608 \
	--migrate-metrics "$work/s.json" > /dev/null 2> "$work/s.err"
src=$?
wait "$dpid"
dst=$?
[ "$src" = 0 ] && [ "$dst" = 0 ] ||
	{ cat "$work/s.err" "$work/d.err" >&2; fail "source exit $src, destination exit $dst"; }
check_json "$work/d.json" '.faults > 0' "no demand fault happened: nothing to check"

# Records: [page, fault, request_sent, request_received, page_sent, page_received, installed]
check_json "$work/d.json" '.stamps.dropped == 0 and (.stamps.records | length) == .faults' \
	"destination: one record per demand fault"
check_json "$work/d.json" '[.stamps.records[] | select(.[1] == 0 or .[2] < .[1] or .[3] != 0 or .[4] != 0)] == []' \
	"destination: every record has its fault, a request sent after it, no source step"
check_json "$work/d.json" '[.stamps.records[] | select(.[6] != 0 and (.[6] < .[1] or (.[5] != 0 and .[6] < .[5])))] == []' \
	"destination: installed after the fault and after the reply was read"
check_json "$work/s.json" '.stamps.dropped == 0 and ([.stamps.records[] | select(.[3] == 0 or .[1] != 0 or (.[4] != 0 and .[4] < .[3]))] == [])' \
	"source: every record read its request, replied after it"

# Across the sides (one host, one CLOCK_MONOTONIC): causality.
jq -s '(.[0].stamps.records | map({key: (.[0] | tostring), value: .}) | from_entries) as $src |
	[.[1].stamps.records[] | . as $d | $src[($d[0] | tostring)] as $s | select($s != null) |
	 select($s[3] < $d[2] or ($s[4] != 0 and $d[5] != 0 and $d[5] < $s[4]))] | length' \
	"$work/s.json" "$work/d.json" > "$work/bad" || fail "jq failed on the stamps"
[ "$(cat "$work/bad")" = 0 ] || fail "$(cat "$work/bad") faults whose steps are out of causal order across the two sides"
check_json "$work/d.json" '.pages_demand > 0 and ([.stamps.records[] | select(.[5] != 0)] | length) == .pages_demand' \
	"destination: one reply read per demand page"

# The switch-over, each side in order, and the state received after the pause.
check_json "$work/s.json" '.stamps.switchover | .pause > 0 and .pause <= .paused and .paused <= .state_saved and .state_saved <= .state_sent' \
	"source: switch-over moments in order"
check_json "$work/d.json" '.stamps.switchover | .state_received > 0 and .state_received <= .state_loaded and .state_loaded <= .vcpus_resumed' \
	"destination: switch-over moments in order"
jq -s -e '.[0].stamps.switchover.state_saved <= .[1].stamps.switchover.state_received' \
	"$work/s.json" "$work/d.json" > /dev/null || fail "the state was received before it was saved"

# The page map: every page once (32 MiB: under 65536 pages, so no sampling).
check_json "$work/d.json" '.stamps.page_map.every == 1 and (.stamps.page_map.pages | length) == .pages and ([.stamps.page_map.pages[][0]] | unique | length) == .pages' \
	"page map: every page exactly once"
# A page's kind is a number the map's own "kinds" names (the record's enum ram_arrival).
check_json "$work/d.json" '.stamps.page_map as $m | ($m.kinds | index("demand")) as $d | ($m.kinds | index("pushed")) as $p | $d != null and $p != null and ([$m.pages[] | select(.[2] == $d)] | length) == .pages_demand and ([$m.pages[] | select(.[2] == $p)] | length) == .pages_pushed and ([$m.pages[] | select(.[3] == 1)] | length) == .pages_zero' \
	"page map: demand, pushed and zero counts"
echo "migrate-stamps: $(jq -c '{faults, pages_demand, pages_pushed, pages_zero, records: (.stamps.records | length)}' "$work/d.json"), in causal order on both sides"
