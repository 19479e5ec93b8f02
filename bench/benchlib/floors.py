"""bench/benchlib/floors.py: the floors issue 19's targets are ratios to,
measured in the same run as the figures (docs/bench.md, "Floors and
targets"), the targets themselves, and the library-level runs (mig-memtest)
that stand in for the VMM's when /dev/kvm is not usable.

Floors: the page-sized TCP round trip (mig-tls-pingpong, plain and TLS,
interleaved, median of the runs' p50/p99), one UFFDIO_COPY install and a
memcpy of non-zero pages into fresh memory (bench-backends, run once by
runs.run_backends: its JSON is read here), and the one-way page stream
(mig-tls-pingpong --stream, plain and TLS)."""

import json
import os
import re
import subprocess

from .ab import memtest_one
from .common import ROOT, TLS_DIR, step
from .stats import median, ratio

PINGPONG_RE = re.compile(r"p50 ([\d.]+) us, p90 ([\d.]+) us, p99 ([\d.]+) us")
STREAM_RE = re.compile(r"([\d.]+) MiB/s")
# The round trip is bimodal on this host: about 4 us when both threads
# share a CPU (the other one busy), 35-70 us when the peer wakes on an idle
# CPU (an IPI through the hypervisor on PVM).  Five runs; the floor is the
# fastest run's p50 (a floor is what the machine can do: a run in the slow
# mode would make a target look met), the median beside it.
PINGPONG_RUNS = 5


def _run_pingpong(args, regex, fields):
    """mig-tls-pingpong ARGS; its figures (regex's groups) under fields."""
    prog = os.path.join(ROOT, "build/bin/mig-tls-pingpong")
    p = subprocess.run([prog] + args, capture_output=True, text=True, timeout=120)
    m = regex.search(p.stdout)
    if p.returncode or not m:
        return {"error": f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}"}
    return {f: float(m.group(i + 1)) for i, f in enumerate(fields)}


def _pingpong(extra, rounds=3000):
    return _run_pingpong(["--rounds", str(rounds)] + extra, PINGPONG_RE,
                         ("p50_us", "p90_us", "p99_us"))


def _stream(extra, mib=256):
    return _run_pingpong(["--stream", str(mib)] + extra, STREAM_RE, ("MiB_per_s",))


def _med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return median(vals) if vals else None


def measure_net_floors(tls_dir):
    """The round trip and the stream, plain and TLS (when tls_dir),
    interleaved PINGPONG_RUNS times; medians."""
    variants = {"plain": []} | ({"tls": ["--tls-creds", tls_dir]} if tls_dir else {})
    rt = {v: [] for v in variants}
    st = {v: [] for v in variants}
    for k in range(PINGPONG_RUNS):
        for v, extra in variants.items():
            step(f"floors: page-sized round trip ({v}) {k + 1}/{PINGPONG_RUNS}")
            rt[v].append(_pingpong(extra))
            st[v].append(_stream(extra))
    out = {"runs": PINGPONG_RUNS}
    for v in variants:
        p50s = [r["p50_us"] for r in rt[v] if r.get("p50_us") is not None]
        out[f"pingpong_{v}"] = {"p50_us": _med(rt[v], "p50_us"), "p99_us": _med(rt[v], "p99_us"),
                                "p50_min_us": min(p50s, default=None),
                                "p50_max_us": max(p50s, default=None), "runs": rt[v]}
        out[f"stream_{v}"] = {"MiB_per_s": _med(st[v], "MiB_per_s"), "runs": st[v]}
    if not tls_dir:
        out["pingpong_tls"] = out["stream_tls"] = {"skipped": "no TLS credentials"}
    return out


# vCPU ioctls inside a switch-over's downtime: the save's KVM_GET_XSAVE2,
# KVM_GET_XCRS and KVM_GET_MSRS (REGS, SREGS and EVENTS come from
# run->s.regs, CPUID from the VMM's copy), the load's KVM_SET_SREGS, _REGS,
# _XCRS, _XSAVE, _MSRS, _VCPU_EVENTS and the TSC's four (the offset read and
# written, the TSC read before and after) -- vmm/arch/x86/{cpu,tsc}.c.
DOWNTIME_IOCTLS = 13


def measure_vcpu_floors(args):
    """bench-vcpu on the guest program: the pause of a running guest and one
    vCPU ioctl (p50), three runs, the fastest p50 of each; or why not."""
    if not args.kvm:
        return {"skipped": "no usable /dev/kvm"}
    runs = []
    for k in range(3):
        step(f"floors: pause and vCPU ioctl (bench-vcpu) {k + 1}/3")
        p = subprocess.run([os.path.join(ROOT, "build/bin/bench-vcpu"), "--guest", args.guest],
                           capture_output=True, text=True, timeout=300)
        if p.returncode:
            return {"error": f"bench-vcpu exited {p.returncode}: {p.stderr.strip()[-200:]}"}
        runs.append(json.loads(p.stdout))
    return {"pause_p50_us": min(r["pause"]["p50_us"] for r in runs),
            "ioctl_p50_us": min(r["ioctl"]["p50_us"] for r in runs), "runs": runs}


def floors_from(net, backends, vcpu=None):
    """The flat "floors" object: every floor a number (None: not measured)."""
    vcpu = vcpu or {}
    pause, io = vcpu.get("pause_p50_us"), vcpu.get("ioctl_p50_us")
    host = (backends or {}).get("host") or {}
    uffd = next((b for b in host.get("backends", []) if b.get("name") == "uffd"), {})
    mc = host.get("memcpy") or {}
    pp, pt = net.get("pingpong_plain") or {}, net.get("pingpong_tls") or {}
    return {
        "pingpong_p50_us": pp.get("p50_min_us"), "pingpong_p50_median_us": pp.get("p50_us"),
        "pingpong_p99_us": pp.get("p99_us"),
        "pingpong_p50_range_us": [pp.get("p50_min_us"), pp.get("p50_max_us")],
        "pingpong_tls_p50_us": pt.get("p50_min_us"), "pingpong_tls_p50_median_us": pt.get("p50_us"),
        "pingpong_tls_p99_us": pt.get("p99_us"),
        "install_p50_us": (uffd.get("install") or {}).get("p50_us"),
        "install_p99_us": (uffd.get("install") or {}).get("p99_us"),
        "memcpy_GiB_per_s": mc.get("fresh_GiB_per_s"),
        "memcpy_warm_GiB_per_s": mc.get("warm_GiB_per_s"),
        "stream_MiB_per_s": (net.get("stream_plain") or {}).get("MiB_per_s"),
        "stream_tls_MiB_per_s": (net.get("stream_tls") or {}).get("MiB_per_s"),
        "pause_p50_us": pause, "vcpu_ioctl_p50_us": io,
        "downtime_floor_us": (round(pause + DOWNTIME_IOCTLS * io, 1)
                              if pause is not None and io is not None else None),
        "how": "pingpong: mig-tls-pingpong --rounds 3000 (plain, --tls-creds), "
               f"{net.get('runs')} interleaved runs: p50 the fastest run's (bimodal here: ~4 us "
               "with both threads on one CPU, 35-70 us waking an idle one), p99 the median; install: bench-backends uffd "
               "install p50; memcpy: bench-backends, non-zero pages into fresh anonymous "
               "memory, median of 3; stream: mig-tls-pingpong --stream 256; pause, vCPU ioctl: "
               "bench-vcpu (vm_pause() of the guest program running, KVM_GET_REGS), fastest p50 "
               f"of 3 runs; downtime floor: pause + {DOWNTIME_IOCTLS} vCPU ioctls",
        "detail": net, "vcpu": vcpu,
    }


def _m(row, name, stat="median"):
    return ((row or {}).get(name) or {}).get(stat)


def _target(figure, floor, target, op, unit, what, why=None, use_ratio=True):
    """One target: figure, floor, ratio (figure / floor), the target the
    ratio (or, without a floor, the figure) is held to, met.  met is None
    when a figure or floor is missing: not measured is not passed."""
    figure = round(figure, 4) if figure is not None else None
    r = ratio(figure, floor)
    held = r if use_ratio else figure
    met = None
    if held is not None:
        met = held <= target if op == "<=" else held >= target
    t = {"figure": figure, "floor": floor, "ratio": r, "target": f"{op} {target}",
         "met": met, "unit": unit, "what": what}
    if met is None:
        t["not_measured"] = why or "a figure or its floor is missing from this run"
    return t


def targets(fl, ours, qemu, tls, source):
    """Issue 19's targets from the floors FL and the summary rows of ours
    (OURS), QEMU postcopy-preempt (QEMU, may be None) and ours with TLS
    (TLS, may be None) at one size; SOURCE says which runs."""
    p50_floor = (round(fl["pingpong_p50_us"] + fl["install_p50_us"], 3)
                 if fl.get("pingpong_p50_us") is not None and
                 fl.get("install_p50_us") is not None else None)
    push = _m(ours, "push_nonzero_MiB_per_s")
    push_gib = push / 1024 if push is not None else None
    t = {
        "fault_p50_over_rtt_plus_install": _target(
            _m(ours, "fault_p50_us"), p50_floor, 1.25, "<=", "us",
            "fault p50 / (page-sized round trip p50 + UFFDIO_COPY install p50)"),
        "push_nonzero_GiB_per_s": _target(
            push_gib, None, 2.0, ">=", "GiB/s", "push rate of non-zero pages (absolute)",
            use_ratio=False),
        "push_over_memcpy": _target(
            push_gib, fl.get("memcpy_GiB_per_s"), 0.5, ">=", "GiB/s",
            "push rate of non-zero pages / memcpy of non-zero pages into fresh memory"),
        "fault_p99_us": _target(_m(ours, "fault_p99_us"), None, 400, "<=", "us",
                                "fault p99 (absolute)", use_ratio=False),
        "downtime_us": _target(_m(ours, "downtime_us"), fl.get("downtime_floor_us"), 300, "<=",
                               "us", "downtime, median of the runs (floor: the pause of a "
                               f"running guest + {DOWNTIME_IOCTLS} vCPU ioctls; met is judged "
                               "on the figure)", use_ratio=False),
        "downtime_max_us": _target(_m(ours, "downtime_us", "max"), None, 1000, "<=", "us",
                                   "downtime, max of the runs", use_ratio=False),
        "blocktime_over_qemu_preempt": _target(
            _m(ours, "blocktime_ms"), _m(qemu, "blocktime_ms"), 0.10, "<=", "ms",
            "vCPU blocktime ours / QEMU postcopy-preempt (microvm)",
            why=None if qemu else "QEMU postcopy-preempt was not run (no KVM, --no-qemu "
            "or --configs without qemu_microvm_preempt)"),
        "tls_push_over_plain_push": _target(
            _m(tls, "push_nonzero_MiB_per_s"), push, 0.8, ">=", "MiB/s",
            "push rate of non-zero pages with TLS / without",
            why=None if tls else "no TLS configuration in this run"),
    }
    for v in t.values():
        v["runs"] = source
    return t


def pick_rows(summary, size, ours, qemu, tls):
    """The summary rows of the three configurations at SIZE (None: absent)."""
    def row(c):
        return next((r for r in summary if r["config"] == c and r["size_mib"] == size and
                     r["ok"] > 0), None)
    return row(ours), row(qemu), row(tls)


def targets_markdown(doc):
    """results.md's table: every target, its figure, floor, ratio, met."""
    fl, tg = doc.get("floors"), doc.get("targets")
    if not fl or not tg:
        return []

    def f(v):
        if v is None:
            return "-"
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    lines = ["", "## Floors and targets (issue 19), measured in this run", "",
             "Floors: round trip p50 plain " + f(fl.get("pingpong_p50_us")) + " us (runs " +
             "-".join(f(x) for x in fl.get("pingpong_p50_range_us") or [None, None]) + "), TLS " +
             f(fl.get("pingpong_tls_p50_us")) + " us; UFFDIO_COPY install p50 " +
             f(fl.get("install_p50_us")) + " us; memcpy of non-zero pages into fresh memory " +
             f(fl.get("memcpy_GiB_per_s")) + " GiB/s (warm " + f(fl.get("memcpy_warm_GiB_per_s")) +
             "); page stream plain " + f(fl.get("stream_MiB_per_s")) + " MiB/s, TLS " +
             f(fl.get("stream_tls_MiB_per_s")) + " MiB/s; pause of a running guest p50 " +
             f(fl.get("pause_p50_us")) + " us, one vCPU ioctl " + f(fl.get("vcpu_ioctl_p50_us")) +
             " us (downtime floor " + f(fl.get("downtime_floor_us")) + " us).", "",
             f"Targets at {doc.get('targets_size_mib')} MiB, from {doc.get('targets_source')}:", "",
             "| target | figure | floor | ratio | target | met |", "| --- | --- | --- | --- | --- | --- |"]
    for name, t in tg.items():
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {name} ({t['what']}) | {f(t['figure'])} {t['unit']} | {f(t['floor'])} "
                     f"| {f(t['ratio'])} | {t['target']} | {met} |")
    return lines


# ---------------------------------------------------------------- library level

MEMTEST_CONFIGS = {"memtest_postcopy": "mig-memtest (library level, no VM): pure postcopy, "
                   "uffd back end, --touch random",
                   "memtest_tls": "mig-memtest as memtest_postcopy with TLS 1.3 (x509)"}


def run_memtest(args, sizes, out, tls_dir):
    """The library-level runs: memtest_postcopy and memtest_tls, interleaved,
    --repeats per size; result dicts shaped as runs.run_one's."""
    bindir = os.path.join(ROOT, "build/bin")
    results = []
    for size in sizes:
        for rep in range(args.repeats):
            for c in MEMTEST_CONFIGS:
                extra = ["--tls-creds", tls_dir] if c == "memtest_tls" else []
                if c == "memtest_tls" and not tls_dir:
                    continue
                step(f"{size} MiB rep {rep + 1}/{args.repeats} {c}")
                wdir = os.path.join(out, "runs", f"{size}M", f"rep{rep}", c)
                r = memtest_one(bindir, size, wdir, dest_extra=extra, src_extra=extra)
                r.update(config=c, size_mib=size, rep=rep, side="ours", checksum_ok=not r.get("error"))
                results.append(r)
    return results
