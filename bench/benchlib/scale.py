"""bench/benchlib/scale.py: how ours grows with the guest (bench/run --full,
docs/bench.md "Scale"): per size the medians of downtime, total time and the
push rate, the downtime's spread over sizes (flat: max/min near 1) and the
total time against the one a constant push rate predicts (linear: the
marginal ms per MiB between consecutive sizes stays near the push's)."""

import os
import subprocess

from .common import ROOT, step
from .stats import ratio


def _m(row, name):
    return ((row or {}).get(name) or {}).get("median")


def scale_summary(summary, sizes, config, skipped):
    rows = []
    for size in sizes:
        r = next((r for r in summary if r["config"] == config and r["size_mib"] == size and
                  r["ok"] > 0), None)
        if r:
            rows.append({"size_mib": size, "ok": r["ok"], "downtime_us": _m(r, "downtime_us"),
                         "total_ms": _m(r, "total_ms"),
                         "push_MiB_per_s": _m(r, "push_MiB_per_s"),
                         "push_nonzero_MiB_per_s": _m(r, "push_nonzero_MiB_per_s"),
                         "ms_per_MiB": ratio(_m(r, "total_ms"), size)})
    for a, b in zip(rows, rows[1:]):
        if a["total_ms"] is not None and b["total_ms"] is not None:
            # The slope between two sizes: what one more MiB costs.
            b["marginal_ms_per_MiB"] = round((b["total_ms"] - a["total_ms"]) /
                                             (b["size_mib"] - a["size_mib"]), 4)
            if b.get("push_MiB_per_s"):
                b["push_ms_per_MiB"] = round(1000 / b["push_MiB_per_s"], 4)
    downs = [r["downtime_us"] for r in rows if r["downtime_us"] is not None]
    return {"config": config, "sizes": rows, "skipped": skipped,
            "downtime_max_over_min": ratio(max(downs), min(downs)) if downs else None,
            "how": "medians per size; downtime_max_over_min near 1: flat; marginal_ms_per_MiB "
                   "(total time slope between consecutive sizes) near push_ms_per_MiB "
                   "(1000 / push MiB/s): linear in the push rate"}


def scale_markdown(sc):
    if not sc or len(sc.get("sizes", [])) < 2:
        return []

    def f(v):
        return "-" if v is None else f"{v:g}"
    lines = ["", f"Scale ({sc['config']}, medians; downtime max/min over sizes "
             f"{f(sc['downtime_max_over_min'])}):", "",
             "| MiB | downtime us | total ms | push MiB/s | ms per MiB | marginal ms per MiB | "
             "push ms per MiB |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sc["sizes"]:
        lines.append(f"| {r['size_mib']} | {f(r['downtime_us'])} | {f(r['total_ms'])} | "
                     f"{f(r['push_MiB_per_s'])} | {f(r['ms_per_MiB'])} | "
                     f"{f(r.get('marginal_ms_per_MiB'))} | {f(r.get('push_ms_per_MiB'))} |")
    lines += [f"- {s['size_mib']} MiB not run: {s['why']}" for s in sc.get("skipped") or []]
    return lines


def plot_scale(out, ddir, summary, sc):
    """scale.png (bench/plot.gp which=scale) when the run had two sizes or
    more; returns the PNG's name or None."""
    rows = [r for r in sc["sizes"] if r["downtime_us"] is not None and r["total_ms"] is not None]
    if len(rows) < 2:
        return None
    os.makedirs(ddir, exist_ok=True)
    with open(os.path.join(ddir, "scale.dat"), "w") as f:
        for r in rows:
            s = next(x for x in summary if x["config"] == sc["config"] and
                     x["size_mib"] == r["size_mib"])
            dt, tt = s["downtime_us"], s["total_ms"]
            push = r["push_MiB_per_s"]
            f.write(f"{r['size_mib']} {dt['median'] / 1000:.4f} {dt['min'] / 1000:.4f} "
                    f"{dt['max'] / 1000:.4f} {tt['median']} {tt['min']} {tt['max']} "
                    f"{r['size_mib'] / push * 1000 if push else 'NaN'}\n")
    png = os.path.join(out, "scale.png")
    e = (f"which='scale'; datadir='{ddir}'; outfile='{png}'; configs='{sc['config']}'; "
         "size='0'; ncols=2")
    p = subprocess.run(["gnuplot", "-e", e, os.path.join(ROOT, "bench/plot.gp")],
                       capture_output=True, text=True)
    if p.returncode:
        step(f"plot scale.png: gnuplot failed: {p.stderr.strip()[-300:]}")
        return None
    step("plot scale.png written")
    return "scale.png"
