#!/usr/bin/env python3
"""fault-steps: where a demand fault's and the switch-over's time went, from
the source's and destination's metrics of runs on one host (one clock).

    migrate-agent/tools/fault-steps.py DIR...

Each DIR holds sN.json and dN.json pairs (loopback-perf.sh with KEEP=DIR).

Prints, pooled over every given run, the p50 / p99 (us) of each step of the
faults served by their reply (the same steps as bench/run's table), and the
median of each switch-over step and of the downtime over the runs.  For
side-by-side comparisons of builds (docs/migration.md, "Performance steps").
"""
import glob
import json
import os
import statistics
import sys

STEPS = ["fault->request sent", "request->source read it", "source framed the page",
         "reply->dest read it", "install"]
SWITCH = [("pause", "pause", "paused"), ("save", "paused", "state_saved"),
          ("send+receive state", "state_saved", "state_received"),
          ("wait bulk DONE", "state_received", "bulk_done"),
          ("load", "bulk_done", "state_loaded"), ("start vCPUs", "state_loaded", "vcpus_resumed")]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def fault_rows(s, d):
    src = {r[0]: r for r in s["stamps"]["records"]}
    for r in d["stamps"]["records"]:
        q = src.get(r[0])
        if not q or not r[5] or not q[4] or not r[6]:
            continue  # served by the push, or not seen by both sides
        t = [r[1], r[2], q[3], q[4], r[5], r[6]]
        yield [(t[k + 1] - t[k]) / 1000.0 for k in range(5)]


def main():
    for dirname in sys.argv[1:]:
        files = []
        for sf in sorted(glob.glob(os.path.join(dirname, "s*.json"))):
            files += [sf, os.path.join(dirname, "d" + os.path.basename(sf)[1:])]
        report(dirname, files)


def report(label, files):
    rows, sw, down, lat50, lat99, push, pushnz = [], {k[0]: [] for k in SWITCH}, [], [], [], [], []
    for sf, df in zip(files[::2], files[1::2]):
        s, d = json.load(open(sf)), json.load(open(df))
        rows += list(fault_rows(s, d))
        ev = dict(s["stamps"]["switchover"], **d["stamps"]["switchover"])
        for name, a, b in SWITCH:
            if ev.get(a) and ev.get(b):
                sw[name].append((ev[b] - ev[a]) / 1000.0)
        down.append(d["downtime_us"])
        lat50.append(s["fault_latency_us"]["p50"])
        lat99.append(s["fault_latency_us"]["p99"])
        push.append(s["push_MiB_per_s"])
        pushnz.append(s.get("push_nonzero_MiB_per_s") or 0)
    med = statistics.median
    print(f"{label}: {len(files) // 2} runs, {len(rows)} faults served by their reply")
    print(f"  fault p50 {med(lat50):.0f} us, p99 {med(lat99):.0f} us (medians of the runs); "
          f"downtime median {med(down):.0f} us [{min(down):.0f}-{max(down):.0f}]; "
          f"push {med(push):.0f} MiB/s, non-zero {med(pushnz):.0f} MiB/s")
    for k, name in enumerate(STEPS):
        v = [r[k] for r in rows]
        print(f"  {name:26s} p50 {pct(v, 0.5):8.1f}  p99 {pct(v, 0.99):8.1f}")
    tot = [sum(r) for r in rows]
    print(f"  {'total':26s} p50 {pct(tot, 0.5):8.1f}  p99 {pct(tot, 0.99):8.1f}")
    for name, _, _ in SWITCH:
        v = sw[name]
        if v:
            print(f"  switch-over {name:20s} median {med(v):8.1f}  [{min(v):.1f}-{max(v):.1f}]")


if __name__ == "__main__":
    main()
