#!/usr/bin/env python3
"""qmp-drive: drive the VMM's control API as any QMP client would.

Through the QMP client of qmp.py (beside it), written from QEMU's
documented QMP wire format, not from this project's code.

  qmp-drive.py SOCKET cancel  URI   capabilities and parameters attacked
                                    (QEMU's names, shape and errors), set
                                    and read back; migrate without
                                    postcopy-ram and with resume refused;
                                    migrate (QEMU's: precopy until told),
                                    cancel in precopy: the VM goes on
                                    (query-status); events off: none seen
  qmp-drive.py SOCKET migrate URI   two clients: one migrates (precopy,
                                    then migrate-start-postcopy), polls and
                                    collects events; the other only watches
                                    and then leaves; a cancel after the
                                    switch-over is refused
  qmp-drive.py SOCKET after-cancel URI  the VMM's own --migrate-after
                                    migration (manual postcopy): seen by
                                    query-migrate, a second migrate
                                    refused, cancelled: the VM goes on
  qmp-drive.py SOCKET after-postcopy    the same, ended by
                                    migrate-start-postcopy, to completed
  qmp-drive.py SOCKET postmigrate-quit  a completed source: postmigrate,
                                    then quit
  qmp-drive.py SOCKET figures URI METRICS  QEMU's query-migrate figures
                                    (a rate during precopy, the pages and
                                    byte splits against the source's
                                    metrics, downtime only from the
                                    switch-over), MIGRATION_PASS, STOP,
                                    finish-migrate/postmigrate, quit
  qmp-drive.py DSOCK incoming URI SSOCK  the destination as a QMP object
                                    (vmm run --incoming defer): inmigrate,
                                    stop/cont/migrate refused, bad
                                    migrate-incoming refused, then
                                    migrate-incoming URI; the source
                                    (SSOCK) migrates there; the VM runs
                                    there: RESUME, stop and cont work
  qmp-drive.py BSOCK onward URI CSOCK ASOCK URI2  A VM migrated A -> B
                                    migrates on B -> C once every page
                                    arrived at B (refused before)
  qmp-drive.py DSOCK recover URI SSOCK URI2 URI3 DEAD  recovery by command, as
                                    libvirt drives QEMU's: postcopy paused
                                    at the source (migrate-pause), a resume
                                    to DEAD fails back to paused, and one
                                    to an impostor that cannot prove the
                                    session's secret too, then
                                    migrate-recover URI2 at the destination
                                    and migrate resume: true to it; paused
                                    again at the destination, recovered
                                    over URI3; completed
  qmp-drive.py DSOCK tls URI SSOCK CREDS  TLS as libvirt sets it up: object-add
                                    tls-creds-x509 (CREDS, QEMU's file names)
                                    at both ends, tls-creds by id, migrate;
                                    bad objects and a server endpoint at
                                    the source refused; object-del
  qmp-drive.py SSOCK lost URI DPID  postcopy to URI fails for good (the
                                    VMM under pid DPID killed, x-recover-ms
                                    500): the source stays, failed, the VM
                                    not running, cont and migrate refused;
                                    quit

Prints what it saw; exits 0 when every check held, 1 with the reason.
"""
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

from migwire import (AUTH, AUTH_CHALLENGE, AUTH_PROOF, HELLO, HELLO_FMT, ROLE_DEST, frame,
                     recv_frame)
from qmp import QMP, QMPError


def wait_status(q, want, limit=480):
    end = time.time() + limit
    while time.time() < end:
        st = q.command("query-migrate")
        if st.get("status") in want:
            return st
        time.sleep(0.2)
    raise SystemExit(f"FAIL: status never became one of {want}: {st}")


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def refused(q, cmd, want, what, **args):
    """cmd is a GenericError whose desc holds want; the connection stays."""
    err = q.execute(cmd, **args).get("error", {})
    check(err.get("class") == "GenericError" and want in err.get("desc", ""),
          f"{what}: GenericError ({err.get('desc')})")


def cap(name, state):
    return {"capability": name, "state": state}


QEMU_CAPS = {"postcopy-ram", "postcopy-preempt", "return-path", "events", "multifd",
             "postcopy-blocktime", "pause-before-switchover", "zero-copy-send"}


def caps_of(q):
    return {c["capability"]: c["state"] for c in q.command("query-migrate-capabilities")}


def capabilities_case(q):
    """QEMU's capability names and shape; bad ones refused, nothing half set."""
    caps = caps_of(q)
    check(set(caps) == QEMU_CAPS and not any(caps.values()),
          f"query-migrate-capabilities: QEMU's names, all off at start: {caps}")
    refused(q, "migrate-set-capabilities", "does not accept value 'no-such-cap'",
            "an unknown capability", capabilities=[cap("no-such-cap", True)])
    refused(q, "migrate-set-capabilities", "copies", "zero-copy-send true",
            capabilities=[cap("events", True), cap("zero-copy-send", True)])
    refused(q, "migrate-set-capabilities", "requires postcopy-ram",
            "postcopy-preempt without postcopy-ram", capabilities=[cap("postcopy-preempt", True)])
    refused(q, "migrate-set-capabilities", "capabilities", "a capability without a state",
            capabilities=[{"capability": "events"}])
    refused(q, "migrate-set-capabilities", "capabilities", "not a list", capabilities="events")
    check(not any(caps_of(q).values()), "a refused list set nothing (events still off)")
    refused(q, "migrate", "postcopy-ram", "migrate without postcopy-ram", uri="tcp:127.0.0.1:1")
    q.command("migrate-set-capabilities", capabilities=[cap("zero-copy-send", False)])
    q.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("postcopy-preempt", True),
                            cap("return-path", True), cap("events", True),
                            cap("postcopy-blocktime", True)])
    caps = caps_of(q)
    check(all(caps[c] for c in ("postcopy-ram", "postcopy-preempt", "return-path", "events",
                                "postcopy-blocktime")) and not caps["multifd"],
          f"capabilities set and read back: {caps}")
    refused(q, "migrate", "no paused migration", "migrate resume: true with nothing paused",
            uri="tcp:127.0.0.1:1", resume=True)
    refused(q, "migrate", "any address", "migrate to tcp::PORT", uri="tcp::4444")
    refused(q, "migrate", "bad address", "migrate to tcp:HOST (no port)", uri="tcp:127.0.0.1")
    refused(q, "migrate", "bad address", "migrate to an unbracketed IPv6", uri="tcp:::1:4444")
    refused(q, "migrate", "needs a path", "migrate to unix:", uri="unix:")
    refused(q, "migrate", "expects a boolean", "migrate detach: 1", uri="tcp:127.0.0.1:1", detach=1)
    refused(q, "migrate", "unexpected", "migrate blk (not taken)", uri="tcp:127.0.0.1:1", blk=True)


def parameters_case(q):
    """QEMU's downtime-limit and max-postcopy-bandwidth: taken, checked, read back."""
    params = q.command("query-migrate-parameters")
    check(params["downtime-limit"] == 300 and params["max-postcopy-bandwidth"] == 0
          and params["x-postcopy-manual"] is True,
          "QEMU's defaults: downtime-limit 300 ms, max-postcopy-bandwidth 0, precopy until told")
    refused(q, "migrate-set-parameters", "downtime-limit", "downtime-limit over 2000000",
            **{"downtime-limit": 2000001})
    refused(q, "migrate-set-parameters", "max-postcopy-bandwidth", "max-postcopy-bandwidth -1",
            **{"max-postcopy-bandwidth": -1})
    q.command("migrate-set-parameters", **{"downtime-limit": 1, "max-postcopy-bandwidth": 1 << 30})
    params = q.command("query-migrate-parameters")
    check(params["downtime-limit"] == 1 and params["max-postcopy-bandwidth"] == 1 << 30,
          "downtime-limit and max-postcopy-bandwidth read back")
    q.command("migrate-set-parameters", **{"max-postcopy-bandwidth": 0})


def cancel_case(path, uri):
    q = QMP(path)
    err = q.execute("no-such-command")
    check(err.get("error", {}).get("class") == "CommandNotFound", "an unknown command: CommandNotFound")
    err = q.execute("migrate-set-parameters", **{"max-bandwidth": -1})
    check("error" in err, "max-bandwidth -1: refused")
    check(q.command("query-migrate") == {}, "query-migrate before any migration: {}")
    capabilities_case(q)
    parameters_case(q)
    # events off (QEMU's default): this migration must send no MIGRATION event
    q.command("migrate-set-capabilities", capabilities=[cap("events", False)])
    q.command("migrate-set-parameters", **{"x-precopy-rounds": 1, "max-bandwidth": 8 << 20})
    params = q.command("query-migrate-parameters")
    check(params["max-bandwidth"] == 8 << 20 and params["x-postcopy-manual"], "parameters read back")
    q.command("migrate", uri=uri, detach=True, resume=False)  # as libvirt sends it
    busy = q.execute("migrate", uri=uri)
    check("error" in busy, "a second migrate while one runs: refused")
    refused(q, "migrate-set-capabilities", "in progress", "capabilities during a migration",
            capabilities=[cap("multifd", True)])
    wait_status(q, ["active"])
    st = q.command("query-migrate")
    check(st["ram"]["total"] > 0 and st["ram"]["transferred"] > 0, f"precopy progress: {st['ram']['transferred']} bytes sent")
    q.command("migrate_cancel")
    st = wait_status(q, ["cancelled"])
    check(st["status"] == "cancelled", "cancelled in precopy")
    check(q.command("query-status")["running"], "the VM runs on at the source")
    time.sleep(0.5)
    q.command("query-status")  # collect late events
    check(q.statuses() == [], f"no MIGRATION event without the events capability: {q.statuses()}")


def migrate_case(path, uri):
    watcher = QMP(path)
    q = QMP(path)
    q.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True),
                            cap("pause-before-switchover", True)])
    q.command("migrate-set-parameters", **{"x-precopy-rounds": 1})
    q.command("migrate", uri=uri)
    wait_status(q, ["active"])
    refused(q, "migrate-continue", "not in expected state", "migrate-continue in precopy",
            state="pre-switchover")
    time.sleep(0.5)
    q.command("migrate-start-postcopy")
    wait_status(q, ["pre-switchover"])
    st = q.command("query-status")
    check(st["status"] == "finish-migrate" and not st["running"],
          f"pause-before-switchover: pre-switchover, the VM paused: {st}")
    refused(q, "migrate-continue", "not in expected state", "migrate-continue naming another state",
            state="active")
    q.command("migrate-continue", state="pre-switchover")
    st = wait_status(q, ["postcopy-active", "completed"])
    print(f"switched over: {st['status']}")
    late = q.execute("migrate_cancel")
    check("error" in late and "split" in late["error"]["desc"],
          "migrate_cancel after the switch-over: refused with the reason")
    watcher.sock.close()  # a client leaving changes nothing
    wait_events(q, lambda: "completed" in q.statuses())
    check("completed" in q.statuses(), f"MIGRATION events: {q.statuses()}")
    postmigrate_then_quit(q)
    check(q.statuses()[0] in ("setup", "active"), "events start at setup or active")
    check("pre-switchover" in q.statuses(), f"a pre-switchover event: {q.statuses()}")


def wait_events(q, done, limit=480):
    """Read events until done() (the source stays after completed, as QEMU's)."""
    q.sock.settimeout(limit)
    while not done():
        msg = q.read()
        if "event" in msg:
            q.events.append(msg)


def postmigrate_then_quit(q):
    """A completed source stays (QEMU's postmigrate) and ends on quit."""
    st = q.command("query-status")
    check(st["status"] == "postmigrate" and not st["running"],
          f"after completed: query-status postmigrate, not running: {st}")
    check(q.command("query-migrate")["status"] == "completed",
          "the source still answers query-migrate after completed")
    check(q.execute("quit") == {"return": {}, "id": q.next_id}, "quit answered")


def after_cancel(path, uri):
    q = QMP(path)
    st = wait_status(q, ["active"])
    check(st["ram"]["total"] > 0, "query-migrate shows the --migrate-after migration, active")
    busy = q.execute("migrate", uri=uri)
    check(busy.get("error", {}).get("class") == "GenericError" and "in progress" in busy["error"]["desc"],
          f"a second migrate: GenericError ({busy.get('error', {}).get('desc')})")
    q.command("migrate_cancel")
    wait_status(q, ["cancelled"])
    check(q.command("query-status")["running"], "migrate_cancel cancelled it: the VM runs on here")
    check("cancelled" in q.statuses() or q.command("query-migrate")["status"] == "cancelled",
          f"MIGRATION events: {q.statuses()}")


def after_postcopy(path, _uri):
    q = QMP(path)
    wait_status(q, ["active"])
    q.command("migrate-start-postcopy")
    st = wait_status(q, ["postcopy-active", "completed"])
    check(True, f"migrate-start-postcopy ended the --migrate-after precopy: {st['status']}")
    wait_events(q, lambda: "completed" in q.statuses())
    check("completed" in q.statuses(), f"MIGRATION events: {q.statuses()}")
    postmigrate_then_quit(q)


def postmigrate_quit(path, _uri):
    postmigrate_then_quit(QMP(path))


def wait_run_state(q, want, limit=480):
    end = time.time() + limit
    while time.time() < end:
        st = q.command("query-status")
        if st["status"] == want:
            return st
        time.sleep(0.2)
    raise SystemExit(f"FAIL: query-status never said {want}: {st}")


def incoming_case(path, uri):
    d = QMP(path)
    st = d.command("query-status")
    check(st["status"] == "inmigrate" and not st["running"],
          f"--incoming defer: query-status inmigrate, not running: {st}")
    # QEMU's cont at an inmigrate destination succeeds (autostart): the VM
    # runs once its state arrives, which this destination does anyway.
    check(d.execute("cont").get("return") == {} and
          d.command("query-status")["status"] == "inmigrate",
          "cont before the state arrived: accepted, still inmigrate (QEMU's autostart)")
    refused(d, "stop", "inmigrate", "stop before the state arrived")
    refused(d, "migrate", "has not completed", "migrate at a destination before its pages arrived", uri="tcp:127.0.0.1:1")
    refused(d, "migrate-incoming", "bad address",
            "migrate-incoming to a bad URI", uri="tcp:127.0.0.1")
    refused(d, "migrate-incoming", "missing", "migrate-incoming without a uri")
    # QEMU counts blocked vCPU time where the capability is set: the destination.
    d.command("migrate-set-capabilities", capabilities=[cap("postcopy-blocktime", True)])
    check(caps_of(d)["postcopy-blocktime"], "postcopy-blocktime set at the destination")
    d.command("migrate-incoming", uri=uri)
    refused(d, "migrate-incoming", "already been started", "a second migrate-incoming", uri=uri)
    s = QMP(sys.argv[4])
    s.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    s.command("migrate-set-parameters", **{"x-postcopy-manual": False, "x-precopy-rounds": 0})
    s.command("migrate", uri=uri)
    wait_run_state(d, "running")
    check(True, "the VM runs at the destination: query-status running")
    d.command("stop")
    st = d.command("query-status")
    check(st["status"] == "paused" and not st["running"], f"stop at the destination: {st}")
    # Stopped, the guest cannot finish and end the VMM before it is asked.
    blocktime_figures(wait_status(d, ["completed"]), 2)  # vmm-qmp-incoming: --vcpus 2
    d.command("cont")
    st = d.command("query-status")
    check(st["status"] == "running" and st["running"], f"cont at the destination: {st}")
    events = [e["event"] for e in d.events]
    check(events[:1] == ["RESUME"] and "STOP" in events and events[-1] == "RESUME",
          f"the destination's events: RESUME when its vCPUs start, then STOP, RESUME: {events}")
    wait_status(s, ["completed"])
    postmigrate_then_quit(s)


def blocktime_figures(st, vcpus):
    """QEMU's, at a completed destination: ms all vCPUs were blocked at once, and
    each vCPU's, which holds that time (all blocked means each is)."""
    total, per = st.get("postcopy-blocktime"), st.get("postcopy-vcpu-blocktime")
    check(isinstance(total, int) and total >= 0 and isinstance(per, list) and len(per) == vcpus
          and all(isinstance(v, int) and v >= total for v in per),
          f"postcopy-blocktime {total} ms, postcopy-vcpu-blocktime {per} ms ({vcpus} vCPUs)")


def incoming_plain_case(path, uri):
    """Without postcopy-blocktime at the destination: no blocktime figures (QEMU's)."""
    d = QMP(path)
    check(not caps_of(d)["postcopy-blocktime"], "postcopy-blocktime off by default")
    d.command("migrate-incoming", uri=uri)
    s = QMP(sys.argv[4])
    s.command("migrate-set-capabilities", capabilities=[cap("postcopy-ram", True)])
    s.command("migrate-set-parameters", **{"x-postcopy-manual": False, "x-precopy-rounds": 0})
    s.command("migrate", uri=uri)
    wait_run_state(d, "running")
    d.command("stop")  # the guest cannot finish and end the VMM before it is asked
    st = wait_status(d, ["completed"])
    check("postcopy-blocktime" not in st and "postcopy-vcpu-blocktime" not in st,
          f"without the capability, no blocktime figures: {st}")
    d.command("cont")
    wait_status(s, ["completed"])
    postmigrate_then_quit(s)


def precopy_figures(q):
    """In precopy: QEMU's members and a recent rate, no downtime yet."""
    # The rate is sampled over windows of a second or more: wait for the
    # first sample (on progress, not a fixed sleep: a busy machine is late).
    end = time.time() + 240
    while True:
        st = q.command("query-migrate")
        ram = st["ram"]
        if ram["pages-per-second"] > 0 or time.time() > end:
            break
        time.sleep(0.2)
    cap_mbps = (8 << 20) * 8 / 1e6  # max-bandwidth in QEMU's unit
    check(st["status"] == "active" and 0 < ram["mbps"] <= 1.25 * cap_mbps
          and ram["pages-per-second"] > 0,
          f"mbps {ram['mbps']:.1f} (max-bandwidth: {cap_mbps:.1f}), pages-per-second "
          f"{ram['pages-per-second']} during the push")
    check(ram["remaining"] <= ram["total"]
          and (ram["dirty-sync-count"] > 0 or ram["remaining"] < ram["total"]),
          f"remaining {ram['remaining']} of {ram['total']} in pass "
          f"{ram['dirty-sync-count'] + 1}: what the pass has yet to send")
    check("downtime" not in st and "expected-downtime" not in st,
          f"no downtime before the switch-over ({st['status']})")
    check(isinstance(st.get("setup-time"), int) and st["setup-time"] < st["total-time"],
          f"setup-time {st.get('setup-time')} ms of total-time {st['total-time']} ms")
    check(ram["precopy-bytes"] == ram["transferred"] and ram["downtime-bytes"] == 0
          and ram["postcopy-bytes"] == 0, f"in precopy every byte is precopy's: {ram}")
    check(q.command("query-status")["status"] == "running", "query-status running in precopy")


def completed_figures(q, metrics):
    """Once completed: QEMU's page and byte figures agree with the source's own counts."""
    with open(metrics) as f:
        m = json.load(f)
    st = q.command("query-migrate")
    ram = st["ram"]
    sent = (m["pages_precopy"] + m["pages_precopy_resent"] + m["pages_pushed"]
            + m["pages_demand"] + m["pages_resent_after_recovery"])
    check(ram["normal"] + ram["duplicate"] == sent and ram["duplicate"] == m["pages_zero"],
          f"normal {ram['normal']} + duplicate {ram['duplicate']} = {sent} pages sent")
    check(ram["normal"] > 0 and ram["duplicate"] > 0 and ram["remaining"] == 0,
          "both kinds were sent, nothing remains")
    check(ram["normal-bytes"] == ram["normal"] * 4096, "normal-bytes = normal * 4096")
    check(ram["precopy-bytes"] + ram["downtime-bytes"] + ram["postcopy-bytes"]
          == ram["transferred"] and ram["downtime-bytes"] > 0 and ram["postcopy-bytes"] > 0,
          f"byte splits add up to transferred {ram['transferred']}: {ram['precopy-bytes']} "
          f"+ {ram['downtime-bytes']} + {ram['postcopy-bytes']}")
    check(st["status"] == "completed" and isinstance(st.get("downtime"), int)
          and st["downtime"] == st["x-downtime-us"] // 1000,
          f"downtime {st.get('downtime')} ms once completed")
    check(ram["mbps"] > 0 and ram["pages-per-second"] > 0,
          f"completed: mbps {ram['mbps']:.1f}, pages-per-second {ram['pages-per-second']}"
          " (averages over the transfer)")


def figures_case(path, uri, metrics):
    """QEMU's figures, MIGRATION_PASS, STOP and the source's run states."""
    q = QMP(path)
    q.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    # Slow enough that precopy's passes and postcopy's push can be watched.
    q.command("migrate-set-parameters", **{"max-bandwidth": 8 << 20, "x-metrics-file": metrics,
                                           "max-postcopy-bandwidth": 1 << 20,
                                           "x-precopy-rounds": 1})
    q.command("migrate", uri=uri)
    wait_status(q, ["active"])
    precopy_figures(q)
    passes = lambda: [e["data"]["pass"] for e in q.events if e["event"] == "MIGRATION_PASS"]
    q.sock.settimeout(240)
    while len(passes()) < 2:  # precopy goes on, pass after pass, until told
        q.command("query-migrate")
        time.sleep(0.2)
    q.command("migrate-start-postcopy")
    seen = []
    while q.command("query-migrate")["status"] != "completed":
        state = q.command("query-status")["status"]
        if not seen or seen[-1] != state:
            seen.append(state)
        time.sleep(0.05)
    after = seen[next((i for i, x in enumerate(seen) if x != "running"), len(seen)):]
    check(set(seen) <= {"running", "finish-migrate", "postmigrate"}
          and "running" not in after, f"run states from migrate-start-postcopy on: {seen}")
    wait_events(q, lambda: "completed" in q.statuses())
    p = passes()
    check(p[:2] == [1, 2] and p == sorted(set(p)), f"MIGRATION_PASS {p}: 1, 2, ... increasing")
    seq = [e["event"] if e["event"] != "MIGRATION" else e["data"]["status"] for e in q.events]
    check(seq.count("STOP") == 1 and seq.index("device") < seq.index("STOP")
          < seq.index("postcopy-active"), f"STOP at the switch-over's pause: {seq}")
    completed_figures(q, metrics)
    refused(q, "cont", "postmigrate", "cont after a postcopy migration")
    refused(q, "migrate", "migrated away", "migrate again after completed", uri=uri)
    postmigrate_then_quit(q)


def wait_statuses_end(q, want, limit=480):
    """Read until the MIGRATION statuses seen end with want (a list)."""
    end = time.time() + limit
    while time.time() < end:
        if q.statuses()[-len(want):] == want:
            return
        q.command("query-status")  # collects the events that came meanwhile
        time.sleep(0.2)
    raise SystemExit(f"FAIL: MIGRATION events never ended with {want}: {q.statuses()}")


class Impostor:
    """A listener at a resume address that is not the destination: it
    answers the source's reconnections as a destination would (HELLO, a
    CHALLENGE), cannot prove the session's secret, and then offers to go
    on.  It counts the handshakes that reached its proof and every byte a
    source sent after it (there must be none: the source closes)."""

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.uri = f"tcp:127.0.0.1:{self.lsock.getsockname()[1]}"
        self.proofs = self.after = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            c, _ = self.lsock.accept()
            c.settimeout(30)
            try:
                self.answer(c)
            except (OSError, struct.error):
                pass
            c.close()

    def answer(self, c):
        kind, hello = recv_frame(c)
        f = list(struct.unpack(HELLO_FMT, hello))
        f[1] = ROLE_DEST
        c.sendall(frame(HELLO, struct.pack(HELLO_FMT, *f)))
        c.sendall(frame(AUTH, struct.pack("<II", AUTH_CHALLENGE, 0) + os.urandom(32)))
        recv_frame(c)  # the source's PROOF for our nonce
        recv_frame(c)  # its CHALLENGE, which we cannot answer
        c.sendall(frame(AUTH, struct.pack("<II", AUTH_PROOF, 0) + os.urandom(32)))
        self.proofs += 1
        # RESUME: "I have no page": a source that believed it would send them all
        resume = struct.pack("<QII", 0, 0, 0)
        c.sendall(frame(8, resume))
        while True:
            b = c.recv(65536)
            if not b:
                return
            self.after += len(b)


def pause_and_recover(d, s, pause_at, uri, what):
    """migrate-pause at pause_at, both ends paused, then recovered over uri."""
    pause_at.command("migrate-pause")
    wait_status(s, ["postcopy-paused"])
    wait_status(d, ["postcopy-paused"])
    check(True, f"{what}: migrate-pause: both ends postcopy-paused")
    refused(s, "migrate-pause", "only supported during postcopy-active",
            f"{what}: migrate-pause while paused")
    d.command("migrate-recover", uri=uri)
    check(d.command("query-migrate")["status"] == "postcopy-recover-setup",
          f"{what}: migrate-recover: the destination is postcopy-recover-setup")
    s.command("migrate", uri=uri, resume=True)
    st = wait_status(s, ["postcopy-active", "completed"])
    check(True, f"{what}: migrate resume: true over {uri}: {st['status']}")


def recover_case(dpath, uri):
    uri2, uri3, dead = sys.argv[5:8]
    d = QMP(dpath)
    d.command("migrate-incoming", uri=uri)
    s = QMP(sys.argv[4])
    s.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    # slow enough a push that postcopy lasts through both recoveries
    s.command("migrate-set-parameters", **{"x-postcopy-manual": False, "x-precopy-rounds": 0,
                                           "max-postcopy-bandwidth": 1 << 20})
    s.command("migrate", uri=uri)
    wait_status(s, ["postcopy-active"])
    refused(d, "migrate-recover", "only be run when postcopy is paused",
            "migrate-recover while postcopy is active", uri=uri2)
    refused(s, "migrate", "no paused migration", "migrate resume while postcopy is active",
            uri=uri2, resume=True)
    s.command("migrate-pause")
    wait_status(s, ["postcopy-paused"])
    wait_status(d, ["postcopy-paused"])
    check(True, "migrate-pause at the source: both ends postcopy-paused")
    s.command("migrate", uri=dead, resume=True)
    # at once (the resume may not be taken yet), then once it connects: the
    # library keeps re-dialling a refused address for connect_ms (10 s)
    refused(s, "migrate", "already connecting", "a second resume at once",
            uri=dead, resume=True)
    wait_status(s, ["postcopy-recover-setup"])
    refused(s, "migrate", "already connecting", "a second resume while one connects",
            uri=dead, resume=True)
    wait_statuses_end(s, ["postcopy-recover-setup", "postcopy-paused"])
    check(True, f"a resume to {dead}, where nothing listens: back to postcopy-paused")
    imp = Impostor()
    paused = s.statuses().count("postcopy-paused")
    s.command("migrate", uri=imp.uri, resume=True)
    wait_events(s, lambda: s.statuses().count("postcopy-paused") > paused)
    check(imp.proofs >= 1 and imp.after == 0,
          f"a resume to an impostor at {imp.uri}: {imp.proofs} handshakes refused at its "
          f"proof, {imp.after} bytes sent after it; back to postcopy-paused")
    d.command("migrate-recover", uri=uri2)
    check(d.command("query-migrate")["status"] == "postcopy-recover-setup",
          "migrate-recover: the destination is postcopy-recover-setup")
    s.command("migrate", uri=uri2, resume=True)
    wait_status(s, ["postcopy-active", "completed"])
    check(True, f"migrate resume: true over {uri2}: recovered")
    pause_and_recover(d, s, d, uri3, "paused at the destination")
    wait_events(s, lambda: "completed" in s.statuses())
    seq = [x for x in s.statuses() if x.startswith("postcopy-recover")]
    check(seq.count("postcopy-recover") >= 2 and seq.count("postcopy-recover-setup") >= 3,
          f"MIGRATION events: {s.statuses()}")
    check(True, "completed after two recoveries by command")
    postmigrate_then_quit(s)


def kill_children(pid):
    """SIGKILL the children of pid (the VMM under its `timeout`)."""
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        if d.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            os.kill(int(d), signal.SIGKILL)


def lost_case(spath, uri):
    """Postcopy fails for good (the destination killed, x-recover-ms): the source stays."""
    dpid = int(sys.argv[4])
    s = QMP(spath)
    s.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    s.command("migrate-set-parameters", **{"x-postcopy-manual": False, "x-precopy-rounds": 0,
                                           "max-postcopy-bandwidth": 1 << 20,
                                           "x-recover-ms": 500})
    s.command("migrate", uri=uri)
    wait_status(s, ["postcopy-active"])
    kill_children(dpid)
    st = wait_status(s, ["failed", "completed"])
    check(st["status"] == "failed" and "giving up" in st.get("error-desc", ""),
          f"the destination killed in postcopy: failed ({st.get('error-desc')})")
    st = s.command("query-status")
    check(st["status"] == "finish-migrate" and not st["running"],
          f"the VM does not run at the source: {st}")
    refused(s, "cont", "memory is split", "cont after a failure past the switch-over")
    refused(s, "migrate", "was lost", "migrate after a failure past the switch-over",
            uri=uri)
    wait_events(s, lambda: "failed" in s.statuses())
    check(s.statuses()[-1] == "failed", f"MIGRATION events: {s.statuses()}")
    check(s.execute("quit") == {"return": {}, "id": s.next_id}, "quit answered")


def x509(oid, creds, endpoint, **more):
    return {"qom-type": "tls-creds-x509", "id": oid, "dir": creds, "endpoint": endpoint,
            **more}


def tls_objects_refused(d, creds):
    """object-add's bad arguments at a destination, each refused, nothing made."""
    refused(d, "object-add", "invalid object type", "object-add of another type",
            **{"qom-type": "memory-backend-ram", "id": "m0"})
    refused(d, "object-add", "'dir' is missing", "tls-creds-x509 without dir",
            **{"qom-type": "tls-creds-x509", "id": "t0"})
    refused(d, "object-add", "Unable to access credentials", "tls-creds-x509 of an empty dir",
            **x509("t0", "/nonexistent", "server"))
    refused(d, "object-add", "always verifies", "verify-peer false",
            **x509("t0", creds, "server", **{"verify-peer": False}))
    refused(d, "object-add", "does not accept value 'both'", "endpoint both",
            **x509("t0", creds, "both"))
    refused(d, "object-add", "not found", "an unknown property",
            **x509("t0", creds, "server", colour="red"))
    refused(d, "migrate-set-parameters", "No TLS credentials with id 't0'",
            "tls-creds naming no object", **{"tls-creds": "t0"})


def tls_case(dpath, uri):
    """TLS set up as libvirt does (object-add, tls-creds by id) at both ends."""
    spath, creds = sys.argv[4:6]
    oid = "objlibvirt_migrate_tls0"
    d, s = QMP(dpath), QMP(spath)
    tls_objects_refused(d, creds)
    d.command("object-add", **x509(oid, creds, "server", **{"verify-peer": True}))
    refused(d, "object-add", "already exists", "a second object of that id",
            **x509(oid, creds, "server"))
    # this VMM's own form: a directory, also one named without a '/' (vmm run
    # --tls-creds creds); "tests" is one where the VMM runs, the tree's root
    d.command("migrate-set-parameters", **{"tls-creds": "tests"})
    check(d.command("query-migrate-parameters")["tls-creds"] == "tests",
          "tls-creds naming a directory without a '/' is taken")
    d.command("migrate-set-parameters", **{"tls-creds": oid, "tls-hostname": ""})
    check(d.command("query-migrate-parameters")["tls-creds"] == oid, "tls-creds reads back its id")
    refused(d, "object-del", "in use", "object-del of the object tls-creds names", id=oid)
    s.command("object-add", **x509(oid, creds, "server"))
    s.command("migrate-set-parameters", **{"tls-creds": oid, "tls-hostname": "127.0.0.1"})
    s.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    s.command("migrate-set-parameters", **{"x-postcopy-manual": False, "x-precopy-rounds": 0})
    refused(s, "migrate", "for a client endpoint", "a source with server credentials", uri=uri)
    s.command("migrate-set-parameters", **{"tls-creds": "", "tls-hostname": ""})
    s.command("object-del", id=oid)
    s.command("object-add", **x509(oid, creds, "client"))
    s.command("migrate-set-parameters", **{"tls-creds": oid, "tls-hostname": "127.0.0.1"})
    d.command("migrate-incoming", uri=uri)
    s.command("migrate", uri=uri)
    wait_status(s, ["completed"])
    wait_run_state(d, "running")
    check(True, "migrated over TLS set up by object-add at both ends")
    s.command("migrate-set-parameters", **{"tls-creds": "", "tls-hostname": ""})
    s.command("object-del", id=oid)  # libvirt's clean-up
    refused(s, "object-del", "not found", "object-del of a deleted object", id=oid)
    postmigrate_then_quit(s)


def onward_case(bpath, uri):
    """A -> B -> C: B, a VM that arrived by migration, migrates on to C."""
    cpath, apath, uri2 = sys.argv[4:7]
    b, c, a = QMP(bpath), QMP(cpath), QMP(apath)
    b.command("migrate-incoming", uri=uri)
    c.command("migrate-incoming", uri=uri2)
    a.command("migrate-set-capabilities", capabilities=[cap("postcopy-ram", True)])
    a.command("migrate-set-parameters", **{"x-postcopy-manual": False})
    refused(b, "migrate", "has not completed", "B migrates on before its pages arrived",
            uri=uri2)
    a.command("migrate", uri=uri)
    wait_status(b, ["completed"])
    check(True, "A -> B: completed at B")
    b.command("migrate-set-capabilities",
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    b.command("migrate-set-parameters", **{"x-postcopy-manual": False})
    b.command("migrate", uri=uri2)
    wait_events(b, lambda: "completed" in b.statuses())
    check(True, f"B -> C: B's MIGRATION events {b.statuses()}")
    wait_run_state(c, "running")
    check(True, "the VM runs at C")
    wait_status(a, ["completed"])
    for q in (a, b):  # sources that wait in postmigrate end as QEMU's do
        postmigrate_then_quit(q)


def main():
    path, case = sys.argv[1:3]
    uri = sys.argv[3] if len(sys.argv) > 3 else ""
    try:
        if case == "figures":
            return figures_case(path, uri, sys.argv[4])
        {"cancel": cancel_case, "migrate": migrate_case, "after-cancel": after_cancel,
         "after-postcopy": after_postcopy, "incoming": incoming_case,
         "incoming-plain": incoming_plain_case,
         "recover": recover_case, "onward": onward_case, "lost": lost_case,
         "tls": tls_case, "postmigrate-quit": postmigrate_quit}[case](path, uri)
    except QMPError as e:
        raise SystemExit(f"FAIL: {e}")


if __name__ == "__main__":
    main()
