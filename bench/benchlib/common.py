"""bench/benchlib/common.py: The benchmark's constants (configurations, figures, triggers) and small helpers
(progress lines, sizes, ports)."""

import argparse
import os
import re
import socket
import subprocess
import sys
import time


# bench/benchlib/common.py -> the repository
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_SIZES = "64M,256M"

FULL_SIZES = "64M,256M,1G"
# --full adds these where the host can hold a source and a destination of
# that size at once (plus 2 GiB): guests past 3 GiB have their second RAM
# region at 4 GiB (docs/vmm.md).  The working set (5/8 of RAM, from 2 MiB)
# stays below 3 GiB at 4 GiB (2.5 GiB).  Issue 19: 64 MiB to 4 GiB, by 4x.
BIG_SIZES_MIB = (4096,)
# The guest under QEMU boots by multiboot, whose memory fields only report
# RAM below 4 GiB (QEMU pc puts the rest above it): QEMU runs stop here.
QEMU_MAX_MIB = 2048

ANCHOR_MIB = 256  # DESIGN.md's anchor guest: per-run figures are drawn at this size

# Both sides migrate when the guest printed this line: after three passes of
# `random`, about 95% of its working set has been written (not zero).
TRIGGER_ITER = 3

TRIGGER = f"guest: iter {TRIGGER_ITER} "  # QEMU: serial line (mark=3)

TRIGGER_REPORT = f"kind=progress iter={TRIGGER_ITER} "  # ours: vmm --trace-reports

CHECKSUM_RE = re.compile(r"last: done iter=\d+ checksum=(0x[0-9a-f]+)")

OURS = {
    "ours_postcopy": ("this project, pure postcopy, uffd (UFFDIO_COPY) back end", [], [
        "--ram-backend", "uffd"]),
    "ours_precopy_postcopy": ("this project, 2 precopy rounds then postcopy, uffd back end",
                              ["--precopy-rounds", "2"], ["--ram-backend", "uffd"]),
    "ours_uffd_move": ("this project, pure postcopy, uffd-move (UFFDIO_MOVE) back end", [], [
        "--ram-backend", "uffd-move"]),
    "ours_busy_poll": ("this project, pure postcopy, uffd back end, busy-polling fault thread",
                       [], ["--ram-backend", "uffd", "--busy-poll"]),
}

# TLS: one test CA and both ends' x509 credentials (scripts/make-tls-creds.sh,
# the server named 127.0.0.1), made once per run; ours reads them with
# --tls-creds, each libvirtd's QEMU from its own PKI directory.
TLS_DIR = os.path.join(ROOT, "build/bench/tls")

OURS["ours_tls"] = ("this project, as ours_postcopy with TLS 1.3 (x509) on every connection",
                    ["--tls-creds", TLS_DIR], ["--ram-backend", "uffd", "--tls-creds", TLS_DIR])

# name: (description, driver, accel, machine, postcopy-preempt, precopy ms)
QEMU = {
    "qemu_postcopy": ("QEMU 7.2 postcopy-ram under KVM (pc + qboot, -cpu qemu64) via libvirt, "
                      "postcopy requested at once", "libvirt", "kvm", "pc", False, 0),
    "qemu_precopy_postcopy": ("QEMU 7.2 under KVM via libvirt, 0.5 s of precopy then postcopy",
                              "libvirt", "kvm", "pc", False, 500),
    "qemu_microvm": ("QEMU 7.2 postcopy-ram under KVM, microvm machine, via QMP (libvirt 9.0 "
                     "has no microvm), postcopy at once", "qmp", "kvm", "microvm", False, 0),
    "qemu_microvm_preempt": ("QEMU 7.2 postcopy-ram + postcopy-preempt under KVM, microvm, via "
                             "QMP (libvirt 9.0 cannot enable preempt), postcopy at once", "qmp",
                             "kvm", "microvm", True, 0),
    "qemu_tcg_postcopy": ("QEMU 7.2 postcopy-ram under TCG via libvirt (extra: the emulated "
                          "vCPU; not a baseline)", "libvirt", "tcg", "pc", False, 0),
    "qemu_tls": ("QEMU 7.2 as qemu_postcopy with VIR_MIGRATE_TLS (x509 from each libvirtd's "
                 "migrate_tls_x509_cert_dir)", "libvirt", "kvm", "pc", False, 0),
}

TLS_QEMU = {"qemu_tls"}  # driven with --tls

# (with TLS, without): the cost of TLS, ratios of medians.
TLS_PAIRS = [("ours_tls", "ours_postcopy"), ("qemu_tls", "qemu_postcopy")]

EXTRA = {"qemu_tcg_postcopy"}  # run only when asked for with --configs

# Variants of the headline pairs (ours_postcopy against QEMU's pure
# postcopy) that the default run measures at the anchor size only: their
# point (the back end's, the spin policy's, precopy's, TLS's cost) is a
# ratio the anchor size already gives, and with them at both sizes the
# default run took 22 minutes here (issue 11: under 20). --configs runs
# every configuration it names at every size.
ANCHOR_ONLY = {"ours_uffd_move", "ours_busy_poll", "ours_tls", "qemu_tls",
               "ours_precopy_postcopy", "qemu_precopy_postcopy"}

# (ours, qemu) pairs whose ratios of medians are reported.
PAIRS = [("ours_postcopy", "qemu_postcopy"), ("ours_postcopy", "qemu_microvm"),
         ("ours_postcopy", "qemu_microvm_preempt"),
         ("ours_precopy_postcopy", "qemu_precopy_postcopy"),
         ("ours_busy_poll", "qemu_microvm_preempt"), ("ours_uffd_move", "qemu_microvm_preempt"),
         ("ours_postcopy", "qemu_tcg_postcopy"), ("ours_tls", "qemu_tls")]

# The figures summarised per configuration and size (median, min, max).
FIGURES = [("downtime_us", lambda r: r.get("downtime_us")),
           ("total_ms", lambda r: r.get("total_ms")),
           ("bytes_sent", lambda r: r.get("bytes_sent")),
           ("pages_requested", lambda r: r.get("pages_requested")),
           ("fault_p50_us", lambda r: (r.get("fault_latency_us") or {}).get("p50")),
           ("fault_p99_us", lambda r: (r.get("fault_latency_us") or {}).get("p99")),
           ("fault_max_us", lambda r: (r.get("fault_latency_us") or {}).get("max")),
           ("blocktime_ms", lambda r: r.get("blocktime_ms")),
           ("push_MiB_per_s", lambda r: r.get("push_MiB_per_s")),
           ("push_nonzero_MiB_per_s", lambda r: r.get("push_nonzero_MiB_per_s")),
           ("throughput_MiB_per_s", lambda r: r["bytes_sent"] / 1048576 / (r["total_ms"] / 1000)
            if r.get("bytes_sent") and r.get("total_ms") else None)]

NOT_ON_HOST = {
    "ours_remap_anon_pages": "the remap_anon_pages back end (userfault) needs the patched 6.1 "
                             "kernel, which runs only inside a QEMU node; bench/run measures on "
                             "the host (6.18), where that back end does not exist. It is "
                             "compared with UFFDIO_COPY on the same patched kernel instead: "
                             "within_kernel_twonode (one migration each between two nodes) "
                             "and backends.node (bench-backends per page in a node).",
}

T0 = time.monotonic()

def step(msg):
    print(f"bench [{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)

def die(msg):
    step(f"FAILED: {msg}")
    sys.exit(1)

def parse_size(s):
    m = re.fullmatch(r"(\d+)([MG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 64M, 2G)")
    n = int(m.group(1)) * (1024 if m.group(2) == "G" else 1)
    if n < 16 or n > 128 * 1024:
        raise argparse.ArgumentTypeError(f"size {s!r} out of range (16M..128G)")
    return n


def mem_available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


SIZES_SKIPPED = []  # [{"size_mib", "why"}]: what --full left out (results.json)


def full_sizes():
    """FULL_SIZES, and the BIG_SIZES_MIB this host has the memory for."""
    sizes = [parse_size(s) for s in FULL_SIZES.split(",")]
    avail = mem_available_mib()
    for big in BIG_SIZES_MIB:
        if 2 * big + 2048 <= avail:
            sizes.append(big)
        else:
            why = (f"MemAvailable {avail} MiB < {2 * big + 2048} (source and destination at "
                   "once, plus 2 GiB)")
            SIZES_SKIPPED.append({"size_mib": big, "why": why})
            step(f"--full: no {big} MiB guest: {why}")
    return sizes

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def listening(port):
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
    return "LISTEN" in out.stdout

# The steps of a demand fault served by its reply, between consecutive stamps
# (docs/bench.md): (name, from stamp, to stamp), stamps as in the agent's
# "stamps.steps" (1 fault, 2 request_sent, 3 request_received, 4 page_sent,
# 5 page_received, 6 installed).
FAULT_STEPS = [("dest: fault to request send", 1, 2),
               ("request: send, loopback, source wake-up", 2, 3),
               ("source: frame the page", 3, 4),
               ("reply: send, loopback, dest wake-up", 4, 5),
               ("dest: install (UFFDIO_COPY/MOVE)", 5, 6)]

SWITCH_STEPS_OURS = [("pause vCPUs", "pause", "paused"),
                     ("save state", "paused", "state_saved"),
                     ("send + receive state", "state_saved", "state_received"),
                     ("wait for the bulk channel's DONE", "state_received", "bulk_done"),
                     ("load state", "bulk_done", "state_loaded"),
                     ("start vCPUs", "state_loaded", "vcpus_resumed")]
