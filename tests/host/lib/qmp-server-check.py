#!/usr/bin/env python3
"""qmp-server-check: the VMM's QMP server's connection handling, driven
through vmm-qmp-test (the server alone, no VM) with the QMP client of
qmp.py.

  qmp-server-check.py VMM-QMP-TEST WORKDIR CASE...

Cases (each on a fresh server):
  refused    a request over 64 KiB is answered, then the connection is
             closed at once (no other client connects)
  parse      QMP spec: a JSON syntax error is answered (GenericError,
             "JSON parse error, ...", no id) and the next request on the
             same connection is served; a reset byte (a control character,
             0xFF) drops an unfinished request, is answered, and the
             stream goes on from the next byte
  renegotiate  qmp_capabilities again: CommandNotFound with QEMU's text
  race       while events are sent back to back, clients negotiate: the
             first line after the greeting is always {"return": {}}
  version    query-version in QEMU's shape, the numbers of the VERSION
             file; the greeting's version is the same object
  commands   query-commands lists exactly what is dispatched, from both
             tables: each name listed runs (a command of the second table
             with its own ctx), a name not listed is CommandNotFound
  quit       x-quit ends the server from another thread while it is being
             answered: its reply still goes out, then the connection ends
             (the VMM's quit lost its reply that way)
  idle       16 connections that never negotiate: the owner still gets in
             and is served; the oldest of them were closed, with a reason
  deadline   a connection that does not negotiate is closed after the
             negotiation limit, told why
  slow       a client that stops reading while events pile up (more than
             its socket holds) keeps every event, in order; the sender is
             not held up
  overflow   a client that never reads while far more than its queue
             holds is sent: cut, the reason logged; it got a prefix of
             the events in order; others are served afterwards
  uid        (as root) another user, through a socket opened to all, is
             refused by its uid and the connection closed at once

Prints what it saw; exits 0 when every check held, 1 with the reason.
Waits are hang guards (socket timeouts of GUARD seconds), never a speed
limit.
"""
import json
import os
import socket
import subprocess
import sys
import time

from qmp import QMP, QMPClosed

GUARD = 120
PENDING = 4  # QMP_MAX_PENDING in vmm/include/vmm/qmp.h


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def check_quiet(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


class Server:
    def __init__(self, prog, work, name):
        self.version_file = "VERSION"  # the tree's, where tests/run runs
        self.path = os.path.join(work, name + ".sock")
        self.log = os.path.join(work, name + ".err")
        self.proc = subprocess.Popen([prog, self.path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.log, "w"),
                                     text=True)
        end = time.monotonic() + GUARD
        while not self.listening():  # the path exists from bind(), before listen()
            if self.proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"FAIL: vmm-qmp-test did not listen: {self.logtext()}")
            time.sleep(0.02)

    def listening(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def events(self, n, size):
        """n events of size bytes of padding; returns once all were queued."""
        self.proc.stdin.write(f"events {n} {size}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        check(line.strip() == f"emitted {n}", f"the server sent {n} events")

    def storm(self, start):
        """Start or stop events sent back to back; at the stop, how many."""
        self.proc.stdin.write("storm start\n" if start else "storm stop\n")
        self.proc.stdin.flush()
        if not start:
            line = self.proc.stdout.readline().split()
            check_quiet(line[:1] == ["storm"], f"the storm stopped: {line}")
            return int(line[1])

    def logtext(self):
        with open(self.log) as f:
            return f.read()

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=GUARD)
        check(self.proc.returncode == 0, "the server closed cleanly")


def raw(path):
    """A connection that reads the greeting and does nothing more."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)  # blocking: waits while the listen backlog is full
    s.settimeout(GUARD)
    return s


def read_to_eof(s):
    """Everything until the server closes (a hang guard, not a limit)."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            raise SystemExit(f"FAIL: still open after {GUARD} s; got {data[-300:]!r}")
        if not chunk:
            return data
        data += chunk


def lines(data):
    return [json.loads(x) for x in data.split(b"\n") if x.strip()]


def case_refused(srv):
    for what, bad in (("a request over 64 KiB", b'{"execute": "' + b"x" * 70000),):
        q = QMP(srv.path, timeout=GUARD)
        q.sock.sendall(bad)
        msgs = lines(q.buf + read_to_eof(q.sock))
        check(msgs and "error" in msgs[-1], f"{what}: answered with an error ({msgs[-1]['error']['desc']})")
        print(f"ok: {what}: the connection was closed at once, no other client came")
        q.close()
    q = QMP(srv.path, timeout=GUARD)
    check(q.command("x-echo", a=1) == {"a": 1}, "a well-formed client is served after them")


def parse_error(msg, what, stray=False):
    err = msg.get("error", {})
    check(err.get("class") == "GenericError" and "id" not in msg and
          err.get("desc", "").startswith("JSON parse error, " + ("stray" if stray else "")),
          f"{what}: answered {msg}")


def case_parse(srv):
    q = QMP(srv.path, timeout=GUARD)
    q.sock.sendall(b'{"execute": }\n')
    parse_error(q.read(), "a syntax error")
    check(q.command("x-echo", a=1) == {"a": 1}, "the same connection is served next")
    # Two requests in one write, the first bad: the second is not lost.
    q.sock.sendall(b'{"execute": "x-echo", "arguments": {"a": [1,, 2]}}'
                   b'{"execute": "x-echo", "arguments": {"b": "}{"}, "id": 7}\r\n')
    parse_error(q.read(), "a bad request followed by a good one")
    check(q.read() == {"return": {"b": "}{"}, "id": 7}, "the good one after it is served")
    q.sock.sendall(b'] {"execute": "x-echo", "arguments": {"c": 3}, "id": 8}\n')
    parse_error(q.read(), "a stray closing bracket")
    check(q.read() == {"return": {"c": 3}, "id": 8}, "the request after it is served")
    # QEMU's extension: 'single-quoted' strings; a request over several
    # lines, in pieces.
    q.sock.sendall(b"{'execute': 'x-echo', 'arguments': {'f': '}\\''}, 'id': 10}")
    check(q.read() == {"return": {"f": "}'"}, "id": 10}, "single-quoted strings, as QEMU")
    for piece in (b'{"execute":\n  "x-', b'echo", "argu', b'ments": {"g": [1,\n 2]}, "id": 11\n}\n'):
        q.sock.sendall(piece)
        time.sleep(0.05)
    check(q.read() == {"return": {"g": [1, 2]}, "id": 11}, "a request in pieces over lines")
    for name, byte in (("0xFF", b"\xff"), ("a control character (0x01)", b"\x01"),
                       ("a NUL byte", b"\x00")):
        # Unfinished: an open string in an open object, never closed.
        q.sock.sendall(b'{"execute": "x-echo", "arguments": {"d": "never closed ' + byte)
        parse_error(q.read(), f"an unfinished request then {name}", stray=True)
        q.sock.sendall(b'{"execute": "x-echo", "arguments": {"e": 5}, "id": 9}\n')
        check(q.read() == {"return": {"e": 5}, "id": 9}, f"{name} reset the parser: served next")
    # Hostile but within 64 KiB: nested past json-c's depth limit.
    q.sock.sendall(b"[" * 30000 + b"]" * 30000 + b"\n")
    parse_error(q.read(), "30000 nested arrays")
    check(q.command("x-echo", h=1) == {"h": 1}, "served after them")
    check("closed after" not in srv.logtext(), "no connection was closed")


def case_renegotiate(srv):
    q = QMP(srv.path, timeout=GUARD)
    r = q.execute("qmp_capabilities")
    check(r.get("error") == {"class": "CommandNotFound",
                             "desc": "Capabilities negotiation is already complete, command ignored"},
          f"a second qmp_capabilities: {r}")
    check(q.command("x-echo", a=1) == {"a": 1}, "the client is still served")


def case_race(srv):
    """Events are queued for a client from the moment it is negotiated; the
    reply that negotiates it must be in its queue before that moment.  A
    refusal for too many clients (the server has not yet seen the last
    rounds' clients leave) is a reply too, first all the same."""
    srv.storm(True)
    rounds, batch, admitted, refused = 400, 4, 0, 0
    for r in range(rounds):
        socks = [raw(srv.path) for _ in range(batch)]
        files = [s.makefile("rb") for s in socks]
        for f in files:
            check_quiet("QMP" in json.loads(f.readline()), "a greeting")
        for i, s in enumerate(socks):
            s.sendall(json.dumps({"execute": "qmp_capabilities", "id": [r, i]}).encode() + b"\n")
        for i, f in enumerate(files):
            first = json.loads(f.readline())
            if "too many QMP clients" in first.get("error", {}).get("desc", ""):
                refused += 1
                continue
            if first != {"return": {}, "id": [r, i]}:
                srv.storm(False)
                raise SystemExit(f"FAIL: round {r}: the first line after qmp_capabilities "
                                 f"was {first}, not its reply")
            check_quiet(json.loads(f.readline()).get("event") == "X-STORM",
                        f"round {r}: an event after the reply")
            admitted += 1
        for f, s in zip(files, socks):
            f.close()
            s.close()
    sent = srv.storm(False)
    check(admitted >= rounds * batch // 2,
          f"{admitted} clients negotiated ({refused} refused: too many at once) while {sent} "
          "events were sent: the reply came first every time, and an event right after it")


def case_version(srv):
    with open(srv.version_file) as f:
        want = [int(x) for x in f.read().strip().split(".")]
    s = raw(srv.path)
    f = s.makefile("rb")
    greeting = json.loads(f.readline())["QMP"]["version"]
    s.close()
    q = QMP(srv.path, timeout=GUARD)
    r = q.execute("query-version")
    check("return" in r, f"query-version answers: {r}")
    v = r["return"]
    check(str(v.get("package")).startswith("postcopy-kvm ") and
          [v.get("qemu", {}).get(k) for k in ("major", "minor", "micro")] == want,
          f"query-version {v}: VERSION's {'.'.join(map(str, want))}")
    check(greeting == v, "the greeting's version is the same")


def case_commands(srv):
    q = QMP(srv.path, timeout=GUARD)
    names = [c["name"] for c in q.command("query-commands")]
    check(sorted(names) == sorted(["qmp_capabilities", "query-commands", "query-version", "x-echo",
                                   "x-owner", "x-quit"]),
          f"query-commands: {names}")
    check(q.command("x-owner") == {"owner": "second"},
          "a command of the second table runs with that table's ctx")
    for name in [n for n in names if n != "x-quit"]:  # it ends the server (case quit)
        err = q.execute(name).get("error", {})
        check(err.get("class") != "CommandNotFound" or "already complete" in err.get("desc"),
              f"{name}, listed, is dispatched")
    r = q.execute("query-kvm")
    check(r.get("error", {}).get("class") == "CommandNotFound", "a name not listed is not found")


def case_idle(srv):
    idle = [raw(srv.path) for _ in range(16)]
    q = QMP(srv.path, timeout=GUARD)
    check(q.command("x-echo", owner=True) == {"owner": True},
          "16 connections that never negotiate: the owner still gets in and is served")
    pushed = 0
    for s in idle[:16 - PENDING + 1]:
        msgs = lines(read_to_eof(s))
        pushed += "error" in msgs[-1]
    check(pushed == 16 - PENDING + 1, f"the {pushed} oldest idle connections were closed, told why")
    check("pushed out by a newer connection" in srv.logtext(), "the server logged why")


def case_deadline(srv):
    s = raw(srv.path)
    t0 = time.monotonic()
    msgs = lines(read_to_eof(s))
    check("QMP" in msgs[0] and "error" in msgs[-1] and "qmp_capabilities" in msgs[-1]["error"]["desc"],
          f"a connection that never negotiates is closed after {time.monotonic() - t0:.1f} s, told why")
    check("did not negotiate" in srv.logtext(), "the server logged why")


def x_tests(q, n):
    """Read until n X-TEST events came; their numbers."""
    got = [e["data"]["i"] for e in q.events if e["event"] == "X-TEST"]
    while len(got) < n:
        msg = q.read()
        if msg.get("event") == "X-TEST":
            got.append(msg["data"]["i"])
    return got


def case_slow(srv):
    slow = QMP(srv.path, timeout=GUARD)
    other = QMP(srv.path, timeout=GUARD)
    # About 700 KB: more than a unix socket holds, less than the 1 MiB queue.
    srv.events(2000, 300)
    check(other.command("x-echo", other=1) == {"other": 1}, "another client is served meanwhile")
    check(x_tests(other, 2000) == list(range(2000)), "the other client got every event in order")
    check(x_tests(slow, 2000) == list(range(2000)),
          "the client that did not read got every event in order once it read")
    check(slow.command("x-echo", slow=1) == {"slow": 1}, "and it is still served")
    check("cut" not in srv.logtext(), "nobody was cut")


def case_overflow(srv):
    stalled = QMP(srv.path, timeout=GUARD)
    srv.events(8000, 300)  # about 2.6 MB, past the socket and the 1 MiB queue
    msgs = lines(stalled.buf + read_to_eof(stalled.sock))
    got = [m["data"]["i"] for m in msgs if m.get("event") == "X-TEST"]
    check(0 < len(got) < 8000 and got == list(range(len(got))),
          f"the stalled client got the first {len(got)} events in order, then was closed")
    check("does not read what it is sent" in srv.logtext(), "the server logged why it cut it")
    q = QMP(srv.path, timeout=GUARD)
    check(q.command("x-echo", after=1) == {"after": 1}, "a new client is served afterwards")


def case_uid(srv):
    os.chmod(os.path.dirname(srv.path), 0o711)
    os.chmod(srv.path, 0o666)
    code = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            f"s.settimeout({GUARD}); d = b''\n"
            "while True:\n c = s.recv(4096)\n if not c: break\n d += c\n"
            "sys.stdout.write(d.decode())")
    out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                          sys.executable, "-c", code, srv.path],
                         capture_output=True, text=True, timeout=GUARD + 30)
    msgs = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
    check(out.returncode == 0 and len(msgs) == 1 and "refused: uid" in msgs[0]["error"]["desc"],
          f"another user: refused, then the connection closed ({out.stdout.strip()}{out.stderr.strip()})")
    check("control socket: refused: uid" in srv.logtext(), "the server logged the refusal")
    q = QMP(srv.path, timeout=GUARD)
    check(q.command("x-echo", owner=1) == {"owner": 1}, "the owner is served")


def case_quit(srv):
    """The reply to the command that ends the server goes out, though the
    server cut its clients while the command was being answered."""
    q = QMP(srv.path, timeout=GUARD)
    r = q.execute("x-quit")
    check(r == {"return": {}, "id": q.next_id},
          f"x-quit answered though the server closed meanwhile: {r}")
    check(read_to_eof(q.sock) == b"", "then the connection ends")


def main():
    prog, work = sys.argv[1:3]
    cases = {"refused": case_refused, "parse": case_parse,
             "renegotiate": case_renegotiate, "race": case_race,
             "version": case_version, "commands": case_commands,
             "idle": case_idle, "deadline": case_deadline,
             "slow": case_slow, "overflow": case_overflow, "uid": case_uid,
             "quit": case_quit}
    for name in sys.argv[3:]:
        print(f"-- {name}")
        srv = Server(prog, work, name)
        try:
            cases[name](srv)
        except QMPClosed as e:
            raise SystemExit(f"FAIL: {name}: {e}; server log: {srv.logtext()}")
        srv.stop()


if __name__ == "__main__":
    main()
