#!/usr/bin/env python3
"""qmp-drive: drive the VMM's control API as any QMP client would.

Written from QEMU's documented QMP wire format (docs/interop/qmp-spec in
QEMU: a greeting object, qmp_capabilities, {"execute", "arguments", "id"}
answered by {"return"} or {"error": {"class", "desc"}}, asynchronous
{"event", "data", "timestamp"}), not from this project's code.

  qmp-drive.py SOCKET cancel  URI   set parameters, migrate with manual
                                    postcopy, cancel in precopy: the VM
                                    goes on (query-status), events seen
  qmp-drive.py SOCKET migrate URI   two clients: one migrates (precopy,
                                    then migrate-start-postcopy), polls and
                                    collects events; the other only watches
                                    and then leaves; a cancel after the
                                    switch-over is refused

Prints what it saw; exits 0 when every check held, 1 with the reason.
"""
import json
import socket
import sys
import time


class QMP:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(path)
        self.buf = b""
        self.events = []
        self.next_id = 0
        greeting = self.read()
        if "QMP" not in greeting:
            raise SystemExit(f"FAIL: no QMP greeting: {greeting}")
        self.command("qmp_capabilities")

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the VMM closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def execute(self, cmd, **args):
        """The whole reply: {"return": ...} or {"error": ...}."""
        self.next_id += 1
        req = {"execute": cmd, "id": self.next_id}
        if args:
            req["arguments"] = args
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        while True:
            msg = self.read()
            if "event" in msg:
                self.events.append(msg)
                continue
            if msg.get("id") != self.next_id:
                raise SystemExit(f"FAIL: reply {msg} does not carry id {self.next_id}")
            return msg

    def command(self, cmd, **args):
        reply = self.execute(cmd, **args)
        if "error" in reply:
            raise SystemExit(f"FAIL: {cmd}: {reply['error']}")
        return reply["return"]

    def wait_status(self, want, limit=240):
        end = time.time() + limit
        while time.time() < end:
            st = self.command("query-migrate")
            if st.get("status") in want:
                return st
            time.sleep(0.2)
        raise SystemExit(f"FAIL: status never became one of {want}: {st}")

    def statuses(self):
        return [e["data"]["status"] for e in self.events if e["event"] == "MIGRATION"]


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
    q.wait_status(["active"])
    st = q.command("query-migrate")
    check(st["ram"]["total"] > 0 and st["ram"]["transferred"] > 0, f"precopy progress: {st['ram']['transferred']} bytes sent")
    q.command("migrate_cancel")
    st = q.wait_status(["cancelled"])
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
    q.wait_status(["active"])
    time.sleep(0.5)
    q.command("migrate-start-postcopy")
    st = q.wait_status(["postcopy-active", "completed"])
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


def main():
    path, case, uri = sys.argv[1:4]
    {"cancel": cancel_case, "migrate": migrate_case}[case](path, uri)


if __name__ == "__main__":
    main()
