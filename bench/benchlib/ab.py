"""bench/benchlib/ab.py: two builds side by side (bench/ab, bench/tls-ab): the
build directories, interleaved runs of bench/run's configurations with each
build's programs, and the per-build medians, extremes and new/old ratios."""

import json
import os
import shutil
import subprocess
import time

from .common import FIGURES, ROOT, TLS_DIR, die, free_port, listening, step
from .runs import run_one
from .stats import median, ratio


def check_builds(old, new, programs=("vmm", "migrate-agent")):
    """{"old": dir, "new": dir}, absolute; dies when a program is missing."""
    builds = {"old": os.path.abspath(old), "new": os.path.abspath(new)}
    for b in builds.values():
        for p in programs:
            if not os.access(os.path.join(b, p), os.X_OK):
                die(f"{b}/{p} is not built")
    return builds


def find_guest(builds, given=None):
    """GIVEN, else the guest.elf built beside the new build's programs
    (NEW_BINDIR/../guest), else this tree's build/guest; dies if none."""
    for g in ([given] if given else [os.path.join(builds["new"], "../guest/guest.elf"),
                                     os.path.join(ROOT, "build/guest/guest.elf")]):
        if os.path.exists(g):
            return os.path.abspath(g)
    die(f"no guest.elf ({given or 'make programs'})")


def use_build(args, bindir):
    """Point run_one (args.vmm, args.migrate_agent) at one build's programs."""
    args.vmm = os.path.join(bindir, "vmm")
    args.migrate_agent = os.path.join(bindir, "migrate-agent")


def make_tls_creds():
    """bench/run's test CA and x509 credentials (TLS_DIR), made afresh;
    returns make-tls-creds.sh's one line."""
    shutil.rmtree(TLS_DIR, ignore_errors=True)
    r = subprocess.run([os.path.join(ROOT, "scripts/make-tls-creds.sh"), TLS_DIR, "127.0.0.1"],
                       capture_output=True, text=True)
    if r.returncode:
        die(f"cannot make the TLS credentials: {r.stderr.strip()}")
    return r.stdout.strip()


def interleave(repeats, builds, configs, by_config=True):
    """The order of the runs, [(rep, build, config)]: in each repeat every
    build and configuration once.  by_config: each configuration's builds
    back to back (old, new, old, new, ...: what differs between the builds
    meets the same load); else each build's configurations back to back
    (tls-ab: a ratio within one build)."""
    out = []
    for rep in range(repeats):
        if by_config:
            out += [(rep, b, c) for c in configs for b in builds]
        else:
            out += [(rep, b, c) for b in builds for c in configs]
    return out


def run_builds(args, builds, configs, size, ref, out, by_config=True, after=None):
    """bench/run's run_one for every (rep, build, config) of interleave(),
    each build's vmm and migrate-agent; each result carries "build".
    Run directories: OUT/BUILD/repN/CONFIG.  after(res, wdir) may add to a
    result."""
    runs = []
    for rep, build, c in interleave(args.repeats, builds, configs, by_config):
        use_build(args, builds[build])
        step(f"build {build} ({builds[build]}):")
        res = run_one(args, c, size, rep, ref, [], os.path.join(out, build))
        res["build"] = build
        if after:
            after(res, os.path.join(out, build, f"rep{rep}", c))
        runs.append(res)
    return runs


def figure_stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize_builds(runs, variants, configs, figures):
    """{variant: {config: {"runs", "ok", figure: {median, min, max, n}}}}
    over the runs without error.  figures: names of common.FIGURES, or
    (name, getter) pairs."""
    getters = dict(FIGURES + CPU_FIGURES)
    figs = [(f, getters[f]) if isinstance(f, str) else f for f in figures]
    out = {}
    for v in variants:
        out[v] = {}
        for c in configs:
            mine = [r for r in runs if r["build"] == v and r["config"] == c]
            ok = [r for r in mine if not r.get("error")]
            row = out[v][c] = {"runs": len(mine), "ok": len(ok),
                               "errors": [r["error"] for r in mine if r.get("error")]}
            for name, get in figs:
                row[name] = figure_stats(get(r) for r in ok)
    return out


def compare(a, b):
    """new/old of one figure: the ratio of the medians and whether the two
    [min, max] ranges are apart (a difference beyond the run-to-run spread;
    None with fewer than two runs on a side: no spread to be beyond)."""
    if not a or not b:
        return {"ratio": None, "ranges_apart": None}
    return {"ratio": ratio(a["median"], b["median"]),
            "ranges_apart": (a["min"] > b["max"] or a["max"] < b["min"])
            if a["n"] > 1 and b["n"] > 1 else None}


# ---------------------------------------------------------------- mig-memtest

# The figures bench/ab compares (common.FIGURES names); mig-memtest's source
# metrics (the agent's report) carry all of them.
# push_cpu_ms and bulk_rx_cpu_ms: the push's CPU (ms, user + system) at the
# source and the destination, which load does not move as it moves the
# rates (builds before issue 19 have neither).
CPU_FIGURES = [("push_cpu_ms", lambda r: r.get("push_cpu_ms")),
               ("bulk_rx_cpu_ms", lambda r: r.get("bulk_rx_cpu_ms"))]
AB_FIGURES = ["fault_p50_us", "fault_p99_us", "downtime_us", "push_MiB_per_s",
              "push_nonzero_MiB_per_s", "push_cpu_ms", "bulk_rx_cpu_ms", "blocktime_ms",
              "pages_requested", "total_ms"]


def memtest_one(bindir, size, wdir, dest_extra=(), touch="random", timeout=300, src_extra=()):
    """One library-level migration with one build's mig-memtest on plain
    memory: dest --touch TOUCH, source, both --metrics.  Returns the
    figures of the source's metrics (the agent's report), or "error"."""
    os.makedirs(wdir, exist_ok=True)
    prog = os.path.join(bindir, "mig-memtest")
    port = free_port()
    d_json, s_json = os.path.join(wdir, "dest.json"), os.path.join(wdir, "src.json")
    res = {"size_mib": size, "dest_extra": list(dest_extra)}
    with open(os.path.join(wdir, "dest.err"), "w") as d_err, \
            open(os.path.join(wdir, "src.err"), "w") as s_err:
        dest = subprocess.Popen([prog, "dest", "--listen", f"tcp:127.0.0.1:{port}", "--mem",
                                 f"{size}M", "--touch", touch, "--metrics", d_json] +
                                list(dest_extra), stdout=subprocess.DEVNULL, stderr=d_err)
        try:
            for _ in range(400):
                if listening(port) or dest.poll() is not None:
                    break
                time.sleep(0.025)
            t = time.monotonic()
            src = subprocess.run([prog, "source", "--to", f"tcp:127.0.0.1:{port}", "--mem",
                                  f"{size}M", "--metrics", s_json] + list(src_extra), stdout=subprocess.DEVNULL,
                                 stderr=s_err, timeout=timeout)
            dest.wait(timeout)
            res["wall_s"] = round(time.monotonic() - t, 2)
        except subprocess.TimeoutExpired:
            dest.kill()
            dest.wait()
            res["error"] = f"timed out after {timeout} s"
            return res
    if src.returncode or dest.returncode:
        with open(os.path.join(wdir, "dest.err")) as f:
            tail = f.read().strip().splitlines()[-2:]
        res["error"] = f"source exit {src.returncode}, destination exit {dest.returncode}: " + \
            " | ".join(tail)
        return res
    try:
        with open(s_json) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        res["error"] = f"no metrics JSON: {e}"
        return res
    for k in ("downtime_us", "total_ms", "blocktime_ms", "push_MiB_per_s",
              "push_nonzero_MiB_per_s", "push_cpu_ms", "pages_requested", "faults", "prepage"):
        res[k] = s.get(k)
    try:  # the destination's side of the push (builds before issue 19: none)
        with open(d_json) as f:
            res["bulk_rx_cpu_ms"] = json.load(f).get("bulk_rx_cpu_ms")
    except (OSError, ValueError):
        res["bulk_rx_cpu_ms"] = None
    res["fault_latency_us"] = {k: (s.get("fault_latency_us") or {}).get(k)
                               for k in ("p50", "p99", "max")}
    return res
