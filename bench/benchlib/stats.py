"""bench/benchlib/stats.py: Statistics over runs: percentiles, medians, pooled distributions, the summary
of every figure per configuration and size, ratios, the cost of TLS."""

import math

from .common import FAULT_STEPS, FIGURES, PAIRS, QEMU, TLS_PAIRS


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[k]


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)


# ---------------------------------------------------------------- plots

PAGE_CATEGORIES = ["pushed", "zero", "precopy", "demand"]


def representative(results, config, size):
    """The run of CONFIG at SIZE whose total time is the median of its
    completed runs (what the per-run figures draw), or None."""
    good = sorted((r for r in results if r["config"] == config and r["size_mib"] == size and
                   not r.get("error") and r.get("total_ms") is not None),
                  key=lambda r: r["total_ms"])
    return good[(len(good) - 1) // 2] if good else None


def pooled_cdf(runs):
    """[(latency us, fraction <= it)] over every demand fault of RUNS: exact
    when the runs carry each fault's latency, else from log2 histograms
    (steps at bucket upper bounds)."""
    lats = sorted(v for r in runs for v in (r.get("latencies_us") or []))
    if lats:
        return [(max(v, 1.0), (i + 1) / len(lats)) for i, v in enumerate(lats)]
    buckets = {}
    for r in runs:
        for bk in r.get("fault_latency_histogram") or []:
            buckets[bk["lt_us"]] = buckets.get(bk["lt_us"], 0) + bk["n"]
    tot = sum(buckets.values())
    out, cum = [], 0
    for lt in sorted(buckets):
        cum += buckets[lt]
        out.append((lt, cum / tot))
    return out


def median(vals):
    v = sorted(vals)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def summarize_runs(results, sizes, configs):
    """Per configuration and size: median, min, max and n of every figure
    over the runs that completed with a correct checksum."""
    out = []
    for size in sizes:
        for c in configs:
            runs = [r for r in results if r["config"] == c and r["size_mib"] == size]
            if not runs:  # not run at this size (ANCHOR_ONLY)
                continue
            good = [r for r in runs if not r.get("error")]
            row = {"config": c, "size_mib": size, "side": "qemu" if c in QEMU else "ours",
                   "runs": len(runs), "ok": len(good),
                   "errors": [r["error"] for r in runs if r.get("error")],
                   "postcopy_not_started": sum(1 for r in good if r.get("note"))}
            for name, get in FIGURES:
                vals = [get(r) for r in good if get(r) is not None]
                row[name] = ({"median": median(vals), "min": min(vals), "max": max(vals),
                              "n": len(vals)} if vals else None)
            row["fault_steps_us"] = pooled_steps(good)
            row["switchover_steps_us"] = switchover_summary(good)
            lats = sorted(v for r in good for v in (r.get("latencies_us") or []))
            row["fault_latency_pooled_us"] = ({
                "p50": percentile(lats, 0.5), "p99": percentile(lats, 0.99), "n": len(lats),
                "how": "every demand fault of every completed run, exact"} if lats else None)
            out.append(row)
    return out


def pooled_steps(runs):
    """Median and p99 of each step of a demand fault, over every fault of
    RUNS that was served by its reply (ours: the agent's stamps)."""
    rows = [st for r in runs for st in (r.get("fault_steps_us") or [])]
    if not rows:
        return None
    out = {"n": len(rows), "served_by_push": sum(r.get("faults_served_by_push", 0) for r in runs),
           "steps": []}
    for k, (name, _, _) in enumerate(FAULT_STEPS):
        v = sorted(x[k] for x in rows)
        out["steps"].append({"step": name, "p50": percentile(v, 0.5), "p99": percentile(v, 0.99)})
    tot = sorted(sum(x) for x in rows)
    out["total"] = {"p50": percentile(tot, 0.5), "p99": percentile(tot, 0.99)}
    return out


def switchover_summary(runs):
    """Median, min and max of each switch-over step over RUNS."""
    names = []
    for r in runs:
        for k in (r.get("switchover_steps_us") or {}):
            if k not in names:
                names.append(k)
    out = []
    for k in names:
        v = [r["switchover_steps_us"][k] for r in runs if k in (r.get("switchover_steps_us") or {})]
        out.append({"step": k, "median": median(v), "min": min(v), "max": max(v), "n": len(v)})
    return out or None


def tls_cost(summary, sizes):
    """Ratios of medians with TLS / without, ours and QEMU's (above 1 for a
    time: TLS costs that much; below 1 for a rate)."""
    out = []
    for size in sizes:
        for a, b in TLS_PAIRS:
            ra = next((r for r in summary if r["config"] == a and r["size_mib"] == size), None)
            rb = next((r for r in summary if r["config"] == b and r["size_mib"] == size), None)
            if not ra or not rb:
                continue
            q = {"size_mib": size, "with_tls": a, "without": b,
                 "valid": ra["ok"] > 0 and rb["ok"] > 0}
            for name in ("push_MiB_per_s", "push_nonzero_MiB_per_s", "throughput_MiB_per_s",
                         "fault_p50_us",
                         "fault_p99_us", "downtime_us", "total_ms"):
                q[name] = ratio((ra.get(name) or {}).get("median"),
                                (rb.get(name) or {}).get("median"))
            out.append(q)
    return out


def ratios_of_medians(summary, sizes):
    ratios = []
    for size in sizes:
        for a, b in PAIRS:
            ra = next((r for r in summary if r["config"] == a and r["size_mib"] == size), None)
            rb = next((r for r in summary if r["config"] == b and r["size_mib"] == size), None)
            if not ra or not rb:
                continue
            q = {"size_mib": size, "ours": a, "qemu": b, "valid": ra["ok"] > 0 and rb["ok"] > 0}
            for name, _ in FIGURES:
                ma, mb = ra.get(name) or {}, rb.get(name) or {}
                q[name] = ratio(ma.get("median"), mb.get("median"))
            ratios.append(q)
    return ratios


# ---------------------------------------------------------------- main

def summarize(r):
    if r.get("error"):
        return f"ERROR {r['error'][:160]}"
    lat = r.get("fault_latency_us") or {}

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)
    return (f"downtime {f(r.get('downtime_us'), '.0f')} us, total {f(r.get('total_ms'), '.0f')} "
            f"ms, sent {f((r.get('bytes_sent') or 0) / 1048576, '.1f')} MiB, faults "
            f"p50 {f(lat.get('p50'), '.0f')} p99 {f(lat.get('p99'), '.0f')} us (n={lat.get('n')}), "
            f"requested {r.get('pages_requested')}, checksum "
            f"{'ok' if r.get('checksum_ok') else 'WRONG'}" + (f" [{r['note']}]" if r.get('note')
                                                             else ""))
