#!/usr/bin/env bash
# migrate-fuzz: run the libFuzzer targets (ASan+UBSan): the wire-protocol
# parser (build/fuzz/wire-fuzz), from seeds of valid frames, the
# destination's state machine (build/fuzz/dest-fuzz: whole sessions against
# a fake VM, invariants of the page record) and the source's
# (build/fuzz/source-fuzz: a destination's frames after the switch-over; no
# page twice, COMPLETE only when all were sent), from the corpora in
# migrate-agent/fuzz/corpus.  Any crash, sanitizer report or abort (a
# broken invariant) fails the test.
#
# By a time budget with a floor: each target first runs its floor of
# inputs whatever the time (a slow machine takes longer, it does not fail),
# then more on the corpus that grew, up to a cap, while its budget lasts
# (docs/testing.md "Fuzzing": what the floors reach, runs/s here).
#   target       floor     cap       budget
#   wire-fuzz    100,000   300,000   20 s
#   dest-fuzz     50,000   100,000   45 s
#   source-fuzz   50,000   100,000   30 s
# The timeout is a hang guard: on a loaded 2-core machine without KVM, with
# two CPU hogs, the floors took 69 s of a 106 s run (about 160 s at the
# lowest rates measured there).
# timeout: 600
set -uo pipefail
. tests/host/migrate-lib.bash
fuzz=build/fuzz/wire-fuzz
if [ ! -x "$fuzz" ] || [ ! -x build/fuzz/dest-fuzz ] || [ ! -x build/fuzz/source-fuzz ]; then
	make -s fuzz > "$work/build.log" 2>&1 || { cat "$work/build.log" >&2; skip "cannot build the libFuzzer target (clang -fsanitize=fuzzer)"; }
fi
mkdir -p "$work/corpus"
# Seeds: valid streams of each message kind (first byte: the fuzzer's context mode).
python3 - "$work/corpus" <<'PY'
import struct, sys, zlib, os
def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 & -(crc & 1))
    return crc ^ 0xffffffff
def frame(t, payload, seq=0):
    h = struct.pack('<IHHIII', 0x474d4350, t, 0, len(payload), seq, crc32c(payload))
    return h + struct.pack('<I', crc32c(h)) + payload
ram = 16 * 4096 * 2
hello = struct.pack('<IHHIIQQIIHHI', 4, 1, 1, 4096, 0, 7, ram, 0, 0, 1, 0, 0)
layout = struct.pack('<QII', ram, 4096, 1) + struct.pack('<QQ', 0, ram) + bytes(16 * 7)
page = struct.pack('<QHHI', 4096, 0, 2, 4096) + bytes(range(256)) * 16
zero = struct.pack('<QHHI', 8192, 1, 0, 0)
req = struct.pack('<II', 2, 0) + struct.pack('<QQ', 0, 4096)
resume = struct.pack('<QII', ram // 4096, 0, 0) + bytes((ram // 4096 + 7) // 8)
err = struct.pack('<II', 1, 5) + b'oops!'
d = sys.argv[1]
seeds = {
  'hello': bytes([0x40]) + frame(1, hello),
  'stream': bytes([0x43]) + frame(1, hello) + frame(2, layout, 1) + frame(4, page, 2) + frame(4, zero, 3),
  'after-hello': bytes([0x43]) + frame(5, req) + frame(8, resume, 1) + frame(9, err, 2),
  'raw-after-hello': bytes([0x03]) + frame(4, page) + frame(3, struct.pack('<QQ', 1, 4) + b'blob'),
  # A destination's HELLO with a RAM size that is no page multiple (issue 10,
  # defect 12: once accepted, the context's RAM size broke the target's check).
  'dest-hello-bad-ram': bytes([0x20]) + frame(1, struct.pack('<IHHIIQQIIHHI', 4, 2, 1, 4096, 0, 7, 4097, 0, 0, 1, 0, 0)),
}
for k, v in seeds.items():
    open(os.path.join(d, k), 'wb').write(v)
PY
# fuzz NAME CORPUS MAX_LEN FLOOR CAP BUDGET: FLOOR runs of build/fuzz/NAME
# on CORPUS (which grows), then, if BUDGET seconds are not over, more up to
# CAP runs in all, for what is left of them (libFuzzer stops at
# -max_total_time or -runs, whichever comes first).
fuzz() {
	local name=$1 corpus=$2 max_len=$3 floor=$4 cap=$5 budget=$6
	local log=$work/$name.log t0=$SECONDS left more=0 rc
	build/fuzz/$name -runs="$floor" -max_len="$max_len" -timeout=10 "$corpus" > "$log" 2>&1
	rc=$?
	tail -n 3 "$log"
	[ "$rc" = 0 ] || { tail -n 40 "$log" >&2; fail "$name found a crash or a broken invariant (exit $rc)"; }
	grep -q "^Done $floor runs" "$log" || fail "$name did not complete its $floor runs"
	left=$((budget - (SECONDS - t0)))
	if [ "$left" -ge 2 ]; then
		build/fuzz/$name -runs=$((cap - floor)) -max_total_time="$left" -max_len="$max_len" \
			-timeout=10 "$corpus" > "$log.more" 2>&1
		rc=$?
		tail -n 1 "$log.more"
		[ "$rc" = 0 ] || { tail -n 40 "$log.more" >&2; fail "$name found a crash or a broken invariant in its extra runs (exit $rc)"; }
		more=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log.more")
		[ -n "$more" ] || fail "$name's extra runs did not finish"
	fi
	echo "$name: $floor + $more runs in $((SECONDS - t0)) s (floor $floor, budget $budget s)"
	total+=("$name $((floor + more))")
}
total=()
fuzz wire-fuzz "$work/corpus" 9000 100000 300000 20
mkdir -p "$work/dest-corpus" "$work/source-corpus"
cp migrate-agent/fuzz/corpus/dest/* "$work/dest-corpus/"
cp migrate-agent/fuzz/corpus/source/* "$work/source-corpus/"
fuzz dest-fuzz "$work/dest-corpus" 8192 50000 100000 45
fuzz source-fuzz "$work/source-corpus" 8192 50000 100000 30
echo "migrate-fuzz: ${total[*]} runs, no crash"
