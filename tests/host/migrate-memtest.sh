#!/usr/bin/env bash
# migrate-memtest: the migration library end to end on plain memory
# (mig-memtest: userfaultfd-armed destination RAM, a writer thread as the
# "guest"): pure postcopy with random faults (also without io_uring), precopy
# rounds + zstd, precopy rounds then a push of runs, a
# sequential toucher, and a destination on uffd-move (UFFDIO_MOVE).  Each
# run: RAM checksum equal at both ends, every page accounted for exactly
# once, nothing sent twice, zero pages counted alike at both ends, metrics
# JSON complete.
# timeout: 180
set -uo pipefail
. tests/host/migrate-lib.bash
need_programs mig-memtest vmm

run() { # name source-options dest-options
	local name=$1
	memtest_pair "$name" 24M "$2" "$3"
	local s=$work/$name-s.json
	check_json "$s" '.duplicate_pages == 0 and .pages_resent_after_recovery == 0' "$name: resent pages"
	check_json "$s" '.dest_pages_received == .pages' "$name: source summary disagrees"
	# A push that COMPLETE overtook (its last batch out, the thread not yet
	# back for the next page) still has an end: its rate was once 0.
	check_json "$s" '.pages_pushed == 0 or .push_MiB_per_s > 0' "$name: pushed pages, no push rate"
	check_json "$s" '.downtime_us > 0 and .total_ms > 0 and .bytes_sent.pages > 0 and .bytes_sent.state > 0' \
		"$name: metrics missing"
	check_json "$s" '.fault_latency_us.p50 <= .fault_latency_us.p99 and .fault_latency_us.p99 <= .fault_latency_us.max' \
		"$name: latency percentiles out of order"
	check_json "$s" '([.fault_latency_us.histogram[].n] | add) == .faults' "$name: histogram does not count every fault"
	# The record says which pages are zero, also those copied as zeros
	# inside a run of data (dest-rx.c): as many as the source sent, where
	# every page went once (precopy rounds resend).
	local d=$work/$name-d.json
	[ "$(jq .pages_precopy "$s")" != 0 ] ||
		check_json "$d" ".pages_zero == $(jq .pages_zero "$s")" "$name: zero pages miscounted at the destination"
	check_json "$d" '.install_calls > 0 and .install_calls <= .pages_received' "$name: install calls not counted"
	echo "$name: ok: $(jq -c '{downtime_us, total_ms, pages_demand, pages_pushed, pages_precopy, pages_zero, pages_zstd, p50: .fault_latency_us.p50, p99: .fault_latency_us.p99}' "$s") install_calls $(jq .install_calls "$d")"
}

run postcopy "--push-runs" "--touch random"
check_json "$work/postcopy-s.json" '.pages_zero > 0' "postcopy: zero pages did not travel as markers"
# The push in PAGE_RUN frames (--push-runs: MIG_FEAT_RUNS): one 24-byte
# header per run, not per page.
check_json "$work/postcopy-s.json" '.bytes_sent.overhead < 24 * (.pages_demand + .pages_pushed / 2)' \
	"postcopy: the push did not send runs"
check_json "$work/postcopy-s.json" '.features == ["runs"]' \
	"postcopy: runs not agreed, or the payload CRC dropped on plain TCP"
# The push on io_uring by default; without the ring (MIG_NO_URING, as on a
# kernel without io_uring) through the connection's own send.
# The push capped there at 4 MiB/s (6 s for the 24 MiB; demand pages are
# not capped), so the toucher meets missing pages however late it is
# scheduled: uncapped, a busy machine once let the push finish first and
# no page was asked for (the run above may see none).
slow_push="--max-bandwidth $((4 << 20))"
MIG_NO_URING=1 run no-uring "--push-runs $slow_push" "--touch random"
check_json "$work/no-uring-s.json" '.pages_pushed > 0 and .features == ["runs"]' "no-uring: no runs pushed"
check_json "$work/no-uring-s.json" '.faults > 0 and .pages_requested > 0' "no-uring: no demand faults happened"
# Precopy rounds, then the push's runs after the switch-over, in one migration.
run precopy-runs "--precopy-rounds 2 --push-runs" "--touch random"
check_json "$work/precopy-runs-s.json" '.pages_precopy > 0 and .pages_pushed > 0' \
	"precopy-runs: not both precopy and the push"
# A peer without runs (--features-off 2: it does not announce MIG_FEAT_RUNS)
# gets a PAGE frame per page, either way round.
run runs-old-dest "--push-runs" "--touch random --features-off 2"
check_json "$work/runs-old-dest-s.json" '.bytes_sent.overhead >= 24 * .pages and .features == []' \
	"runs-old-dest: runs sent to a destination without them"
# Without --push-runs (the default) the source does not announce runs.
run runs-old-source "" "--touch random"
check_json "$work/runs-old-source-s.json" '.bytes_sent.overhead >= 24 * .pages and .features == []' \
	"runs-old-source: a source without runs sent runs"
# A moving back end (UFFDIO_MOVE, Linux 6.8+) takes the run buffer's pages:
# zero pages copied inside a run of data (dest-rx.c) must be zero-filled
# in a slot whose page the last move took.
move=$("$BIN/vmm" probe | grep '^uffd-move ')
if [ "$move" = "uffd-move yes" ]; then
	run uffd-move "" "--touch random --ram-backend uffd-move"
	check_json "$work/uffd-move-d.json" '.ram_backend == "uffd-move"' "uffd-move: another back end"
else
	skip_part "the uffd-move case" "this kernel has no UFFDIO_MOVE ($move)"
fi
run precopy-zstd "--precopy-rounds 2 --compress" "--touch random"
check_json "$work/precopy-zstd-s.json" '.pages_precopy == .pages and .pages_zstd > 0' "precopy-zstd: precopy or zstd not used"
run seq "" "--touch seq"
# Four "vCPUs" read the same pages in the same order, so they fault on a
# page together: the RAM merges their faults into one request, and
# COMPLETE's requests_deduped (faults_deduped) is the RAM's count of them
# (it was a counter nothing wrote, always 0).  The push capped at 4 MiB/s,
# as no-uring's: uncapped it ends in about 100 ms, and a loaded run saw
# pages_demand 0, so whether the touchers met any missing page at all was
# the scheduler's choice; capped, they fault thousands of times together.
run dedup "$slow_push" "--touch seq --touch-start 3000 --touchers 4"
check_json "$work/dedup-s.json" '.faults_deduped > 0' "dedup: no fault merged with four touchers on the same pages"

# Precopy stops when it stops converging: a guest that rewrites its hot
# eighth before every dirty-log fetch makes a third round resend all the
# second sent, so precopy stops after two of the eight rounds allowed.  The
# hot pages whose dirty bits were fetched for the round not taken must go by
# postcopy: were they taken as sent, the checksum would differ.
run precopy-converge "--precopy-rounds 8 --lockstep" "--touch none"
check_json "$work/precopy-converge-s.json" '.precopy_rounds == 8 and .precopy_rounds_done == 2' \
	"precopy-converge: precopy did not stop when it stopped converging"

# Staged copies replaced by a later round: with two rounds in lockstep the
# hot eighth is rewritten once, before the second round, which resends it;
# the rewrite turns some zero pages into data and some data pages into zero
# pages (mig-memtest's fill_page), and nothing dirties them after, so the
# destination installs the second round's staged copies as they are.
run precopy-restage "--precopy-rounds 2 --lockstep" "--touch none"
check_json "$work/precopy-restage-s.json" '.precopy_rounds_done == 2 and .pages_precopy_resent > 0' \
	"precopy-restage: the second round resent nothing"

# Memory: the precopy staging buffer is freed as its pages are installed,
# so the destination ends with about the guest RAM resident, not twice it.
port=$(free_port)
"$BIN/mig-memtest" dest --listen "tcp:127.0.0.1:$port" --mem 96M --touch none \
	> /dev/null 2> "$work/rss-d.err" &
dpid=$!
pids+=("$dpid")
wait_listen "$port"
"$BIN/mig-memtest" source --to "tcp:127.0.0.1:$port" --mem 96M --precopy-rounds 1 \
	2> "$work/rss-s.err" || { cat "$work/rss-s.err" >&2; fail "rss: source failed"; }
wait "$dpid" || { cat "$work/rss-d.err" >&2; fail "rss: destination failed"; }
rss=$(sed -n 's/.*VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "$work/rss-d.err")
[ -n "$rss" ] || fail "rss: not reported"
echo "rss: destination resident $((rss / 1024)) MiB for a 96 MiB guest after precopy"
[ "$rss" -lt $((96 * 1024 * 5 / 4 + 16 * 1024)) ] || fail "rss: $rss kB resident: the staged copy was kept"
echo "migrate-memtest: all runs passed"
