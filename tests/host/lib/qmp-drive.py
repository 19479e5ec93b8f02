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
                                    to DEAD fails back to paused, then
                                    migrate-recover URI2 at the destination
                                    and migrate resume: true to it; paused
                                    again at the destination, recovered
                                    over URI3; completed

Prints what it saw; exits 0 when every check held, 1 with the reason.
"""
import sys
import time

from qmp import QMP, QMPError


def wait_status(q, want, limit=240):
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
    refused(q, "migrate-set-capabilities", "migrate-continue", "pause-before-switchover true",
            capabilities=[cap("pause-before-switchover", True)])
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
              capabilities=[cap("postcopy-ram", True), cap("events", True)])
    q.command("migrate-set-parameters", **{"x-precopy-rounds": 1})
    q.command("migrate", uri=uri)
    wait_status(q, ["active"])
    time.sleep(0.5)
    q.command("migrate-start-postcopy")
    st = wait_status(q, ["postcopy-active", "completed"])
    print(f"switched over: {st['status']}")
    refused = q.execute("migrate_cancel")
    check("error" in refused and "split" in refused["error"]["desc"],
          "migrate_cancel after the switch-over: refused with the reason")
    watcher.sock.close()  # a client leaving changes nothing
    try:
        while "completed" not in q.statuses():
            msg = q.read()
            if "event" in msg:
                q.events.append(msg)
    except EOFError:
        pass  # the source VMM exits once the VM runs at the destination
    check("completed" in q.statuses(), f"MIGRATION events: {q.statuses()}")
    check(q.statuses()[0] in ("setup", "active"), "events start at setup or active")


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
    try:
        while "completed" not in q.statuses():
            msg = q.read()
            if "event" in msg:
                q.events.append(msg)
    except EOFError:
        pass  # the source VMM exits once the VM runs at the destination
    check("completed" in q.statuses(), f"MIGRATION events: {q.statuses()}")


def wait_run_state(q, want, limit=240):
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
    refused(d, "cont", "inmigrate", "cont before the state arrived")
    refused(d, "stop", "inmigrate", "stop before the state arrived")
    refused(d, "migrate", "has not completed", "migrate at a destination before its pages arrived", uri="tcp:127.0.0.1:1")
    refused(d, "migrate-incoming", "bad address",
            "migrate-incoming to a bad URI", uri="tcp:127.0.0.1")
    refused(d, "migrate-incoming", "missing", "migrate-incoming without a uri")
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
    d.command("cont")
    st = d.command("query-status")
    check(st["status"] == "running" and st["running"], f"cont at the destination: {st}")
    events = [e["event"] for e in d.events]
    check(events[:1] == ["RESUME"] and "STOP" in events and events[-1] == "RESUME",
          f"the destination's events: RESUME when its vCPUs start, then STOP, RESUME: {events}")


def wait_events(q, want, limit=240):
    """Read until the MIGRATION statuses seen end with want (a list)."""
    end = time.time() + limit
    while time.time() < end:
        if q.statuses()[-len(want):] == want:
            return
        q.command("query-status")  # collects the events that came meanwhile
        time.sleep(0.2)
    raise SystemExit(f"FAIL: MIGRATION events never ended with {want}: {q.statuses()}")


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
    refused(s, "migrate", "already connecting", "a second resume while one connects",
            uri=dead, resume=True)
    wait_events(s, ["postcopy-recover-setup", "postcopy-paused"])
    check(True, f"a resume to {dead}, where nothing listens: back to postcopy-paused")
    d.command("migrate-recover", uri=uri2)
    check(d.command("query-migrate")["status"] == "postcopy-recover-setup",
          "migrate-recover: the destination is postcopy-recover-setup")
    s.command("migrate", uri=uri2, resume=True)
    wait_status(s, ["postcopy-active", "completed"])
    check(True, f"migrate resume: true over {uri2}: recovered")
    pause_and_recover(d, s, d, uri3, "paused at the destination")
    try:
        while "completed" not in s.statuses():
            msg = s.read()
            if "event" in msg:
                s.events.append(msg)
    except EOFError:
        pass  # a source VMM that exits once the VM runs at the destination
    seq = [x for x in s.statuses() if x.startswith("postcopy-recover")]
    check(seq.count("postcopy-recover") >= 2 and seq.count("postcopy-recover-setup") >= 3,
          f"MIGRATION events: {s.statuses()}")
    check("completed" in s.statuses(), "completed after two recoveries by command")


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
    try:
        while "completed" not in b.statuses():
            msg = b.read()
            if "event" in msg:
                b.events.append(msg)
    except EOFError:
        pass  # a source VMM that exits once the VM runs at the destination
    check("completed" in b.statuses(), f"B -> C: B's MIGRATION events {b.statuses()}")
    wait_run_state(c, "running")
    check(True, "the VM runs at C")
    for q in (a, b):  # sources that wait in postmigrate end as QEMU's do
        try:
            q.execute("quit")
        except (EOFError, OSError, QMPError):
            pass


def main():
    path, case = sys.argv[1:3]
    uri = sys.argv[3] if len(sys.argv) > 3 else ""
    try:
        {"cancel": cancel_case, "migrate": migrate_case, "after-cancel": after_cancel,
         "after-postcopy": after_postcopy, "incoming": incoming_case,
         "recover": recover_case, "onward": onward_case}[case](path, uri)
    except QMPError as e:
        raise SystemExit(f"FAIL: {e}")


if __name__ == "__main__":
    main()
