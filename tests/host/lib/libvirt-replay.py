#!/usr/bin/env python3
"""libvirt-replay: the QMP libvirt's QEMU driver sends, replayed at both ends.

  libvirt-replay.py DSOCK SSOCK URI URI2

DSOCK is a destination VMM started as libvirt starts QEMU for an incoming
migration (`vmm run --incoming defer --control DSOCK`, QEMU's `-incoming
defer`), SSOCK the running source.  The transcript is that of

  virsh migrate --live --postcopy --postcopy-after-precopy \\
      --bandwidth 8 --postcopy-bandwidth 1 --listen-address 127.0.0.1 DOM DEST
  virsh domjobabort --postcopy DOM               (while in postcopy)
  virsh migrate --postcopy --postcopy-resume --postcopy-bandwidth 1 \\
      --migrateuri URI2 --listen-address 127.0.0.1 DOM DEST

as libvirt 9.x/10.x's qemu driver sends it (client-driven v3 protocol:
Begin, Prepare, Perform, Finish, Confirm; the resume runs the same phases
with VIR_MIGRATE_POSTCOPY_RESUME).  --bandwidth and --postcopy-bandwidth
(MiB/s, libvirt's units) keep the postcopy long enough to be paused;
--listen-address keeps the destination on loopback (libvirt's default
listen address is "::", i.e. tcp:[::]:PORT).  The sequence was written
from libvirt's src/qemu/qemu_migration.c, qemu_migration_params.c,
qemu_monitor_json.c and qemu_process.c; each command names the libvirt
function that sends it.  Every reply and event is checked the way the
libvirt function that reads it parses it (qemuMonitorJSON*).

Where this VMM lacks what libvirt sends or waits for, the transcript says
"gap: ..." and goes on the nearest honest way (said each time); the gaps are
listed at the end and in docs/migration.md.  Exits 0 when the migration and
its recovery went through and every reply had the shape libvirt reads; 1
with the reason otherwise.
"""
import socket
import sys
import time

from qmp import QMP, QMPClosed, QMPError

# qemuMonitorMigrationStatus (qemu_monitor.c, libvirt 10.x): the statuses
# libvirt knows; a query-migrate with another is an error
# ("unexpected migration status"), an event with another is dropped.
LIBVIRT_STATUSES = {"inactive", "setup", "active", "pre-switchover", "device",
                    "postcopy-active", "postcopy-paused", "postcopy-recover-setup",
                    "postcopy-recover", "completed", "failed", "cancelling", "cancelled",
                    "wait-unplug"}
# The statuses whose "ram" qemuMonitorJSONGetMigrationStatsReply reads.
RAM_STATUSES = {"active", "postcopy-active", "postcopy-paused", "postcopy-recover",
                "completed", "cancelling", "pre-switchover", "device"}
# qemuMigrationCapability (qemu_migration_params.c), in libvirt's order.
LIBVIRT_CAPS = ["xbzrle", "auto-converge", "rdma-pin-all", "events", "postcopy-ram",
                "compress", "pause-before-switchover", "late-block-activate", "multifd",
                "dirty-bitmaps", "return-path", "zero-copy-send"]
# qemuMigrationParam and its types (qemuMigrationParamInfo), in libvirt's order.
LIBVIRT_PARAMS = [("compress-level", int), ("compress-threads", int),
                  ("decompress-threads", int), ("cpu-throttle-initial", int),
                  ("cpu-throttle-increment", int), ("tls-creds", str), ("tls-hostname", str),
                  ("max-bandwidth", int), ("downtime-limit", int), ("block-incremental", bool),
                  ("xbzrle-cache-size", int), ("max-postcopy-bandwidth", int),
                  ("multifd-channels", int), ("multifd-compression", str),
                  ("multifd-zlib-level", int), ("multifd-zstd-level", int)]
# qemuMonitorVMStatus (qemu_monitor.c).
LIBVIRT_VM_STATUSES = {"debug", "inmigrate", "internal-error", "io-error", "paused",
                       "postmigrate", "prelaunch", "finish-migrate", "restore-vm", "running",
                       "save-vm", "shutdown", "watchdog", "guest-panicked", "colo",
                       "suspended"}
MIB = 1 << 20
# priv->migMaxBandwidth's default, QEMU_DOMAIN_MIG_BANDWIDTH_MAX (INT64_MAX
# MiB/s rounded down), in bytes/s as qemuMigrationSrcRun sets max-bandwidth.
LIBVIRT_DEFAULT_MAX_BANDWIDTH = ((1 << 63) - 1) // MIB * MIB
# libvirt's oldest QEMU (qemu_capabilities.c, 9.x and later).
LIBVIRT_MIN_QEMU = (4, 2, 0)

gaps = []


def fail(what):
    raise SystemExit(f"FAIL: {what}")


def check(cond, what):
    if not cond:
        fail(what)
    print(f"ok: {what}")


def gap(what):
    if what not in gaps:
        gaps.append(what)
        print(f"gap: {what}")


def uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class End:
    """One end as libvirt's monitor sees it: every event checked as it comes."""

    def __init__(self, name, path):
        self.name = name
        self.q = QMP(path)  # greeting read, qmp_capabilities sent (qemuMonitorJSONSetCapabilities)
        self.seen = 0  # events checked so far
        self.statuses = []  # MIGRATION statuses, in order
        self.passes = []  # MIGRATION_PASS passes
        self.names = []  # every event's name
        self.closed = False

    def _check_events(self):
        """qemuMonitorJSONIOProcessEvent and the handlers it calls."""
        for ev in self.q.events[self.seen:]:
            name, data, ts = ev.get("event"), ev.get("data", {}), ev.get("timestamp", {})
            if not isinstance(name, str) or not uint(ts.get("seconds")) or \
                    not uint(ts.get("microseconds")):
                fail(f"[{self.name}] event without a name or timestamp libvirt reads: {ev}")
            self.names.append(name)
            if name == "MIGRATION":  # qemuMonitorJSONHandleMigrationStatus
                st = data.get("status")
                if st not in LIBVIRT_STATUSES:
                    fail(f"[{self.name}] MIGRATION status libvirt does not know: {ev}")
                self.statuses.append(st)
                print(f"   <- [{self.name}] MIGRATION {st}")
            elif name == "MIGRATION_PASS":  # qemuMonitorJSONHandleMigrationPass
                if not uint(data.get("pass")):
                    fail(f"[{self.name}] MIGRATION_PASS without an integer pass: {ev}")
                self.passes.append(data["pass"])
                print(f"   <- [{self.name}] MIGRATION_PASS {data['pass']}")
            else:
                print(f"   <- [{self.name}] {name}")
        self.seen = len(self.q.events)

    def execute(self, who, cmd, **args):
        """cmd as libvirt's `who` sends it; the whole reply, events checked."""
        shown = " ".join(f"{k}={v!r}" for k, v in args.items())
        print(f"-> [{self.name}] {who}: {cmd} {shown}".rstrip())
        try:
            reply = self.q.execute(cmd, **args)
        except (QMPClosed, BrokenPipeError, ConnectionResetError) as e:  # the peer gone
            self.closed = True
            raise QMPClosed(f"[{self.name}] {cmd}: the VMM closed its socket") from e
        self._check_events()
        if "error" in reply:
            err = reply["error"]
            if not isinstance(err.get("class"), str) or not isinstance(err.get("desc"), str):
                fail(f"[{self.name}] {cmd}: an error libvirt cannot read: {reply}")
            print(f"   <- [{self.name}] error {err['class']}: {err['desc']}")
        return reply

    def command(self, who, cmd, **args):
        """As execute(); an error reply fails the transcript, as it fails libvirt's job."""
        reply = self.execute(who, cmd, **args)
        if "error" in reply:
            fail(f"[{self.name}] {who}: {cmd} refused: {reply['error']['desc']}")
        return reply["return"]

    def empty(self, who, cmd, **args):
        """qemuMonitorJSONCheckError: the command's return is not looked at."""
        ret = self.command(who, cmd, **args)
        check(isinstance(ret, dict), f"[{self.name}] {cmd}: a return libvirt accepts")
        return ret

    def wait_event(self, pred, limit):
        """Read events until pred() holds or limit s pass (libvirt's qemuDomainObjWait)."""
        end = time.monotonic() + limit
        while not pred():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.q.sock.settimeout(min(left, 0.5))
            try:
                msg = self.q.read()
            except (socket.timeout, TimeoutError):
                continue
            except QMPClosed:
                self.closed = True
                return pred()
            finally:
                self.q.sock.settimeout(120)
            if "event" not in msg:
                fail(f"[{self.name}] a reply nobody asked for: {msg}")
            self.q.events.append(msg)
            self._check_events()
        return True


def migration_stats(end, who):
    """query-migrate as qemuMonitorJSONGetMigrationStatsReply reads it."""
    ret = end.command(who, "query-migrate")
    st = ret.get("status")
    if not isinstance(st, str):
        fail(f"[{end.name}] query-migrate: no status (libvirt: 'info migration reply was "
             f"missing return status'): {ret}")
    if st not in LIBVIRT_STATUSES:
        fail(f"[{end.name}] query-migrate: 'unexpected migration status in {st}'")
    for k in ("total-time", "downtime", "expected-downtime", "setup-time"):
        if k in ret and not uint(ret[k]):
            fail(f"[{end.name}] query-migrate: {k} is not an integer: {ret[k]!r}")
    if st == "failed" and not isinstance(ret.get("error-desc", ""), str):
        fail(f"[{end.name}] query-migrate: error-desc is not a string")
    ram = ret.get("ram")
    if st in RAM_STATUSES and ram is not None:
        for k in ("transferred", "remaining", "total"):
            if not uint(ram.get(k)):
                fail(f"[{end.name}] query-migrate: 'migration was active, but RAM '{k}' "
                     f"data was missing': {ram}")
        if "mbps" in ram and not isinstance(ram["mbps"], (int, float)):
            fail(f"[{end.name}] query-migrate: ram.mbps is not a number")
        for k in ("duplicate", "normal", "normal-bytes", "dirty-pages-rate", "page-size",
                  "dirty-sync-count", "postcopy-requests"):
            if k in ram and not uint(ram[k]):
                fail(f"[{end.name}] query-migrate: ram.{k} is not an integer")
        lacks = [k for k in ("mbps", "duplicate", "normal-bytes") if k not in ram]
        lacks += [k for k in ("setup-time", "expected-downtime") if k not in ret and
                  (k != "expected-downtime" or st != "completed")]
        if lacks:
            gap(f"query-migrate lacks {', '.join(lacks)}, which libvirt shows in "
                f"domjobinfo when present (read, not required)")
    print(f"   query-migrate [{end.name}]: {st}"
          + (f", ram {ram.get('transferred')}/{ram.get('total')} bytes sent" if ram else ""))
    return ret


def query_status(end, who, want=None):
    """query-status as qemuMonitorJSONGetStatus reads it."""
    ret = end.command(who, "query-status")
    if not isinstance(ret.get("running"), bool):
        fail(f"[{end.name}] query-status: 'query-status reply was missing running state'")
    if ret.get("status") not in LIBVIRT_VM_STATUSES:
        fail(f"[{end.name}] query-status: status libvirt does not know: {ret}")
    if want:
        got = ret["status"]
        check(got == want,
              f"[{end.name}] query-status: {want}" + ("" if got == want else f", got {got}"))
    return ret


def capabilities_check(end):
    """qemuMigrationCapsCheck (qemuConnectMonitor, at the process's start): the
    capabilities libvirt will touch, then events always on."""
    ret = end.command("qemuMigrationCapsCheck", "query-migrate-capabilities")
    if not isinstance(ret, list) or not all(
            isinstance(c, dict) and isinstance(c.get("capability"), str) and
            isinstance(c.get("state"), bool) for c in ret):
        fail(f"[{end.name}] query-migrate-capabilities: not [{{capability, state}}]: {ret}")
    listed = {c["capability"] for c in ret}
    known = [c for c in LIBVIRT_CAPS if c in listed]
    check("postcopy-ram" in known and "events" in known,
          f"[{end.name}] query-migrate-capabilities: libvirt finds {known}")
    end.empty("qemuMigrationCapsCheck", "migrate-set-capabilities",
              capabilities=[{"capability": "events", "state": True}])
    return [c for c in known if c != "events"]  # cleared from priv->migrationCaps


def caps_json(caps, on):
    """qemuMigrationCapsToJSON: every capability QEMU listed, each with its state."""
    return [{"capability": c, "state": c in on} for c in caps]


def params_fetch(end):
    """qemuMigrationParamsCheck -> qemuMigrationParamsFetch: the values kept to
    restore after the job (qemuMigrationParamsFromJSON reads the known ones)."""
    ret = end.command("qemuMigrationParamsCheck", "query-migrate-parameters")
    if not isinstance(ret, dict):
        fail(f"[{end.name}] query-migrate-parameters: not an object")
    orig = {}
    for name, typ in LIBVIRT_PARAMS:
        if name in ret:
            v = ret[name]
            ok = isinstance(v, bool) if typ is bool else (
                uint(v) if typ is int else isinstance(v, str))
            if not ok:
                fail(f"[{end.name}] query-migrate-parameters: {name} is not {typ.__name__}")
            orig[name] = v
    print(f"   libvirt keeps [{end.name}]: {sorted(orig)}")
    end.raw_params = ret
    return orig


def wait_status(end, want, limit, why):
    """Wait for a MIGRATION status in want, as libvirt does (events only);
    without events at this end, poll query-migrate the way
    qemuMigrationAnyRefreshStatus reads it, and say so."""
    if end.wait_event(lambda: any(s in want for s in end.statuses[-1:]), 3):
        return end.statuses[-1]
    if not end.statuses and end.name == "D":
        gap("no MIGRATION events at the destination (libvirt's Finish phase waits "
            "for them: qemuMigrationDstWaitForCompletion); the replay polls query-migrate")
        end_t = time.monotonic() + limit
        while time.monotonic() < end_t:
            st = migration_stats(end, f"(poll instead of events: {why})")["status"]
            if st in want:
                return st
            time.sleep(0.5)
        fail(f"[{end.name}] {why}: status never became one of {want}")
    if end.wait_event(lambda: any(s in want for s in end.statuses[-1:]), limit):
        return end.statuses[-1]
    fail(f"[{end.name}] {why}: no MIGRATION event in {want}; saw {end.statuses}")


def main():
    dpath, spath, uri, uri2 = sys.argv[1:5]
    # -------- the domains' start (qemuProcessLaunch -> qemuConnectMonitor) --------
    d = End("D", dpath)  # the destination, -incoming defer
    s = End("S", spath)
    print("ok: both greetings read, qmp_capabilities answered (qemuMonitorJSONSetCapabilities)")
    ver = s.command("virQEMUCapsInitQMPMonitor (the binary's probe)", "query-version")
    q = ver.get("qemu", {})
    if not all(uint(q.get(k)) for k in ("major", "minor", "micro")):
        fail(f"query-version: not qemu.{{major, minor, micro}} (qemuMonitorJSONGetVersion): {ver}")
    if (q["major"], q["minor"], q["micro"]) < LIBVIRT_MIN_QEMU:
        gap(f"query-version says {q['major']}.{q['minor']}.{q['micro']}: libvirt refuses a "
            f"QEMU older than {'.'.join(map(str, LIBVIRT_MIN_QEMU))} when it probes the "
            f"binary (this project's version, not QEMU's)")
    cmds = s.command("virQEMUCapsInitQMPMonitor (the binary's probe)", "query-commands")
    if not isinstance(cmds, list) or not all(isinstance(c.get("name"), str) for c in cmds):
        fail("query-commands: not [{name}]")
    have = {c["name"] for c in cmds}
    for c in ("getfd", "closefd", "migrate-continue", "query-block", "quit"):
        print(f"   query-commands: {c} {'listed' if c in have else 'absent'}")
    dcaps = capabilities_check(d)
    scaps = capabilities_check(s)
    query_status(d, "qemuProcessUpdateState (qemuMonitorGetStatus, as on a reconnect)", "inmigrate")
    query_status(s, "qemuProcessUpdateState (qemuMonitorGetStatus, as on a reconnect)", "running")

    # -------- Begin3 at the source (qemuMigrationSrcBeginPhase) --------
    if "query-block" not in have:
        gap("no query-block: qemuMigrationSrcBegin refreshes the disks with it "
            "(qemuProcessRefreshDisks) and fails without it; this VMM has no disks")
    else:
        blocks = s.command("qemuProcessRefreshDisks (qemuMonitorGetBlockInfo)", "query-block")
        check(blocks == [], f"[S] query-block: a list, empty (no disks): {blocks}")
    blockers = s.command("qemuMigrationSrcIsAllowed (qemuMonitorJSONGetMigrationBlockers)",
                         "query-migrate")
    check(isinstance(blockers, dict) and not blockers.get("blocked-reasons"),
          "[S] query-migrate before the migration: an object, no blocked-reasons")

    # -------- Prepare3 at the destination (qemuMigrationDstPrepareActive) --------
    dorig = params_fetch(d)
    dparams = {}
    if "tls-creds" in dorig:  # qemuMigrationParamsDisableTLS
        dparams.update({"tls-creds": "", "tls-hostname": ""})
    dparams["max-postcopy-bandwidth"] = 1 * MIB  # --postcopy-bandwidth 1 (both parties)
    # qemuMigrationParamsApply: postcopy-ram (VIR_MIGRATE_POSTCOPY) and
    # return-path (not tunnelled) on; late-block-activate would be too, were it listed
    d.empty("qemuMigrationParamsApply", "migrate-set-capabilities",
            capabilities=caps_json(dcaps, {"postcopy-ram", "return-path"}))
    d.empty("qemuMigrationParamsApply", "migrate-set-parameters", **dparams)
    d.empty("qemuMigrationDstRun (qemuMonitorMigrateIncoming)", "migrate-incoming", uri=uri)

    # -------- Perform3 at the source (qemuMigrationSrcRun) --------
    sorig = params_fetch(s)
    if "max-bandwidth" in sorig:
        # what qemuMigrationSrcRun sends without --bandwidth: probed, then the
        # transcript's own --bandwidth 8 is sent below
        r = s.execute("qemuMigrationSrcRun, libvirt's default (no --bandwidth)",
                      "migrate-set-parameters", **{"max-bandwidth": LIBVIRT_DEFAULT_MAX_BANDWIDTH})
        if "error" in r:
            gap(f"max-bandwidth {LIBVIRT_DEFAULT_MAX_BANDWIDTH} (libvirt's default, INT64_MAX "
                f"MiB/s in bytes, sent by every virsh migrate without --bandwidth) is refused")
    on = {"postcopy-ram", "return-path", "pause-before-switchover"}  # the last: always on at a source
    r = s.execute("qemuMigrationParamsApply", "migrate-set-capabilities",
                  capabilities=caps_json(scaps, on))
    pause_before_switchover = "error" not in r
    if not pause_before_switchover:
        gap("pause-before-switchover true is refused: libvirt turns it on at every source "
            "that lists it (qemuMigrationParamsAlwaysOn), so its migration fails here; the "
            "replay sends the list again with it false, as libvirt would to a QEMU without it")
        s.empty("qemuMigrationParamsApply (without pause-before-switchover)",
                "migrate-set-capabilities",
                capabilities=caps_json(scaps, on - {"pause-before-switchover"}))
    sparams = {}
    if "tls-creds" in sorig:
        sparams.update({"tls-creds": "", "tls-hostname": ""})
    sparams["max-bandwidth"] = 8 * MIB  # --bandwidth 8: priv->migMaxBandwidth * 1 MiB
    sparams["max-postcopy-bandwidth"] = 1 * MIB  # --postcopy-bandwidth 1
    s.empty("qemuMigrationParamsApply", "migrate-set-parameters", **sparams)
    if "getfd" not in have:
        gap("no getfd / fd: URI: for a plain tcp migration libvirt connects itself and "
            "hands QEMU the socket (qemuMigrationSrcConnect, qemuMonitorMigrateToFd: getfd "
            "'migrate' then migrate fd:migrate); the replay sends the tcp: URI libvirt sends "
            "when QEMU connects (qemuMonitorMigrateToHost: --parallel, rdma)")
    s.empty("qemuMigrationSrcStart (qemuMonitorJSONMigrate)", "migrate",
            detach=True, resume=False, uri=uri)
    # qemuMigrationSrcWaitForCompletion: events; virsh --postcopy-after-precopy
    # waits for the second MIGRATION_PASS (virsh's iteration callback) and
    # then calls virDomainMigrateStartPostCopy
    wait_status(s, {"active"}, 60, "precopy")
    migration_stats(s, "qemuMigrationAnyFetchStats (virsh domjobinfo, migrate --verbose)")
    if s.wait_event(lambda: bool(s.passes), 2):
        check(s.wait_event(lambda: 2 in s.passes, 120), "[S] MIGRATION_PASS 2 (virsh's cue)")
    else:
        gap("no MIGRATION_PASS: virsh migrate --postcopy-after-precopy starts postcopy on "
            "the second pass; the replay sends migrate-start-postcopy 2 s after 'active'")
    s.empty("qemuDomainMigrateStartPostCopy (qemuMonitorMigrateStartPostCopy)",
            "migrate-start-postcopy")
    st = wait_status(s, {"postcopy-active", "pre-switchover"}, 60, "switch-over")
    if st == "pre-switchover":  # pause-before-switchover: qemuMigrationSrcContinue
        s.empty("qemuMigrationSrcContinue", "migrate-continue", state="pre-switchover")
        wait_status(s, {"postcopy-active"}, 60, "switch-over")
    print(f"   [S] MIGRATION statuses so far: {s.statuses}")
    # qemuMigrationSrcRun: "QEMU will have paused the CPUs": waits for STOP
    if not s.wait_event(lambda: "STOP" in s.names, 3):
        gap("no STOP at the source's switch-over: qemuMigrationSrcRun waits for it "
            "before Perform returns (it would wait for ever)")
    migration_stats(s, "qemuMigrationAnyFetchStats (virsh domjobinfo)")

    # -------- Finish3 at the destination (qemuMigrationDstFinishFresh) --------
    wait_status(d, {"postcopy-active"}, 60, "qemuMigrationDstWaitForCompletion (postcopy)")
    check(d.wait_event(lambda: "RESUME" in d.names, 10),
          "[D] RESUME when its vCPUs start (qemuProcessHandleResume: running, post-copy)")
    d.empty("qemuProcessStartCPUs", "cont")
    query_status(d, "(not libvirt: the replay's own check)", "running")

    # -------- virsh domjobabort --postcopy (qemuDomainAbortJobPostcopy) --------
    s.empty("qemuDomainAbortJobPostcopy (qemuMonitorMigratePause)", "migrate-pause")
    wait_status(s, {"postcopy-paused"}, 60, "migrate-pause")
    wait_status(d, {"postcopy-paused"}, 60, "the destination sees the link broken")
    print("ok: both ends postcopy-paused: libvirt marks the job failed in post-copy "
          "(qemuMigrationSrcPostcopyFailed, qemuMigrationDstPostcopyFailed)")

    # -------- virsh migrate --postcopy-resume over a second address --------
    st = migration_stats(s, "qemuMigrationSrcBeginResume (qemuMigrationAnyRefreshStatus)")
    check(st["status"] == "postcopy-paused", "[S] BeginResume: postcopy-paused")
    st = migration_stats(d, "qemuMigrationDstPrepareResume (qemuMigrationAnyRefreshStatus)")
    check(st["status"] == "postcopy-paused", "[D] PrepareResume: postcopy-paused")
    d.empty("qemuMigrationDstPrepareResume (qemuMonitorMigrateRecover)", "migrate-recover",
            uri=uri2)
    # qemuMigrationSrcResume -> qemuMigrationParamsApply(POSTCOPY_RESUME): no
    # capabilities, only the parameters marked applyOnPostcopyResume
    r = s.execute("qemuMigrationSrcResume (qemuMigrationParamsApply)", "migrate-set-parameters",
                  **{"max-postcopy-bandwidth": 1 * MIB})
    if "error" in r:
        gap("max-postcopy-bandwidth refused while the migration is paused (libvirt's resume "
            "fails on it)")
    s.empty("qemuMigrationSrcStart (qemuMonitorJSONMigrate, QEMU_MONITOR_MIGRATE_RESUME)",
            "migrate", detach=True, resume=True, uri=uri2)
    wait_status(s, {"postcopy-active", "completed"}, 60, "resume")
    rec = [x for x in s.statuses if x.startswith("postcopy-recover")]
    check("postcopy-recover" in rec, f"[S] MIGRATION events of the resume: {rec}")

    # -------- Finish (resume) at the destination (qemuMigrationDstFinishResume) --------
    wait_status(d, {"completed"}, 240, "qemuMigrationDstWaitForCompletion")
    # qemuMigrationDstComplete -> qemuMigrationParamsReset: every capability
    # off, the parameters back to what query-migrate-parameters said
    try:
        d.empty("qemuMigrationParamsReset", "migrate-set-capabilities",
                capabilities=caps_json(dcaps, set()))
        r = d.execute("qemuMigrationParamsReset", "migrate-set-parameters", **dorig)
        if "error" in r:  # libvirt logs a failed reset and goes on
            bad = {k: v for k, v in dorig.items() if k in r["error"]["desc"]}
            gap(f"query-migrate-parameters at the destination says {bad}, which "
                f"migrate-set-parameters refuses: libvirt's qemuMigrationParamsReset writes "
                f"back what it read, so its reset fails (logged, not fatal)")
        query_status(d, "(not libvirt: the replay's own check)", "running")
    except QMPClosed:
        fail("[D] the destination VMM closed its socket after the migration")

    # -------- Confirm (resume) at the source (qemuMigrationSrcComplete) --------
    if not s.wait_event(lambda: "completed" in s.statuses, 120):
        fail(f"[S] never completed: {s.statuses}")
    try:
        st = migration_stats(s, "qemuMigrationSrcComplete (qemuMigrationAnyFetchStats)")
        check(st["status"] == "completed", "[S] query-migrate after the migration: completed")
        query_status(s, "(not libvirt: the replay's own check)")
        if "quit" in have:  # libvirt's qemuProcessStop ends QEMU itself (a signal)
            s.execute("qemuProcessStop (as quit)", "quit")
    except QMPClosed:
        gap("the source VMM exits by itself after completed (QEMU stays in postmigrate; "
            "qemuMigrationSrcComplete queries it, then qemuProcessStop ends it)")
    print(f"source MIGRATION events: {s.statuses}")
    print(f"destination MIGRATION events: {d.statuses}")
    print(f"{len(gaps)} gap(s):")
    for g in gaps:
        print(f"  - {g}")


if __name__ == "__main__":
    try:
        main()
    except QMPError as e:
        raise SystemExit(f"FAIL: {e}")
