"""bench/benchlib/report.py: results.md: the Markdown report of results.json."""

from .common import FAULT_STEPS
from .floors import targets_markdown
from .scale import scale_markdown


def tls_markdown(doc):
    def f(v):
        return "-" if v is None else format(v, ".3f")
    rows = [q for q in doc.get("tls_cost_with_over_without") or [] if q["valid"]]
    if not rows:
        return []
    lines = ["", "The cost of TLS, ratios of medians with TLS / without:", "",
             "| MiB | pair | push rate | throughput | fault p50 | fault p99 | downtime | "
             "total time |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for q in rows:
        lines.append(f"| {q['size_mib']} | {q['with_tls']} / {q['without']} | "
                     f"{f(q['push_MiB_per_s'])} | {f(q['throughput_MiB_per_s'])} | "
                     f"{f(q['fault_p50_us'])} | {f(q['fault_p99_us'])} | "
                     f"{f(q['downtime_us'])} | {f(q['total_ms'])} |")
    return lines


def twonode_markdown(t):
    lines = ["", "Within one kernel (two QEMU nodes under TCG, nested KVM, patched 6.1; "
             f"{t.get('mem', '?')} guest, `{t.get('workload', '?')}`): remap_anon_pages "
             "(`userfault`) against UFFDIO_COPY (`uffd`) and the vCPU's own exit "
             "(`kvm-exit`) at the destination, one migration each. Everything here is "
             "emulated: compare the rows, never with the host tables.", ""]
    if t.get("error"):
        return lines + [f"Not run: {t['error']}"]
    lines += ["| back end | downtime ms | total ms | requested | fault p50 us | fault p99 us | "
              "blocktime ms | duplicates | checksum |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in t["runs"]:
        if r.get("error") and "downtime_us" not in r:
            lines.append(f"| {r['backend']} | error: {r['error'][:100]} | | | | | | | |")
            continue
        lat = r["fault_latency_us"]

        def f(v, fmt, scale=1.0):
            return "-" if v is None else format(v / scale, fmt)
        lines.append(f"| {r['backend']} | {f(r['downtime_us'], '.2f', 1000)} | "
                     f"{f(r['total_ms'], '.0f')} | {r.get('pages_requested')} | "
                     f"{f(lat['p50'], '.0f')} | {f(lat['p99'], '.0f')} | "
                     f"{f(r.get('blocktime_ms'), '.1f')} | {r.get('duplicate_pages')} | "
                     f"{'equal' if r.get('checksum_ok') else 'WRONG'} |")
    return lines


def node_tls_markdown(t):
    lines = ["", f"TLS in one node (TCG, patched 6.1 with CONFIG_TLS; mig-memtest, "
             f"{t.get('mib', '?')} MiB pure push over the node's loopback, "
             f"{t.get('repeats', '?')} runs each, interleaved): `ktls` = the kernel seals "
             "the sends, `user_tls` = OpenSSL does (MIG_NO_KTLS=1). Emulated: compare the "
             "rows, never with the host tables.", ""]
    if t.get("error"):
        lines += [f"Error: {t['error']}", ""]
    lines += ["| config | push of non-zero pages MiB/s | source push CPU ms | "
              "destination receiver CPU ms |", "| --- | ---: | ---: | ---: |"]

    def f(v):
        return "-" if not v else f"{v['median']:.1f} [{v['min']:.1f}-{v['max']:.1f}]"
    for c, row in (t.get("summary") or {}).items():
        lines.append(f"| {c} | {f(row.get('push_nonzero_MiB_per_s'))} | "
                     f"{f(row.get('push_cpu_ms'))} | {f(row.get('bulk_rx_cpu_ms'))} |")
    q = t.get("ratios_of_medians") or {}
    lines += ["", f"TLS push / plain push: kTLS {q.get('ktls_push_over_plain')}, user space "
              f"{q.get('user_tls_push_over_plain')}; kTLS / user space "
              f"{q.get('ktls_push_over_user_tls')}; the kernel sealed every kTLS run's sends: "
              f"{t.get('ktls_sends_in_kernel')}."]
    return lines


def backends_markdown(b):
    lines = ["", "Page-install back ends, per page (bench-backends; p50 / p99 us):", "",
             "| kernel | back end | install | fault round trip (poll) | "
             "fault round trip (busy-poll) | pages/s (install) |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for where in ("host", "node"):
        d = b.get(where) or {}
        if d.get("error"):
            lines.append(f"| {where} | - | error: {d['error'][:80]} | | | |")
            continue
        for be in d.get("backends", []):
            if not be.get("available"):
                continue
            def pp(k):
                m = be.get(k) or {}
                return "-" if "p50_us" not in m else f"{m['p50_us']:.1f} / {m['p99_us']:.1f}"
            lines.append(f"| {where} ({d.get('kernel')}) | {be['name']} | {pp('install')} | "
                         f"{pp('fault_poll')} | {pp('fault_busy')} | "
                         f"{(be.get('install') or {}).get('pages_per_s', '-')} |")
    return lines


def steps_markdown(doc):
    """Where the time goes at the anchor size: the steps of a demand fault
    (ours) and of the switch-over (every configuration)."""
    anchor = doc["anchor_mib"]
    rows = [r for r in doc["summary"] if r["size_mib"] == anchor and r.get("fault_steps_us")]
    lines = []
    if rows:
        lines += ["", f"Where a demand fault's time goes, {anchor} MiB, every fault served by "
                  "its reply in every run (agent stamps, CLOCK_MONOTONIC; us, p50 / p99):", "",
                  "| step | " + " | ".join(r["config"] for r in rows) + " |",
                  "| --- |" + " ---: |" * len(rows)]
        for k, (name, _, _) in enumerate(FAULT_STEPS):
            lines.append(f"| {name} | " + " | ".join(
                f"{r['fault_steps_us']['steps'][k]['p50']:.1f} / "
                f"{r['fault_steps_us']['steps'][k]['p99']:.0f}" for r in rows) + " |")
        lines.append("| total (fault to installed) | " + " | ".join(
            f"{r['fault_steps_us']['total']['p50']:.1f} / {r['fault_steps_us']['total']['p99']:.0f}"
            for r in rows) + " |")
        lines.append("| faults measured (served by the push instead) | " + " | ".join(
            f"{r['fault_steps_us']['n']} ({r['fault_steps_us']['served_by_push']})"
            for r in rows) + " |")
    for side, title in (("ours", "ours (agent stamps)"), ("qemu", "QEMU (trace events)")):
        rows = [r for r in doc["summary"] if r["size_mib"] == anchor and r["side"] == side and
                r.get("switchover_steps_us")]
        if not rows:
            continue
        names = []
        for r in rows:
            names += [x["step"] for x in r["switchover_steps_us"] if x["step"] not in names]
        lines += ["", f"Switch-over, {title}, {anchor} MiB (us, median [min-max] over the runs):",
                  "", "| step | " + " | ".join(r["config"] for r in rows) + " |",
                  "| --- |" + " ---: |" * len(rows)]
        for nm in names:
            cells = []
            for r in rows:
                x = next((x for x in r["switchover_steps_us"] if x["step"] == nm), None)
                cells.append("-" if not x else
                             f"{x['median']:.0f} [{x['min']:.0f}-{x['max']:.0f}]")
            lines.append(f"| {nm} | " + " | ".join(cells) + " |")
    return lines


def bandwidth_cap_markdown(b):
    """max-bandwidth: the cap against the push rate seen over 1-second windows."""
    lines = ["", "## max-bandwidth: cap against achieved (1-second windows)", ""]
    if "runs" not in b:
        return lines + [f"not measured: {b.get('skipped') or b.get('error')}"]
    lines += ["| cap MiB/s | windows | median MiB/s | max MiB/s | max over cap |",
              "| ---: | ---: | ---: | ---: | ---: |"]
    for r in b["runs"]:
        if "error" in r:
            lines.append(f"| {r['cap'] / 2**20:.0f} | - | - | - | {r['error']} |")
            continue
        lines.append(f"| {r['cap'] / 2**20:.0f} | {r['windows']} | {r['median'] / 2**20:.1f} | "
                     f"{r['max'] / 2**20:.1f} | {r['max_over_cap_pct']:+.1f} % |")
    return lines


def write_markdown(doc, path):
    """The summary as Markdown tables (for docs/bench.md): median and
    [min-max] of every figure, then the ratios of medians."""
    def f(v, fmt, scale=1.0):
        return "-" if v is None else format(v / scale, fmt)

    def cell(row, name, fmt, scale=1.0):
        m = row.get(name)
        if not m:
            return "-"
        return (f"{f(m['median'], fmt, scale)} [{f(m['min'], fmt, scale)}-"
                f"{f(m['max'], fmt, scale)}]")
    lines = [f"`{doc['command']}`, {doc['generated_utc']}, {doc['duration_s']} s "
             f"(kernel {doc['host']['kernel']}, {doc['host']['cpus']} CPUs, load average at "
             f"the start {doc['host'].get('load_start')}, at the end "
             f"{doc['host'].get('load_end')}); {doc['repeats']} interleaved runs per "
             "configuration and size: median [min-max]", "",
             "| MiB | configuration | ok | downtime ms | total ms | MiB sent | requested | "
             "fault p50 us | fault p99 us | blocktime ms |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["summary"]:
        ok = f"{r['ok']}/{r['runs']}"
        if r["postcopy_not_started"]:
            ok += f" ({r['postcopy_not_started']} no postcopy)"
        lines.append(
            f"| {r['size_mib']} | {r['config']} | {ok} | {cell(r, 'downtime_us', '.2f', 1000)} | "
            f"{cell(r, 'total_ms', '.0f')} | {cell(r, 'bytes_sent', '.0f', 1048576)} | "
            f"{cell(r, 'pages_requested', '.0f')} | {cell(r, 'fault_p50_us', '.0f')} | "
            f"{cell(r, 'fault_p99_us', '.0f')} | {cell(r, 'blocktime_ms', '.1f')} |")
    errs = [(r["size_mib"], r["config"], e) for r in doc["summary"] for e in r["errors"]]
    if errs:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {sz} MiB {c}: {e[:160]}" for sz, c, e in errs]
    lines += ["", "Ratios of medians, ours / QEMU (below 1: ours smaller):", "",
              "| MiB | pair | downtime | total time | bytes sent | fault p50 | fault p99 | "
              "blocktime |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for q in doc["ratios_of_medians_ours_over_qemu"]:
        if not q["valid"]:
            continue
        lines.append(f"| {q['size_mib']} | {q['ours']} / {q['qemu']} | "
                     f"{f(q['downtime_us'], '.3f')} | {f(q['total_ms'], '.2f')} | "
                     f"{f(q['bytes_sent'], '.2f')} | {f(q['fault_p50_us'], '.3f')} | "
                     f"{f(q['fault_p99_us'], '.3f')} | {f(q['blocktime_ms'], '.2f')} |")
    lines += targets_markdown(doc)
    lines += scale_markdown(doc.get("scale"))
    for c in doc.get("cannot_run") or []:
        lines.append(f"- not run: {c['config']}: {c['why']}")
    lines += tls_markdown(doc)
    lines += steps_markdown(doc)
    if doc.get("backends"):
        lines += backends_markdown(doc["backends"])
    if doc.get("within_kernel_twonode"):
        lines += twonode_markdown(doc["within_kernel_twonode"])
    if doc.get("node_ktls"):
        lines += node_tls_markdown(doc["node_ktls"])
    if doc.get("bandwidth_cap"):
        lines += bandwidth_cap_markdown(doc["bandwidth_cap"])
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
