"""bench/benchlib/plots.py: The plots: gnuplot data files and PNGs (bench/plot.gp)."""

import os
import shutil
import subprocess

from .common import FAULT_STEPS, ROOT, step
from .stats import PAGE_CATEGORIES, pooled_cdf, representative


def write_plot_data(results, summary, ddir, sizes, configs, anchor):
    shutil.rmtree(ddir, ignore_errors=True)
    os.makedirs(ddir)
    for c in configs:
        runs = [r for r in results if r["config"] == c and r["size_mib"] == anchor and
                not r.get("error")]
        cdf = pooled_cdf(runs)
        if cdf:
            with open(os.path.join(ddir, f"cdf_{c}_{anchor}.dat"), "w") as f:
                f.writelines(f"{v} {q:.6f}\n" for v, q in cdf)
        r = representative(results, c, anchor)
        if r and r.get("timeline"):
            with open(os.path.join(ddir, f"arrivals_{c}_{anchor}.dat"), "w") as f:
                for t, d, p in r["timeline"]:
                    f.write(f"{t} {d} {p}\n")
        if r and r.get("page_map"):
            # one block per category (gnuplot index 0..3), drawn in that order
            with open(os.path.join(ddir, f"pagemap_{c}_{anchor}.dat"), "w") as f:
                for k, cat in enumerate(PAGE_CATEGORIES):
                    f.write(f"# {cat}\n")
                    pts = [p for p in r["page_map"] if p[2] == cat] or [["NaN", "NaN", cat]]
                    f.writelines(f"{ms} {mib}\n" for mib, ms, _ in pts)
                    f.write("\n\n")
    rows = [r for r in summary if r["size_mib"] == anchor and r.get("fault_steps_us")]
    if rows:
        for q in ("p50", "p99"):
            with open(os.path.join(ddir, f"fault_steps_{q}.dat"), "w") as f:
                f.write("config " + " ".join(f'"{n}"' for n, _, _ in FAULT_STEPS) + "\n")
                for r in rows:
                    f.write(r["config"] + " " + " ".join(
                        f"{st[q]:.1f}" for st in r["fault_steps_us"]["steps"]) + "\n")

    def med(row, name, scale=1.0):
        m = row.get(name)
        return "NaN NaN NaN" if not m else " ".join(
            f"{m[k] / scale}" for k in ("median", "min", "max"))
    for c in configs:
        rows = sorted((r for r in summary if r["config"] == c and r["ok"]),
                      key=lambda r: r["size_mib"])
        with open(os.path.join(ddir, f"size_{c}.dat"), "w") as f:
            # size, then median min max of: downtime ms, total ms, MiB sent,
            # fault p50 us, fault p99 us, blocktime ms
            for r in rows:
                f.write(f"{r['size_mib']} {med(r, 'downtime_us', 1000.0)} {med(r, 'total_ms')} "
                        f"{med(r, 'bytes_sent', 1048576.0)} {med(r, 'fault_p50_us')} "
                        f"{med(r, 'fault_p99_us')} {med(r, 'blocktime_ms')}\n")
    with open(os.path.join(ddir, "downtime.dat"), "w") as f:
        f.write("size " + " ".join(configs) + "\n")
        for sz in sizes:
            vals = []
            for c in configs:
                r = next((r for r in summary if r["config"] == c and r["size_mib"] == sz), None)
                m = (r or {}).get("downtime_us")
                vals.append(f"{m['median'] / 1000.0:.4f}" if m else "NaN")
            f.write(f"{sz}M " + " ".join(vals) + "\n")


def make_plots(out, ddir, sizes, configs, results, anchor):
    have = {(r["config"], r["size_mib"]) for r in results if r.get("downtime_us") is not None}
    cdf_size = anchor
    cdf_cfgs = [c for c in configs
                if os.path.exists(os.path.join(ddir, f"cdf_{c}_{cdf_size}.dat"))]
    arr_cfgs = [c for c in configs
                if os.path.exists(os.path.join(ddir, f"arrivals_{c}_{cdf_size}.dat"))]
    # Against size only with two sizes or more: one point is no line (gnuplot fails on it).
    size_cfgs = [c for c in configs if any((c, s) in have for s in sizes)] if len(sizes) > 1 else []
    made = []
    jobs = [("pagemap", [c], f"page_map_{c}.png") for c in configs
            if os.path.exists(os.path.join(ddir, f"pagemap_{c}_{cdf_size}.dat"))]
    if os.path.exists(os.path.join(ddir, "fault_steps_p50.dat")):
        jobs.append(("steps", configs, "fault_steps.png"))
    jobs += [("cdf", cdf_cfgs, "fault_latency_cdf.png"),
            ("arrivals", arr_cfgs, "pages_over_time.png"),
            ("downtime", configs, "downtime.png"),
            ("bysize", size_cfgs, "by_size.png")]
    for which, cfgs, png in jobs:
        if not cfgs:
            step(f"plot {png}: {'one size' if which == 'bysize' and len(sizes) < 2 else 'no data'}")
            continue
        e = (f"which='{which}'; datadir='{ddir}'; outfile='{os.path.join(out, png)}'; "
             f"configs='{' '.join(cfgs)}'; size='{cdf_size}'; ncols={len(configs) + 1}")
        r = subprocess.run(["gnuplot", "-e", e, os.path.join(ROOT, "bench/plot.gp")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            step(f"plot {png}: gnuplot failed: {r.stderr.strip()[-300:]}")
        else:
            made.append(png)
            step(f"plot {png} written")
    return made
