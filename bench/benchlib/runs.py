"""bench/benchlib/runs.py: Running things: the reference run, our migrations, QEMU's (libvirtd or QMP),
bench-backends, the two-node migrations."""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid

from .common import (CHECKSUM_RE, OURS, QEMU, ROOT, TLS_QEMU, TRIGGER, TRIGGER_ITER,
    TRIGGER_REPORT, free_port, listening, step)
from .stats import percentile, summarize
from .traces import QEMU_TRACE_EVENTS, agent_timeline, analyse_qemu_trace, ours_stamps, read_trace


# ---------------------------------------------------------------- libvirtd

class Libvirtd:
    """One libvirtd in its own mount namespace.

    libvirt refuses to migrate a domain to the host it runs on (it compares
    host UUIDs), and a privileged libvirtd has fixed state paths (/run/libvirt,
    /var/lib/libvirt, /etc/libvirt/qemu.conf).  So each daemon gets private
    copies of those paths through bind mounts in a new mount namespace, its
    own host_uuid and its own socket directory under build/bench/libvirt/."""

    def __init__(self, base, name, tls_dir=None):
        self.dir = os.path.join(base, name)
        self.name = name
        self.proc = None
        self.tls_dir = tls_dir  # x509 credentials for VIR_MIGRATE_TLS, or None

    @property
    def uri(self):
        return f"qemu+unix:///system?socket={self.dir}/run/libvirt-sock"

    def start(self):
        d = self.dir
        shutil.rmtree(d, ignore_errors=True)
        for sub in ("run", "lib", "cache", "log", "etc"):
            os.makedirs(os.path.join(d, sub))
        with open(os.path.join(d, "etc/libvirtd.conf"), "w") as f:
            f.write(f'unix_sock_dir = "{d}/run"\nunix_sock_auth = "none"\n'
                    f'auth_unix_rw = "none"\nunix_sock_rw_perms = "0700"\n'
                    f'host_uuid = "{uuid.uuid4()}"\n'
                    f'log_outputs = "3:file:{d}/log/libvirtd.log"\n')
        with open(os.path.join(d, "etc/qemu.conf"), "w") as f:
            # No cgroups, no per-domain namespaces, no SELinux/AppArmor, no
            # virtlogd: none of them is running here, none matters for timing.
            f.write('user = "root"\ngroup = "root"\ndynamic_ownership = 0\n'
                    'remember_owner = 0\nsecurity_driver = "none"\n'
                    'cgroup_controllers = [ ]\nnamespaces = [ ]\nstdio_handler = "file"\n')
            if self.tls_dir:
                # Each daemon's own PKI directory (QEMU's tls-creds-x509
                # layout: both ends' files, the server's and the client's).
                pki = os.path.join(d, "pki")
                shutil.copytree(self.tls_dir, pki)
                f.write(f'migrate_tls_x509_cert_dir = "{pki}"\nmigrate_tls_x509_verify = 1\n')
        script = (f"set -e; mount --make-rprivate /; "
                  f"mount --bind {d}/lib /var/lib/libvirt; "
                  f"mount -t tmpfs bench-run /run; mkdir -p /run/libvirt; "
                  f"mount --bind {d}/cache /var/cache/libvirt; "
                  f"mount --bind {d}/log /var/log/libvirt; "
                  f"mount --bind {d}/etc/qemu.conf /etc/libvirt/qemu.conf; "
                  f"exec /usr/sbin/libvirtd -f {d}/etc/libvirtd.conf")
        for p in ("/var/lib/libvirt", "/var/cache/libvirt", "/var/log/libvirt",
                  "/etc/libvirt/qemu.conf"):
            if not os.path.exists(p):
                return f"{p} is missing (libvirt-daemon-system not installed?)"
        out = open(os.path.join(d, "daemon.out"), "w")
        self.proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        sock = os.path.join(d, "run/libvirt-sock")
        for _ in range(300):
            if os.path.exists(sock):
                return None
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(os.path.join(d, "daemon.out")) as f:
            tail = f.read()[-400:]
        return f"libvirtd {self.name} did not come up: {tail.strip() or 'no output'}"

    def warm_up(self, guest):
        """Start and destroy one tiny domain: the daemon's first QEMU start
        probes QEMU's capabilities (seconds), which must not land in a
        measured migration (libvirt starts the destination QEMU within it)."""
        xml = os.path.join(self.dir, "warmup.xml")
        with open(xml, "w") as f:
            f.write("<domain type='qemu'><name>pcbench-warmup</name>"
                    "<memory unit='MiB'>16</memory><os><type arch='x86_64' machine='pc'>hvm"
                    f"</type><kernel>{guest}</kernel><cmdline>workload=idle iters=1000000"
                    "</cmdline></os><devices><memballoon model='none'/></devices></domain>")
        r = subprocess.run(["virsh", "-q", "-c", self.uri, "create", xml], capture_output=True,
                           text=True, timeout=120)
        subprocess.run(["virsh", "-q", "-c", self.uri, "destroy", "pcbench-warmup"],
                       capture_output=True, text=True, timeout=60)
        return None if r.returncode == 0 else f"warm-up domain failed: {r.stderr.strip()}"

    def destroy_all(self):
        """Destroy this daemon's domains (an interrupted run leaves some:
        QEMU outlives a stopped libvirtd)."""
        if not self.proc or self.proc.poll() is not None:
            return
        r = subprocess.run(["virsh", "-q", "-c", self.uri, "list", "--name"],
                           capture_output=True, text=True, timeout=60)
        for name in r.stdout.split():
            subprocess.run(["virsh", "-q", "-c", self.uri, "destroy", name],
                           capture_output=True, text=True, timeout=60)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- guest runs

def reference_run(args, size, cmdline, logf):
    """The unmigrated run: (checksum, seconds)."""
    t = time.monotonic()
    r = subprocess.run([args.vmm, "run", "--image", args.guest, "--mem", f"{size}M", "--cmdline",
                        cmdline], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=600)
    el = time.monotonic() - t
    with open(logf, "w") as f:
        f.write(r.stderr)
    m = CHECKSUM_RE.search(r.stderr)
    if r.returncode != 0 or not m:
        return None, el, f"reference run failed (exit {r.returncode}): {r.stderr.strip()[-300:]}"
    return m.group(1), el, None


def calibrate(args, size, ws_pages, wdir):
    """Choose the iteration count so that the unmigrated run lasts long
    enough to be migrated mid-run; returns (cmdline, checksum, seconds)."""
    target = 2.0 + size / 128.0
    iters = max(8, int(28e6 / ws_pages))
    ws = size * 5 // 8
    for attempt in range(4):
        # One command line for ours and QEMU-KVM.  quiet=1: under KVM every
        # serial byte is a VM exit; mark=3: the one serial line QEMU's
        # driver waits for (ours waits for the same pass's report).
        cmd = f"workload=random mem={ws}M seed=1 iters={iters} quiet=1 mark={TRIGGER_ITER}"
        ck, el, err = reference_run(args, size, cmd, os.path.join(wdir, f"reference-{attempt}.err"))
        if err:
            return cmd, None, el, err
        step(f"{size} MiB: unmigrated reference, iters={iters}: {el:.1f} s, checksum {ck}")
        if el >= target:
            return cmd, ck, el, None
        iters = int(iters * target / max(el, 0.05) * 1.2) + 1
    return cmd, ck, el, None


def run_ours(args, name, size, cmdline, ref, t_ref, wdir):
    desc, src_extra, dst_extra = OURS[name]
    res = {"config": name, "side": "ours", "description": desc, "size_mib": size,
           "cmdline": cmdline, "checksum_reference": ref}
    port = free_port()
    d_json, s_json = os.path.join(wdir, f"{name}-dest.json"), os.path.join(wdir,
                                                                           f"{name}-src.json")
    timeout = 60 + 6 * t_ref
    sock = os.path.join(wdir, f"{name}.sock")
    d_err = open(os.path.join(wdir, f"{name}-dest.err"), "w")
    s_err = open(os.path.join(wdir, f"{name}-src.err"), "w")
    dest = subprocess.Popen([args.vmm, "run", "--mem", f"{size}M", "--incoming",
                             f"tcp:127.0.0.1:{port}", "--migrate-metrics", d_json] + dst_extra,
                            stdout=subprocess.DEVNULL, stderr=d_err)
    t = time.monotonic()
    src = th = None
    try:
        for _ in range(200):
            if listening(port) or dest.poll() is not None:
                break
            time.sleep(0.025)
        if dest.poll() is not None:
            raise RuntimeError(f"destination exited at once ({dest.returncode})")
        # quiet=1: under KVM every serial byte is a VM exit, which would
        # slow the workload down; the guest's progress reports (one port
        # write per pass, printed by --trace-reports) tell when to migrate.
        src = subprocess.Popen([args.vmm, "run", "--image", args.guest, "--mem", f"{size}M",
                                "--cmdline", cmdline, "--control", sock, "--trace-reports"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        trigger = threading.Event()

        def drain():  # the VMM's stderr; must be read to the end
            for line in src.stderr:
                s_err.write(line)
                if TRIGGER_REPORT in line:
                    trigger.set()
            trigger.set()
        th = threading.Thread(target=drain, daemon=True)
        th.start()
        if not trigger.wait(timeout) or src.poll() is not None:
            raise RuntimeError(f"the guest never reported {TRIGGER_REPORT.strip()!r}")
        cli = subprocess.run([args.migrate_agent, "migrate", "--vmm", sock, "--to",
                              f"tcp:127.0.0.1:{port}", "--metrics", s_json] + src_extra,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             timeout=timeout)
        src.wait(timeout)
        dest.wait(timeout)
        th.join(10)
    except (subprocess.TimeoutExpired, RuntimeError) as e:
        for p in (src, dest):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        res["error"] = f"{type(e).__name__}: {e}"
        return res
    finally:
        if th:
            th.join(10)
        d_err.close()
        s_err.close()
    res["wall_s"] = round(time.monotonic() - t, 2)
    with open(os.path.join(wdir, f"{name}-dest.err")) as f:
        derr = f.read()
    with open(os.path.join(wdir, f"{name}-src.err")) as f:
        serr = f.read()
    with open(os.path.join(wdir, f"{name}-cli.err"), "w") as f:
        f.write(cli.stderr)
    if cli.returncode != 0:
        # The CLI's own message first: the VMM's lines (serr) only say the
        # migration went on.
        res["error"] = (f"migrate-agent exit {cli.returncode}: " +
                        " | ".join((cli.stderr.strip().splitlines() or
                                    serr.strip().splitlines())[-2:]))
        return res
    if src.returncode != 0 or dest.returncode != 0:
        res["error"] = (f"source exit {src.returncode}, destination exit {dest.returncode}: " +
                        " | ".join((serr + derr).strip().splitlines()[-3:]))
    m = CHECKSUM_RE.search(derr)
    res["checksum"] = m.group(1) if m else None
    res["checksum_ok"] = res["checksum"] == ref
    try:
        with open(s_json) as f:
            s = json.load(f)
        with open(d_json) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        res.setdefault("error", f"no metrics JSON: {e}")
        return res
    lat = s.get("fault_latency_us", {})
    res.update({
        "downtime_us": s.get("downtime_us"),
        "downtime_how": "agent: destination resume minus source pause, CLOCK_REALTIME",
        "total_ms": s.get("total_ms"),
        "postcopy_ms": s.get("postcopy_ms"),
        "precopy_ms": (round(s["total_ms"] - s["postcopy_ms"], 3)
                       if s.get("total_ms") is not None and s.get("postcopy_ms") is not None
                       else None),
        "bytes_sent": s.get("bytes_sent", {}).get("total"),
        "bytes_sent_detail": s.get("bytes_sent"),
        "pages_requested": s.get("pages_requested"),
        "pages_demand": s.get("pages_demand"),
        "pages_pushed": s.get("pages_pushed"),
        "pages_precopy": (s.get("pages_precopy") or 0) + (s.get("pages_precopy_resent") or 0),
        "pages_zero": s.get("pages_zero"),
        "duplicate_pages": s.get("duplicate_pages"),
        "faults": d.get("faults"),
        "fault_latency_us": {"p50": lat.get("p50"), "p99": lat.get("p99"),
                             "max": lat.get("max"), "n": s.get("faults"),
                             "how": "agent: fault read to page installed, at the destination"},
        "fault_latency_histogram": lat.get("histogram"),
        "blocktime_ms": s.get("blocktime_ms"),
        "push_MiB_per_s": s.get("push_MiB_per_s"),
        "push_nonzero_MiB_per_s": s.get("push_nonzero_MiB_per_s"),
        "timeline": agent_timeline(d.get("timeline")),
        "timeline_how": "agent: destination's per-page install times, bucketed (bucket_ms); "
                        "precopy-staged pages not counted",
        "agent_source": s, "agent_destination": d,
    })
    res.update(ours_stamps(s, d))
    for side in (s, d):  # the raw stamps are summarised above; keep the JSON small
        side.pop("stamps", None)
    if not res["checksum_ok"] and "error" not in res:
        res["error"] = f"checksum {res['checksum']} after migration, {ref} without"
    return res


def qemu_driver_argv(args, name, size, cmdline, lv, qdir, timeout_s):
    """The command line of the driver of configuration NAME: the libvirt
    one (bench/qemu-postcopy.c) or the QMP one (bench/qmp-postcopy)."""
    _, driver, accel, machine, preempt, precopy_ms = QEMU[name]
    common = ["--guest", args.guest, "--mem", str(size), "--cmdline", cmdline, "--workdir", qdir,
              "--port", str(free_port()), "--trace", ",".join(QEMU_TRACE_EVENTS),
              "--start-text", TRIGGER, "--precopy-ms",
              str(precopy_ms), "--timeout-s", str(timeout_s)]
    if driver == "libvirt":
        return ([args.qemu_postcopy, "--src", lv[0].uri, "--dst", lv[1].uri, "--accel", accel,
                 "--start-after-ms", "0"] + (["--tls"] if name in TLS_QEMU else []) + common)
    return ([os.path.join(ROOT, "bench/qmp-postcopy"), "--accel", accel, "--machine", machine] +
            (["--preempt"] if preempt else []) + common)


def run_qemu(args, name, size, cmdline, ref, t_ref, lv, wdir):
    desc, driver, accel, machine, preempt, precopy_ms = QEMU[name]
    res = {"config": name, "side": "qemu", "description": desc, "size_mib": size,
           "cmdline": cmdline, "checksum_reference": ref, "precopy_requested_ms": precopy_ms,
           "driver": driver, "accel": accel, "machine": machine, "postcopy_preempt": preempt}
    if driver == "libvirt" and not lv:
        res["error"] = args.libvirt_error or "libvirtd is not running"
        return res
    qdir = wdir
    timeout_s = int(120 + 40 * t_ref)
    t = time.monotonic()
    try:
        r = subprocess.run(qemu_driver_argv(args, name, size, cmdline, lv, qdir, timeout_s),
                           capture_output=True, text=True, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired:
        res["error"] = f"QEMU driver timed out after {timeout_s + 60} s"
        return res
    res["wall_s"] = round(time.monotonic() - t, 2)
    with open(os.path.join(qdir, "driver.err"), "w") as f:
        f.write(r.stderr)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        res["error"] = f"{driver} driver printed no JSON (exit {r.returncode}): {r.stderr[-300:]}"
        return res
    res["driver_output"] = j
    if j.get("error"):
        res["error"] = j["error"]
    res["checksum"] = j.get("checksum")
    res["checksum_ok"] = res["checksum"] == ref
    res["postcopy_started"] = j.get("postcopy_started")
    cs = j.get("completed_stats") or {}
    tr = analyse_qemu_trace(j.get("trace_src", ""), j.get("trace_dst", ""), size)
    normal, const = cs.get("memory_normal"), cs.get("memory_constant")
    req = cs.get("memory_postcopy_requests")
    res.update({
        "downtime_us": tr.get("downtime_us"),
        "downtime_how": "QEMU trace: source postcopy_start_set_run (before vm_stop) to "
                        "destination loadvm_postcopy_handle_run_bh return (after vm_start), "
                        "gettimeofday on one host",
        "qemu_reported_downtime_ms": cs.get("downtime"),
        "total_ms": tr.get("total_ms"),
        "total_how": "QEMU trace (source migrate_set_state): setup to completed",
        "precopy_ms": tr.get("precopy_ms"),
        "postcopy_ms": tr.get("postcopy_ms"),
        "libvirt_job_ms": cs.get("time_elapsed"),
        "bytes_sent": cs.get("memory_processed"),
        "pages_requested": req,
        "pages_demand": tr.get("pages_demand"),
        "pages_sent": (normal or 0) + (const or 0) if cs else None,
        "pages_pushed": ((normal or 0) + (const or 0) - (tr.get("pages_demand") or 0))
        if cs else None,
        "pages_zero": const,
        "precopy_passes": cs.get("memory_iteration"),
        "fault_latency_us": tr["fault_latency_us"],
        "requests_for_pages_already_placed": tr["requests_for_pages_already_placed"],
        "blocktime_ms": tr["blocktime_ms"],
        "timeline": tr["timeline"],
        "latencies_us": tr["latencies_us"],
        "switchover_steps_us": tr.get("switchover_steps_us"),
        "page_map": tr.get("page_map"),
    })
    if j.get("postcopy_started") is False and not res.get("error"):
        res["note"] = ("precopy completed before postcopy could start: " +
                       (j.get("postcopy_error") or ""))
        if res["downtime_us"] is None and cs.get("downtime") is not None:
            res["downtime_us"] = float(cs["downtime"]) * 1000.0
            res["downtime_how"] = "QEMU's own figure (ms resolution): no postcopy switch to trace"
    if not res["checksum_ok"] and not res.get("error"):
        res["error"] = f"checksum {res['checksum']} after migration, {ref} without"
    # TLS is believed only when QEMU's own trace shows its handshakes.
    res["tls_handshakes"] = sum(1 for side in ("trace_src", "trace_dst")
                                for _, ev, _ in read_trace(j.get(side, ""))
                                if ev == "qio_channel_tls_handshake_complete")
    if name in TLS_QEMU and not res["tls_handshakes"] and not res.get("error"):
        res["error"] = "VIR_MIGRATE_TLS asked for, but QEMU's trace shows no TLS handshake"
    return res


# ---------------------------------------------------------------- repeats

def prepare_size(args, size, configs, sdir):
    """The command line(s) and reference checksum(s) of one size: one
    calibrated command line for every KVM configuration (ours and QEMU's),
    and a quarter of its iterations for QEMU under TCG (an emulated vCPU is
    several times slower; same workload, seed and working set)."""
    ws_pages = size * 5 // 8 * 256
    cmdline, ref, t_ref, err = calibrate(args, size, ws_pages, sdir)
    out = {"cmdline": cmdline, "checksum": ref, "seconds": round(t_ref, 2), "error": err}
    if err:
        step(f"{size} MiB: {err}")
        return out
    if any(QEMU.get(c, ("",) * 3)[2] == "tcg" for c in configs):
        iters = int(re.search(r"iters=(\d+)", cmdline).group(1))
        tcmd = cmdline.replace(f"iters={iters}", f"iters={max(4, iters // 4)}")
        tref, _, terr = reference_run(args, size, tcmd, os.path.join(sdir, "reference-tcg.err"))
        out.update({"tcg_cmdline": tcmd, "tcg_checksum": tref, "tcg_error": terr})
        step(f"{size} MiB: reference for the TCG command line ({tcmd}): {terr or tref}")
    return out


def interleaved(configs):
    """ours, QEMU, ours, QEMU, ...: noise (the other helpers' jobs on the two
    CPUs) then hits both sides alike."""
    ours = [c for c in configs if c in OURS]
    qemu = [c for c in configs if c in QEMU]
    out = []
    for i in range(max(len(ours), len(qemu))):
        out += ours[i:i + 1] + qemu[i:i + 1]
    return out


def run_one(args, c, size, rep, ref, lv, sdir):
    wdir = os.path.join(sdir, f"rep{rep}", c)
    os.makedirs(wdir, exist_ok=True)
    step(f"{size} MiB, run {rep + 1}/{args.repeats}: {c} ...")
    tcg = c in QEMU and QEMU[c][2] == "tcg"
    cmd, ck = ((ref.get("tcg_cmdline"), ref.get("tcg_checksum")) if tcg
               else (ref["cmdline"], ref["checksum"]))
    if ref.get("error") or not ck:
        r = {"config": c, "size_mib": size, "side": "qemu" if c in QEMU else "ours",
             "error": f"no reference checksum: {ref.get('tcg_error' if tcg else 'error')}"}
    elif c in OURS:
        r = run_ours(args, c, size, cmd, ck, ref["seconds"], wdir)
    else:
        r = run_qemu(args, c, size, cmd, ck, ref["seconds"], lv, wdir)
    r["rep"] = rep
    step(f"{size} MiB, run {rep + 1}: {c}: {summarize(r)}")
    return r


def run_backends(args, out):
    """(d) page-install back ends against each other, per page: bench-backends on
    this host (UFFDIO_COPY, UFFDIO_MOVE) and inside a QEMU node on the patched
    kernel (UFFDIO_COPY, remap_anon_pages).  The node runs under TCG, so compare
    back ends within one kernel, not across the two."""
    res = {}
    step(f"back ends on the host: bench-backends --pages {args.backend_pages}")
    p = subprocess.run([os.path.join(ROOT, "build/bin/bench-backends"), "--pages",
                        str(args.backend_pages)], capture_output=True, text=True, timeout=300)
    try:
        res["host"] = json.loads(p.stdout)
    except ValueError:
        res["host"] = {"error": f"bench-backends exited {p.returncode}: {p.stderr.strip()[-300:]}"}
    if args.no_node:
        res["node"] = {"error": "not run (--no-node)"}
        return res
    pages = max(100, args.backend_pages // 20)  # everything in a node is emulated: slow
    step(f"back ends in a QEMU node on the patched kernel: bench-backends --pages {pages}")
    log = os.path.join(out, "runs", "bench-backends-node.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    cmd = (f"bench-backends --pages {pages} --backend uffd --backend userfault > /tmp/b.json "
           "&& echo \"@@JSON $(tr -d '\\n' < /tmp/b.json)\"")
    p = subprocess.run([os.path.join(ROOT, "tests/node-launch"), "--name", "bench-backends",
                        "--log", log, "--quiet", "--timeout", "600", "--", cmd],
                       capture_output=True, text=True, timeout=700)
    found = None
    with open(log, errors="replace") as fh:
        for line in fh:
            if line.startswith("@@JSON "):
                found = line[len("@@JSON "):].strip()
    try:
        res["node"] = json.loads(found) if found else {
            "error": f"node-launch exited {p.returncode}: {p.stderr.strip()[-300:]}"}
    except ValueError as e:
        res["node"] = {"error": f"unreadable bench-backends output: {e}"}
    return res


TWONODE_WORKLOAD = "workload=random mem=8M ops=50000 iters=2000 seed=42 quiet=1"


def run_twonode(args, out):
    """(8) remap_anon_pages against UFFDIO_COPY on the same patched kernel:
    one postcopy migration between two QEMU nodes (TCG, nested KVM) with the
    destination on the `userfault` back end (MADV_USERFAULT, the article's
    protocol, remap_anon_pages), then one with `uffd`, then one with
    `kvm-exit` (unclaimed MADV_USERFAULT RAM: each vCPU serves its own
    KVM_EXIT_MEMORY_FAULT).  A within-kernel comparison: everything runs
    emulated, so never beside the host figures."""
    if args.no_node:
        return {"error": "not run (--no-node)"}
    for f in ("build/kernel/bzImage", "build/initramfs.cpio.gz"):
        if not os.path.exists(os.path.join(ROOT, f)):
            return {"error": f"not run: {f} missing (make kernel guest-image)"}
    res = {"workload": TWONODE_WORKLOAD, "mem": "16M", "runs": []}
    for backend in ("userfault", "uffd", "kvm-exit"):
        name = f"bench-twonode-{backend}"
        step(f"two nodes on the patched kernel, destination back end {backend} ...")
        t = time.monotonic()
        p = subprocess.run([os.path.join(ROOT, "scripts/twonode-migrate.sh"), "--name", name,
                            "--mem", "16M", "--after", "300", "--workload", TWONODE_WORKLOAD,
                            "--backend", backend], capture_output=True, text=True, timeout=700)
        r = {"backend": backend, "wall_s": round(time.monotonic() - t, 1)}
        with open(os.path.join(out, "runs", f"{name}.out"), "w") as f:
            f.write(p.stdout + p.stderr)

        def field(side, tag):
            try:
                with open(os.path.join(ROOT, "build/nodes", f"{name}-{side}.log"),
                          errors="replace") as f:
                    vals = [ln.strip()[len(tag) + 3:] for ln in f
                            if ln.strip().startswith(f"@@{tag} ")]
                return vals[-1] if vals else None
            except OSError:
                return None
        try:
            sj, dj = json.loads(field("a", "SRC_JSON") or "null"), json.loads(
                field("b", "DEST_JSON") or "null")
        except ValueError:
            sj = dj = None
        if p.returncode != 0 or not sj or not dj:
            r["error"] = (f"twonode-migrate exited {p.returncode}: " +
                          " | ".join((p.stdout + p.stderr).strip().splitlines()[-2:]))
        if sj and dj:
            lats = sorted((rec[6] - rec[1]) / 1000.0 for rec in
                          (dj.get("stamps") or {}).get("records", []) if rec[1] and rec[6])
            r.update({"downtime_us": sj.get("downtime_us"), "total_ms": sj.get("total_ms"),
                      "pages_requested": dj.get("pages_requested"),
                      "pages_demand": dj.get("pages_demand"),
                      "fault_latency_us": {"p50": percentile(lats, 0.5),
                                           "p99": percentile(lats, 0.99),
                                           "max": lats[-1] if lats else None, "n": len(lats),
                                           "how": "destination stamps (one node's clock)"},
                      "blocktime_ms": dj.get("blocktime_ms"),
                      "faults_own_thread": dj.get("faults_own_thread"),
                      "duplicate_pages": dj.get("duplicate_pages"),
                      "checksum_reference": field("a", "REF_SUM"),
                      "checksum": field("b", "DEST_SUM")})
            r["checksum_ok"] = bool(r["checksum"]) and r["checksum"] == r["checksum_reference"]
        res["runs"].append(r)
        step(f"two nodes, {backend}: " + (r.get("error") or
             f"downtime {r['downtime_us']} us, fault p50 {r['fault_latency_us']['p50']} us, "
             f"p99 {r['fault_latency_us']['p99']} us (n={r['fault_latency_us']['n']})"))
    return res
