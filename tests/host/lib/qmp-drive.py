#!/usr/bin/env python3
"""qmp-drive: drive the VMM's control API as any QMP client would.

Through the QMP client of qmp.py (beside it), written from QEMU's
documented QMP wire format, not from this project's code.

  qmp-drive.py SOCKET cancel  URI   set parameters, migrate with manual
                                    postcopy, cancel in precopy: the VM
                                    goes on (query-status), events seen
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


def cancel_case(path, uri):
    q = QMP(path)
    err = q.execute("no-such-command")
    check(err.get("error", {}).get("class") == "CommandNotFound", "an unknown command: CommandNotFound")
    err = q.execute("migrate-set-parameters", **{"max-bandwidth": -1})
    check("error" in err, "max-bandwidth -1: refused")
    check(q.command("query-migrate") == {}, "query-migrate before any migration: {}")
    q.command("migrate-set-parameters", **{"x-precopy-rounds": 1, "x-postcopy-manual": True,
                                           "max-bandwidth": 8 << 20})
    params = q.command("query-migrate-parameters")
    check(params["max-bandwidth"] == 8 << 20 and params["x-postcopy-manual"], "parameters read back")
    q.command("migrate", uri=uri)
    busy = q.execute("migrate", uri=uri)
    check("error" in busy, "a second migrate while one runs: refused")
    wait_status(q, ["active"])
    st = q.command("query-migrate")
    check(st["ram"]["total"] > 0 and st["ram"]["transferred"] > 0, f"precopy progress: {st['ram']['transferred']} bytes sent")
    q.command("migrate_cancel")
    st = wait_status(q, ["cancelled"])
    check(st["status"] == "cancelled", "cancelled in precopy")
    check(q.command("query-status")["running"], "the VM runs on at the source")
    time.sleep(0.5)
    q.command("query-status")  # collect late events
    check("cancelled" in q.statuses(), f"MIGRATION events: {q.statuses()}")


def migrate_case(path, uri):
    watcher = QMP(path)
    q = QMP(path)
    q.command("migrate-set-parameters", **{"x-precopy-rounds": 1, "x-postcopy-manual": True})
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


def main():
    path, case = sys.argv[1:3]
    uri = sys.argv[3] if len(sys.argv) > 3 else ""
    try:
        {"cancel": cancel_case, "migrate": migrate_case, "after-cancel": after_cancel,
         "after-postcopy": after_postcopy}[case](path, uri)
    except QMPError as e:
        raise SystemExit(f"FAIL: {e}")


if __name__ == "__main__":
    main()
