"""qmp: a QMP client on a unix socket, one command at a time.

Written from QEMU's documented QMP wire format (docs/interop/qmp-spec in
QEMU: a greeting object, qmp_capabilities, {"execute", "arguments", "id"}
answered by {"return"} or {"error": {"class", "desc"}} carrying the same
id, asynchronous {"event", "data", "timestamp"}), not from this project's
code.  Used by tests/host/lib/qmp-drive.py and by bench/bandwidth-cap (the
VMM's control socket) and bench/qmp-postcopy (QEMU's).
"""
import json
import socket
import time


class QMPError(Exception):
    """An error reply, or an exchange that broke QMP's rules."""


class QMPClosed(QMPError, EOFError):
    """The peer closed the connection (a VMM that migrated away does)."""


class QMP:
    """Connects, reads the greeting and negotiates capabilities.  Events
    that arrive while waiting for a reply are kept in .events."""

    def __init__(self, path, timeout=120, connect_wait=0):
        """timeout: for each read and write; connect_wait: how long to retry
        while the socket is not there yet (0: one attempt)."""
        deadline = time.monotonic() + connect_wait
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(path)
                break
            except OSError as e:
                self.sock.close()
                if time.monotonic() >= deadline:
                    raise QMPError(f"no QMP socket at {path}: {e}") from e
                time.sleep(0.01)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.events = []
        self.next_id = 0
        greeting = self.read()
        if "QMP" not in greeting:
            raise QMPError(f"no QMP greeting: {greeting}")
        self.command("qmp_capabilities")

    def read(self):
        """The next message, reply or event; QMPClosed at end of stream."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise QMPClosed("the QMP peer closed the connection")
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
                raise QMPError(f"reply {msg} does not carry id {self.next_id}")
            return msg

    def command(self, cmd, **args):
        """The reply's "return"; QMPError with the reason on an error reply."""
        reply = self.execute(cmd, **args)
        if "error" in reply:
            raise QMPError(f"{cmd}: {reply['error'].get('desc')}")
        return reply["return"]

    def statuses(self):
        """The statuses of the MIGRATION events seen so far."""
        return [e["data"]["status"] for e in self.events if e["event"] == "MIGRATION"]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
