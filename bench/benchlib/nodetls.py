"""bench/benchlib/nodetls.py: TLS push / plain push with kernel TLS, in a node.

The host offers no `tls` ULP (and this project loads no module into it), so
kTLS runs only in a node, whose kernel has CONFIG_TLS.  One node runs
mig-memtest over its loopback, --repeats times interleaved: plain, TLS with
the kernel sealing the sends (kTLS), and TLS with OpenSSL sealing them
(MIG_NO_KTLS=1).  A pure push (the destination touches nothing), so the
figure is the push alone.  Everything is emulated (TCG): compare the rows
with each other, never with the host's figures."""

import json
import os
import statistics
import subprocess
import time

from .common import ROOT, step

NODE_TLS_MIB = 64
CONFIGS = ("plain", "ktls", "user_tls")
FIGURES = ("push_nonzero_MiB_per_s", "push_cpu_ms", "bulk_rx_cpu_ms")


def node_script(repeats):
    """The node's command: @@NTLS CONFIG REP S|D <metrics JSON> per run, or
    @@NTLS CONFIG REP ERR <why>."""
    return f"""
umask 077
printf 'qemu:%s\\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')" > /tmp/k.psk
p=7400
one() {{
	cfg=$1 rep=$2
	shift 2
	p=$((p + 1))
	mig-memtest dest --listen tcp:127.0.0.1:$p --mem {NODE_TLS_MIB}M --touch none \\
		--metrics /tmp/d.json "$@" > /dev/null 2> /tmp/d.err &
	d=$!
	: > /tmp/s.err
	if wait-listen $p $d 400 2>> /tmp/d.err &&
		timeout 400 mig-memtest source --to tcp:127.0.0.1:$p --mem {NODE_TLS_MIB}M \\
		--metrics /tmp/s.json "$@" > /dev/null 2> /tmp/s.err && wait $d &&
		grep -q 'checksum ok' /tmp/d.err; then
		echo "@@NTLS $cfg $rep S $(tr -d '\\n' < /tmp/s.json)"
		echo "@@NTLS $cfg $rep D $(tr -d '\\n' < /tmp/d.json)"
	else
		kill $d 2> /dev/null
		echo "@@NTLS $cfg $rep ERR $(tail -n 1 /tmp/s.err /tmp/d.err | tr '\\n' ' ')"
	fi
}}
for rep in $(seq 1 {repeats}); do
	unset MIG_NO_KTLS
	one plain $rep
	one ktls $rep --tls-psk /tmp/k.psk
	export MIG_NO_KTLS=1
	one user_tls $rep --tls-psk /tmp/k.psk
done
"""


def parse_runs(log):
    """Each run's figures from the node's console log."""
    runs = {}
    with open(log, errors="replace") as f:
        for ln in f:
            parts = ln.strip().split(" ", 4)
            # A console line can be cut by a kernel message: skip what is not ours.
            if len(parts) < 5 or parts[0] != "@@NTLS" or not parts[2].isdigit():
                continue
            cfg, rep, kind, rest = parts[1], int(parts[2]), parts[3], parts[4]
            r = runs.setdefault((cfg, rep), {"config": cfg, "rep": rep})
            if kind == "ERR":
                r["error"] = rest.strip()
                continue
            try:
                m = json.loads(rest)
            except ValueError:
                r["error"] = f"unreadable metrics ({kind})"
                continue
            keys = ("push_nonzero_MiB_per_s", "push_cpu_ms", "total_ms") if kind == "S" \
                else ("bulk_rx_cpu_ms",)
            r.update({k: m.get(k) for k in keys})
            r[f"tls_{kind}"] = m.get("tls")
    return [runs[k] for k in sorted(runs, key=lambda k: (k[1], CONFIGS.index(k[0])
                                                          if k[0] in CONFIGS else 9))]


def spread(vals):
    """Median, min, max and n of VALS, or None."""
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)} if vals else None


def ratio(summary, num, den, fig):
    a = ((summary.get(num) or {}).get(fig) or {}).get("median")
    b = ((summary.get(den) or {}).get(fig) or {}).get("median")
    return round(a / b, 3) if a and b else None


def run_node_tls(args, out):
    """(9) kTLS against user-space TLS against plain, in one node."""
    if args.no_node:
        return {"error": "not run (--no-node)"}
    for f in ("build/kernel/bzImage", "build/initramfs.cpio.gz"):
        if not os.path.exists(os.path.join(ROOT, f)):
            return {"error": f"not run: {f} missing (make kernel guest-image)"}
    reps = max(1, args.repeats)
    step(f"kTLS in a node: plain, kTLS and user-space TLS, {NODE_TLS_MIB} MiB, {reps} runs each ...")
    log = os.path.join(out, "runs", "node-tls.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    t = time.monotonic()
    p = subprocess.run([os.path.join(ROOT, "tests/node-launch"), "--name", "bench-node-tls",
                        "--log", log, "--timeout", str(240 + 300 * reps), "--quiet", "--",
                        node_script(reps)], capture_output=True, text=True)
    res = {"mib": NODE_TLS_MIB, "repeats": reps, "wall_s": round(time.monotonic() - t, 1),
           "how": "mig-memtest over the node's loopback, --touch none (a pure push), PSK; "
                  "ktls: the kernel seals the sends (OpenSSL 3.0 gives it no receive keys); "
                  "user_tls: MIG_NO_KTLS=1"}
    runs = parse_runs(log)
    if p.returncode != 0 or not runs:
        res["error"] = f"node-launch exited {p.returncode}: " + " | ".join(
            (p.stdout + p.stderr).strip().splitlines()[-2:])
    res["runs"] = runs
    good = [r for r in runs if not r.get("error")]
    summary = {c: {fig: spread([r[fig] for r in good if r["config"] == c and
                                   r.get(fig) is not None]) for fig in FIGURES}
               for c in CONFIGS}
    res["summary"] = summary
    res["ratios_of_medians"] = {
        "ktls_push_over_plain": ratio(summary, "ktls", "plain", "push_nonzero_MiB_per_s"),
        "user_tls_push_over_plain": ratio(summary, "user_tls", "plain", "push_nonzero_MiB_per_s"),
        "ktls_push_over_user_tls": ratio(summary, "ktls", "user_tls", "push_nonzero_MiB_per_s"),
        "ktls_source_cpu_over_user_tls": ratio(summary, "ktls", "user_tls", "push_cpu_ms"),
    }
    ktls_on = [r for r in good if r["config"] == "ktls"]
    res["ktls_sends_in_kernel"] = bool(ktls_on) and all(
        (r.get("tls_S") or {}).get("ktls_send") for r in ktls_on)
    q = res["ratios_of_medians"]
    step(f"kTLS in a node: {len(good)}/{len(runs)} runs ok; TLS push / plain push: kTLS "
         f"{q['ktls_push_over_plain']}, user space {q['user_tls_push_over_plain']}; "
         f"kTLS sends in the kernel: {res['ktls_sends_in_kernel']}")
    return res
