"""bench/benchlib/traces.py: Reading what a run left behind: our agents' step stamps and timelines, QEMU's
trace events (switch-over steps, fault latencies)."""

import re

from .common import FAULT_STEPS, SWITCH_STEPS_OURS
from .stats import PAGE_CATEGORIES, percentile

# An agent before its page map named its kinds numbered them so (for
# bench/ab against an older build); later ones carry "kinds".
OLD_AGENT_KINDS = ["demand", "pushed", "precopy"]


def ours_stamps(s, d):
    """Exact per-fault latencies, per-step durations, the switch-over on one
    clock and the page map, from the two sides' stamps (CLOCK_MONOTONIC,
    shared on one host; joined by page)."""
    ss, ds = s.get("stamps") or {}, d.get("stamps") or {}
    out = {}
    src = {r[0]: r for r in ss.get("records", [])}
    lats, steps, by_push = [], [], 0
    for r in ds.get("records", []):
        if not r[1] or not r[6]:
            continue  # no fault stamp or never installed after a request
        lats.append((r[6] - r[1]) / 1000.0)
        q = src.get(r[0])
        if not r[5] or not q or not q[3] or not q[4]:
            by_push += 1  # installed from the push before its reply came
            continue
        t = {1: r[1], 2: r[2], 3: q[3], 4: q[4], 5: r[5], 6: r[6]}
        steps.append([(t[b] - t[a]) / 1000.0 for _, a, b in FAULT_STEPS])
    lats.sort()
    out["latencies_us"] = lats
    out["fault_steps_us"] = steps
    out["faults_served_by_push"] = by_push
    out["stamps_dropped"] = ds.get("dropped", 0) + ss.get("dropped", 0)
    ev = dict(ss.get("switchover") or {}, **(ds.get("switchover") or {}))
    if all(ev.get(k) for k in ("pause", "vcpus_resumed")):
        sw = {name: (ev[b] - ev[a]) / 1000.0 for name, a, b in SWITCH_STEPS_OURS
              if ev.get(a) and ev.get(b)}
        sw["total (pause to vCPUs started)"] = (ev["vcpus_resumed"] - ev["pause"]) / 1000.0
        firsts = [r[1] for r in ds.get("records", []) if r[1] and r[1] >= ev["vcpus_resumed"]]
        if firsts:
            sw["first fault after the start (upper bound of the first guest instruction)"] = (
                min(firsts) - ev["vcpus_resumed"]) / 1000.0
        out["switchover_steps_us"] = sw
    pm = ds.get("page_map")
    if pm:
        # [guest MiB, ms since the vCPUs started, category]; a kind is a
        # number the map's "kinds" names (the page record's enum ram_arrival)
        kinds = pm.get("kinds") or OLD_AGENT_KINDS

        def cat(k, z):
            name = kinds[k] if 0 <= k < len(kinds) else None
            return "zero" if z else name if name in PAGE_CATEGORIES else "pushed"
        out["page_map"] = [[p * 4096 / 1048576.0, us / 1000.0, cat(k, z)]
                           for p, us, k, z in pm["pages"]]
    return out


def agent_timeline(tl):
    """The destination's bucketed arrival counts as [ms since resume,
    cumulative demand, cumulative pushed] points, as the QEMU timeline: a
    point at 0 with the pages installed before the resume, then one at the
    end of each bucket."""
    if not tl or not tl.get("bucket_ms"):
        return None
    b = tl["bucket_ms"]
    before = tl.get("before_resume") or {}
    dem, push = before.get("demand", 0), before.get("pushed", 0)
    out = [[0.0, dem, push]]
    for k, (nd, np_) in enumerate(zip(tl["demand"], tl["pushed"])):
        # bucket 0 already holds the pages installed before the resume
        dem += nd - (before.get("demand", 0) if k == 0 else 0)
        push += np_ - (before.get("pushed", 0) if k == 0 else 0)
        out.append([float((k + 1) * b), dem, push])
    return out


TRACE_RE = re.compile(r"^(\d+)@(\d+)\.(\d+):(\w+)\s?(.*)$")


def read_trace(path):
    ev = []
    try:
        with open(path) as f:
            for line in f:
                m = TRACE_RE.match(line)
                if m:
                    ev.append((int(m.group(2)) * 1000000 + int(m.group(3)), m.group(4),
                               m.group(5)))
    except OSError:
        pass
    return ev


# QEMU's switch-over trace points (both drivers enable them), with what
# happened by then.  Their order is taken from the trace, not assumed.
QEMU_SWITCH_EVENTS = {
    ("src", "postcopy_start"): "postcopy_start (migration thread)",
    ("src", "postcopy_start_set_run"): "main lock taken",
    ("src", "vm_stop_flush_all"): "vCPUs stopped",
    ("src", "ram_postcopy_send_discard_bitmap"): "last bitmap sync + discard bitmap sent",
    ("src", "savevm_state_complete_precopy"): "device state being saved (libvirt: after its pause-before-switchover round trip)",
    ("dst", "loadvm_handle_cmd_packaged"): "device-state package at the destination",
    ("dst", "loadvm_handle_cmd_packaged_main"): "package handled (returns after the run)",
    ("dst", "loadvm_postcopy_handle_run"): "device state loaded, run command",
    ("dst", "loadvm_postcopy_handle_run_bh enter"): "run bottom half entered",
    ("dst", "loadvm_postcopy_handle_run_bh return"): "vCPUs started",
}


# Every trace event either driver enables: the faults and placed pages, the
# migration states, and the switch-over's moments.
QEMU_TRACE_EVENTS = (["postcopy_ram_fault_thread_request", "postcopy_place_page*",
                      "postcopy_start*", "loadvm_postcopy_handle_run*", "migrate_set_state",
                      "qio_channel_tls_handshake_complete"] +
                     sorted({n for _, n in QEMU_SWITCH_EVENTS if not n.startswith(
                         ("postcopy_start", "loadvm_postcopy_handle_run"))}))


def qemu_switchover(src, dst):
    """The switch-over's steps on one clock: the first time each trace
    point of QEMU_SWITCH_EVENTS fires from postcopy_start on, in time
    order; a step is named by the moment that ends it."""
    start = next((t for t, n, _ in src if n == "postcopy_start"), None)
    if start is None:
        return {}
    seen = {}
    for side, evs in (("src", src), ("dst", dst)):
        for t, n, a in evs:
            key = (side, n + (" " + a.split()[0] if n == "loadvm_postcopy_handle_run_bh" and a
                              else ""))
            if key in QEMU_SWITCH_EVENTS and t >= start and key not in seen:
                seen[key] = t
    order = sorted(seen.items(), key=lambda kv: kv[1])
    sw = {}
    for (_, t0), (key, t1) in zip(order, order[1:]):
        sw["to: " + QEMU_SWITCH_EVENTS[key]] = float(t1 - t0)
    end = seen.get(("dst", "loadvm_postcopy_handle_run_bh return"))
    if end is not None:
        sw["total (postcopy_start to vCPUs started)"] = float(end - start)
    return sw


def analyse_qemu_trace(src_path, dst_path, size_mib):
    """Per-fault latency (fault-thread request to page placed), the switch
    downtime on one clock, and the page arrival timeline, from QEMU's trace
    events (log back end, gettimeofday timestamps in microseconds)."""
    src, dst = read_trace(src_path), read_trace(dst_path)
    out = {}
    stop = [t for t, n, _ in src if n == "postcopy_start_set_run"]
    run = [t for t, n, a in dst if n == "loadvm_postcopy_handle_run_bh" and a.startswith("return")]
    if stop and run:
        out["downtime_us"] = float(run[-1] - stop[-1])
    t_run = run[-1] if run else None
    states = [(t, a.split()[-1]) for t, n, a in src if n == "migrate_set_state"]
    first = {}
    for t, st in states:
        first.setdefault(st, t)
    if "setup" in first and "completed" in first:
        out["total_ms"] = round((first["completed"] - first["setup"]) / 1000.0, 3)
    if "active" in first and "postcopy-active" in first:
        out["precopy_ms"] = round((first["postcopy-active"] - first["active"]) / 1000.0, 3)
    if "postcopy-active" in first and "completed" in first:
        out["postcopy_ms"] = round((first["completed"] - first["postcopy-active"]) / 1000.0, 3)
    out["switchover_steps_us"] = qemu_switchover(src, dst)
    requests = {}
    placed = {}
    arrivals = []
    ram_base = None  # host address of guest RAM offset 0, from a request's RB offset
    for t, n, a in dst:
        if n == "postcopy_ram_fault_thread_request":
            m = re.search(r"HVA=0x([0-9a-f]+)", a)
            if m:
                page = int(m.group(1), 16) & ~0xFFF
                requests.setdefault(page, t)
                o = re.search(r"rb=(?:pc|microvm)\.ram offset=0x([0-9a-f]+)", a)
                if o and ram_base is None:
                    ram_base = page - (int(o.group(1), 16) & ~0xFFF)
        elif n in ("postcopy_place_page", "postcopy_place_page_zero"):
            m = re.search(r"host=0x([0-9a-f]+)", a)
            if m:
                page = int(m.group(1), 16) & ~0xFFF
                if page not in placed:
                    placed[page] = t
                rq = requests.get(page)
                arrivals.append((t, rq is not None and rq <= t, page,
                                 n == "postcopy_place_page_zero"))
    lats = []
    already = 0
    for page, t in requests.items():
        p = placed.get(page)
        if p is None:
            continue
        if p < t:
            already += 1
            continue
        lats.append(float(p - t))
    lats.sort()
    out["fault_latency_us"] = {
        "p50": percentile(lats, 0.50), "p99": percentile(lats, 0.99),
        "max": lats[-1] if lats else None, "n": len(lats),
        "how": "QEMU trace: postcopy_ram_fault_thread_request to postcopy_place_page of that page"}
    out["requests_for_pages_already_placed"] = already
    out["blocktime_ms"] = round(sum(lats) / 1000.0, 3)
    out["latencies_us"] = lats
    out["pages_placed"] = len(arrivals)
    out["pages_demand"] = sum(1 for _, dem, _, _ in arrivals if dem)
    base = t_run if t_run is not None else (arrivals[0][0] if arrivals else 0)
    tl, dem, push = [], 0, 0
    every = max(1, len(arrivals) // 1500)
    if ram_base is not None and arrivals:
        # [guest MiB, ms since the vCPUs started, category], as ours
        t0 = t_run if t_run is not None else arrivals[0][0]
        pm_every = max(1, len(arrivals) // 65536)
        # (pages of other RAM blocks, firmware and option ROMs, are left out)
        out["page_map"] = [[(pg - ram_base) / 1048576.0, (t - t0) / 1000.0,
                            "zero" if z else "demand" if dm else "pushed"]
                           for t, dm, pg, z in arrivals[::pm_every]
                           if 0 <= pg - ram_base < size_mib << 20]
    for i, (t, is_dem, _, _) in enumerate(arrivals):
        if is_dem:
            dem += 1
        else:
            push += 1
        if i % every == 0 or i == len(arrivals) - 1:
            tl.append([round((t - base) / 1000.0, 3), dem, push])
    out["timeline"] = tl
    return out
