#!/usr/bin/env python3
"""qmp-race: a QMP-driven migration with random commands racing it.

Through the QMP client of qmp.py (beside it), in the style of qmp-drive.py.

  qmp-race.py chaos SEED SSOCK DSOCK URI RECDIR OUT
        One migration from the source (SSOCK) to a destination started
        with --incoming defer (DSOCK), driven as qmp-drive.py drives it
        (migrate-incoming, capabilities, parameters, migrate, a manual
        switch-over, a recovery when the link is paused), while CHAOS
        clients on each side fire random commands of the control API
        (legal names, some with bad arguments) at random moments, all
        drawn from SEED.  Every reply must be valid JSON carrying its
        request's id and either "return" or "error" {class, desc}; every
        event {event, timestamp{seconds, microseconds}[, data]}.  At the
        end the source's verdict goes into OUT, one word: completed (the
        VM runs at the destination), before (it failed or was cancelled
        before the switch-over, or the guest ended first: the VM runs at
        the source), lost (it failed after the switch-over); then both
        sides are asked to quit by several clients at once (quit racing
        other commands), except a VM that runs on (before: the source;
        completed: the destination), which is left to finish its guest.
  qmp-race.py quit-paused SSOCK DSOCK URI
        A postcopy paused by migrate-pause at the source, both ends
        postcopy-paused; quit at the destination is answered (the caller
        checks that the destination VMM then ends).
  qmp-race.py stop-paused SSOCK DSOCK URI RURI
        The same pause; stop at the destination, whose vCPU waits for a
        page the recovery brings; migrate-recover RURI from another client
        answered meanwhile, the source resumed there; the stop completes,
        cont, completed.

Prints what it saw; exits 0 when every check held, 1 with the reason.
"""
import json
import random
import socket
import sys
import threading
import time

from qmp import QMP, QMPClosed, QMPError

CHAOS = 3  # extra clients on each side
STATUSES = {"none", "setup", "active", "cancelling", "cancelled", "device", "pre-switchover",
            "postcopy-active", "postcopy-paused", "postcopy-recover-setup", "postcopy-recover",
            "completed", "failed"}
TERMINAL = ("completed", "failed", "cancelled")
problems = []  # what broke QMP's rules, from any thread
plock = threading.Lock()


def problem(what):
    with plock:
        problems.append(what)
    print(f"PROBLEM: {what}", flush=True)


def check_event(msg, who):
    ts = msg.get("timestamp")
    if not (isinstance(msg.get("event"), str) and isinstance(ts, dict)
            and isinstance(ts.get("seconds"), int) and isinstance(ts.get("microseconds"), int)
            and isinstance(msg.get("data", {}), dict)):
        problem(f"{who}: a malformed event {msg}")
    elif msg["event"] == "MIGRATION" and msg.get("data", {}).get("status") not in STATUSES:
        problem(f"{who}: a MIGRATION event with an unknown status {msg}")


class Raw:
    """A QMP client that checks every message it reads against the spec."""

    def __init__(self, path, who, timeout=90):
        self.who = who
        self.q = QMP(path, timeout=timeout)
        self.lock = threading.Lock()

    def execute(self, cmd, args=None):
        """The reply (checked), or None once the peer closed."""
        q = self.q
        with self.lock:
            q.next_id += 1
            req = {"execute": cmd, "id": q.next_id}
            if args is not None:
                req["arguments"] = args
            try:
                q.sock.sendall(json.dumps(req).encode() + b"\n")
                while True:
                    msg = q.read()
                    if "event" in msg:
                        check_event(msg, self.who)
                        q.events.append(msg)
                        continue
                    break
            except (QMPClosed, ConnectionError, BrokenPipeError):
                return None
            except socket.timeout:
                problem(f"{self.who}: no reply to {req} within {q.sock.gettimeout()} s (a hang)")
                return None
            except json.JSONDecodeError as e:
                problem(f"{self.who}: a reply that is not JSON to {req}: {e}")
                return None
        err = msg.get("error")
        if msg.get("id") != req["id"]:
            problem(f"{self.who}: reply {msg} to {req} does not carry its id")
        elif "return" in msg and err is None:
            pass
        elif not (isinstance(err, dict) and isinstance(err.get("class"), str)
                  and isinstance(err.get("desc"), str) and "return" not in msg):
            problem(f"{self.who}: reply {msg} to {req}: neither return nor error{{class, desc}}")
        return msg

    def ok(self, cmd, args=None):
        """The return value; QMPError on an error reply, QMPClosed when gone."""
        r = self.execute(cmd, args)
        if r is None:
            raise QMPClosed(f"{self.who}: closed at {cmd}")
        if "error" in r:
            raise QMPError(f"{self.who}: {cmd} {args}: {r['error'].get('desc')}")
        return r["return"]

    def status(self):
        return self.ok("query-migrate").get("status", "none")

    def close(self):
        self.q.close()


def cap(name, state):
    return {"capability": name, "state": state}


def chaos_request(rng, side, uri, bad_uri, cancel_w):
    """One random command for side ("s" or "d"): (name, arguments or None);
    migrate_cancel weighs cancel_w at the source (a round's choice)."""
    cmds = ["stop", "cont", "query-status", "query-migrate", "migrate", "migrate_cancel",
            "migrate-start-postcopy", "migrate-pause", "migrate-recover", "migrate-continue",
            "migrate-incoming", "migrate-set-parameters", "migrate-set-capabilities",
            "object-add", "object-del", "query-migrate-parameters",
            "query-migrate-capabilities"]
    weights = [3, 4, 4, 6, 2, cancel_w if side == "s" else 2, 2, 0.25, 2, 2, 2, 2, 2, 1, 1, 1, 1]
    cmd = rng.choices(cmds, weights)[0]
    if rng.random() < 0.08:
        return cmd, {"bogus-argument": rng.randrange(10)}  # refused, as QEMU does
    if cmd == "migrate":
        return cmd, rng.choice([{}, {"uri": bad_uri}, {"uri": "tcp:127.0.0.1"},
                                {"uri": uri, "detach": "yes"},
                                {"uri": "unix:/nonexistent/x", "resume": True},
                                {"uri": uri, "resume": 1}, {"uri": 7}])
    if cmd == "migrate-recover":
        return cmd, rng.choice([{}, {"uri": "tcp:127.0.0.1"}, {"uri": "bogus:1"}, {"uri": []}])
    if cmd == "migrate-continue":
        return cmd, {"state": rng.choice(["pre-switchover", "active", "bogus"])}
    if cmd == "migrate-incoming":
        return cmd, rng.choice([{"uri": uri}, {"uri": "tcp:127.0.0.1"}, {}, {"uri": None}])
    if cmd == "migrate-set-parameters":
        return cmd, rng.choice([{"x-precopy-rounds": rng.randrange(3)},
                                {"max-bandwidth": rng.choice([0, 1 << 30])},
                                {"downtime-limit": rng.randrange(3000000)},
                                {"x-postcopy-manual": rng.random() < 0.5},
                                {"x-recover-ms": 0}, {"x-no-such-parameter": 1},
                                {"max-postcopy-bandwidth": "fast"}])
    if cmd == "migrate-set-capabilities":
        return cmd, rng.choice([{"capabilities": [cap("postcopy-ram", True),
                                                  cap("events", rng.random() < 0.5)]},
                                {"capabilities": [cap("no-such-cap", True)]},
                                {"capabilities": [cap("postcopy-ram", True),
                                                  cap("pause-before-switchover",
                                                      rng.random() < 0.5)]},
                                {"capabilities": "all"}])
    if cmd == "object-add":
        return cmd, rng.choice([{"qom-type": "tls-creds-psk", "id": f"c{rng.randrange(4)}",
                                 "dir": "/nonexistent", "endpoint": "client"},
                                {"qom-type": "memory-backend-ram", "id": "m"},
                                {"qom-type": "tls-creds-x509"}])
    if cmd == "object-del":
        return cmd, {"id": f"c{rng.randrange(4)}"}
    return cmd, None


def chaos_client(path, who, seed, side, uri, bad_uri, cancel_w, stop_ev, counts):
    rng = random.Random(seed)
    try:
        c = Raw(path, who)
    except (QMPError, OSError):
        return  # the VMM already ended
    n = 0
    while not stop_ev.is_set():
        cmd, args = chaos_request(rng, side, uri, bad_uri, cancel_w)
        if c.execute(cmd, args) is None:
            break
        n += 1
        time.sleep(rng.random() * 0.05)
    c.close()
    with plock:
        counts[who] = n


def recover(s, d, recdir, rng, tries):
    """A paused postcopy (migrate-pause by a chaos client): recovered over a
    fresh address, or, once the destination listens at as many as it takes
    (4), over the last one again (it still listens there)."""
    ruri = f"unix:{recdir}/r{min(tries, 4)}.sock"
    if tries <= 4:
        try:
            d.ok("migrate-recover", {"uri": ruri})
        except QMPError as e:
            print(f"driver: migrate-recover: {e}")
            return
    for _ in range(200):
        r = s.execute("migrate", {"uri": ruri, "resume": True})
        if r is None or "error" not in r:
            print(f"driver: recovering over {ruri}")
            return
        if "already connecting" not in r["error"]["desc"]:
            print(f"driver: migrate resume: {r['error']['desc']}")
            return
        time.sleep(0.1 + rng.random() * 0.1)


def start_migration(s, uri, rng):
    """The driver's migrate, past what the chaos clients did meanwhile (a
    migration of theirs under way, a stopped VM, postcopy-ram off):
    True once one is started, False when the source ended (the guest)."""
    for _ in range(600):
        r = s.execute("migrate", {"uri": uri})
        if r is None:
            return False
        if "error" not in r:
            return True
        desc = r["error"]["desc"]
        if "cont" in desc:
            s.execute("cont")
        elif "postcopy-ram" in desc:
            s.execute("migrate-set-capabilities", {"capabilities": [cap("postcopy-ram", True)]})
        elif "in progress" not in desc:
            raise SystemExit(f"FAIL: the driver's migrate refused: {desc}")
        time.sleep(0.05)
    raise SystemExit("FAIL: the driver's migrate never started")


def follow(s, d, rng, recdir):
    """Drive the migration to a final status (the source's): that status, or
    "ended" when the source VMM closed (its guest finished)."""
    manual_at = time.time() + rng.random() * 2
    recoveries = 0
    end = time.time() + 400
    while time.time() < end:
        try:
            st = s.status()
        except QMPClosed:
            return "ended"
        except QMPError as e:
            raise SystemExit(f"FAIL: query-migrate: {e}")
        if st in TERMINAL:
            return st
        if st == "active" and time.time() > manual_at:
            s.execute("migrate-start-postcopy")
        elif st == "pre-switchover":
            s.execute("migrate-continue", {"state": "pre-switchover"})
        elif st == "postcopy-paused":
            try:
                dst = d.status()
            except QMPError:
                dst = "gone"
            if dst == "postcopy-paused":
                recoveries += 1
                recover(s, d, recdir, rng, recoveries)
        time.sleep(0.05 + rng.random() * 0.1)
    raise SystemExit("FAIL: the migration never reached a final status (a hang)")


def quit_storm(path, who, rng):
    """quit from two clients at once, with other commands between: each
    reply valid or the connection closed, never a wrong answer."""
    try:
        cs = [Raw(path, f"{who}{i}") for i in range(2)]
    except (QMPError, OSError):
        return  # already gone
    ths = []
    for i, c in enumerate(cs):
        def run(c=c, i=i):
            for cmd in rng.sample(["query-status", "cont", "stop", "query-migrate"], 2) + ["quit"]:
                r = c.execute(cmd)
                if r is None:
                    return
                if cmd == "quit" and "error" in r:
                    problem(f"{c.who}: quit refused: {r}")
        ths.append(threading.Thread(target=run))
    for t in ths:
        t.start()
    for t in ths:
        t.join()


def chaos_case(seed, spath, dpath, uri, recdir, out):
    rng = random.Random(seed)
    bad_uri = "tcp:127.0.0.1:1"  # nothing listens: a migration there fails before the switch-over
    cancel_w = rng.choice([0, 0, 1])  # a round with cancels, or without
    print(f"seed {seed}: migrate_cancel among the source's chaos: {'yes' if cancel_w else 'no'}")
    stop_ev, counts, ths = threading.Event(), {}, []
    for side, path in (("s", spath), ("d", dpath)):
        for i in range(CHAOS):
            ths.append(threading.Thread(
                target=chaos_client,
                args=(path, f"{side}{i}", rng.randrange(1 << 30), side, uri, bad_uri, cancel_w,
                      stop_ev, counts)))
    d = Raw(dpath, "d-driver")
    s = Raw(spath, "s-driver")
    for t in ths:
        t.start()
    time.sleep(rng.random() * 0.3)
    try:
        d.ok("migrate-set-capabilities", {"capabilities": [cap("events", True)]})
    except QMPError as e:
        print(f"driver: destination capabilities: {e}")
    r = d.execute("migrate-incoming", {"uri": uri})
    if r is None or ("error" in r and "already been started" not in r["error"]["desc"]):
        raise SystemExit(f"FAIL: migrate-incoming: {r}")
    s.execute("migrate-set-capabilities",
              {"capabilities": [cap("postcopy-ram", True), cap("events", True)]})
    s.execute("migrate-set-parameters", {"x-precopy-rounds": rng.randrange(3),
                                         "x-postcopy-manual": rng.random() < 0.7})
    time.sleep(rng.random() * 0.5)
    verdict = follow(s, d, rng, recdir) if start_migration(s, uri, rng) else "ended"
    stop_ev.set()
    for t in ths:
        t.join()
    print(f"chaos requests answered: {dict(sorted(counts.items()))}")
    # A chaos migrate to a dead port may still be failing: the final word is the source's own.
    while verdict != "ended":
        try:
            st = s.status()
            if st in TERMINAL or st == "none":
                break
        except QMPError:
            verdict = "ended"
            break
        time.sleep(0.1)
    if verdict == "ended":
        outcome = "before"  # the guest ended at the source before its migration
    else:
        try:
            st, run = s.status(), s.ok("query-status")["status"]
        except QMPError:
            st, run = "ended", "ended"
        if st == "completed" and run == "postmigrate":
            outcome = "completed"
        elif run == "finish-migrate" and st == "failed":
            outcome = "lost"
        elif run in ("running", "paused", "ended"):
            outcome = "before"
        else:
            raise SystemExit(f"FAIL: the source says {st} and runs {run}: no consistent outcome")
        print(f"source: query-migrate {st}, query-status {run}")
    print(f"outcome: {outcome}")
    with open(out, "w") as f:
        f.write(outcome + "\n")
    # What runs on finishes its guest; what it left is told to quit (quit racing).
    if outcome == "before":
        if s.execute("cont") is not None:
            pass  # a chaos stop must not leave the guest paused forever
        quit_storm(dpath, "dq", rng)
    elif outcome == "completed":
        d.execute("cont")
        quit_storm(spath, "sq", rng)
    else:
        quit_storm(spath, "sq", rng)
        quit_storm(dpath, "dq", rng)
    s.close()
    d.close()
    if problems:
        raise SystemExit(f"FAIL: {len(problems)} replies or events broke QMP's rules: {problems[:5]}")
    print("ok: every reply and event well-formed")


def quit_paused_case(spath, dpath, uri):
    d = Raw(dpath, "d")
    s = Raw(spath, "s")
    paused_both(s, d, uri)
    r = d.execute("quit")
    if r is None or "return" not in r:
        raise SystemExit(f"FAIL: quit at the paused destination: {r}")
    print("ok: quit at the paused destination answered")


def paused_both(s, d, uri):
    """A slow postcopy to d (migrate-incoming uri), paused by migrate-pause at s."""
    d.ok("migrate-incoming", {"uri": uri})
    s.ok("migrate-set-capabilities", {"capabilities": [cap("postcopy-ram", True)]})
    # a slow push: postcopy lasts, the pages the guest wants are still missing
    s.ok("migrate-set-parameters", {"x-postcopy-manual": False, "x-precopy-rounds": 0,
                                    "max-postcopy-bandwidth": 1 << 20})
    s.ok("migrate", {"uri": uri})
    end = time.time() + 300
    while s.status() != "postcopy-active":
        if time.time() > end:
            raise SystemExit("FAIL: never postcopy-active")
        time.sleep(0.1)
    s.ok("migrate-pause")
    while s.status() != "postcopy-paused" or d.status() != "postcopy-paused":
        if time.time() > end:
            raise SystemExit("FAIL: never postcopy-paused at both ends")
        time.sleep(0.1)
    print("ok: migrate-pause: both ends postcopy-paused")


def stop_paused_case(spath, dpath, uri, ruri):
    """stop at a destination whose postcopy is paused waits for its vCPUs,
    one of which waits for a page that only a recovery brings: meanwhile
    migrate-recover (another client) must be answered, and the migration
    recovered; the stop then completes, cont, the migration completes."""
    d = Raw(dpath, "d")
    s = Raw(spath, "s")
    paused_both(s, d, uri)
    stopper = Raw(dpath, "d-stop")
    got = {}
    t = threading.Thread(target=lambda: got.update(r=stopper.execute("stop")))
    t.start()
    # The stop is sent first (its reply may wait for the vCPUs): the
    # recovery's commands come after it on another connection.
    time.sleep(0.5)
    rec = Raw(dpath, "d-rec", timeout=60)
    r = rec.execute("migrate-recover", {"uri": ruri})
    if r is None or "return" not in r:
        raise SystemExit(f"FAIL: migrate-recover while a stop waits for the vCPUs: {r} "
                         "(the destination's control socket is blocked behind the stop)")
    print("ok: migrate-recover answered while a stop waits for the vCPUs")
    s.ok("migrate", {"uri": ruri, "resume": True})
    s.ok("migrate-set-parameters", {"max-postcopy-bandwidth": 0})  # the rest at full speed
    t.join(120)
    if t.is_alive() or "return" not in (got.get("r") or {}):
        raise SystemExit(f"FAIL: the stop after the recovery: {got.get('r')}")
    st = d.ok("query-status")
    if st["status"] != "paused":
        raise SystemExit(f"FAIL: after stop: {st}")
    print("ok: the stop completed once the recovery brought the page: paused")
    d.ok("cont")
    while s.status() != "completed":
        time.sleep(0.2)
    s.ok("quit")
    print("ok: completed after the recovery; the source quits")


def main():
    try:
        if sys.argv[1] == "chaos":
            seed, spath, dpath, uri, recdir, out = sys.argv[2:8]
            chaos_case(int(seed), spath, dpath, uri, recdir, out)
        elif sys.argv[1] == "quit-paused":
            quit_paused_case(*sys.argv[2:5])
        elif sys.argv[1] == "stop-paused":
            stop_paused_case(*sys.argv[2:6])
        else:
            raise SystemExit(f"FAIL: no case {sys.argv[1]}")
    except QMPError as e:
        raise SystemExit(f"FAIL: {e}")


if __name__ == "__main__":
    main()
