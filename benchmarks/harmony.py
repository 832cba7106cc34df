"""Harmony benchmark: zactors nodes beside pyre nodes, two processes in two network namespaces.

    sudo /tmp/venv/bin/python benchmarks/harmony.py [--count 500000] [--pyre-count 200000] [--no-kill]

Measures, for zactors and pyre in the same run: time to discovery (node
start to ENTER of the other node), SHOUT and WHISPER throughput of 100-byte
messages with the number lost, and time to EXIT after the peer is SIGKILLed
(default timeouts: 30 s expiry for both; both kills run at once).  The raw
pyzmq ceiling (one DEALER to one ROUTER across the same veth) is measured too.

Needs root (it creates namespaces joined by veth pairs and removes them
afterwards); beacons never leave those namespaces.  Counts default below the
issue's 1M (500k zactors, 200k pyre, which runs ~2.5x slower) so a run stays
under ~3 minutes on 2 shared cores; rates are per second, so they compare.
Each figure is printed as it is measured; every step runs under a deadline
(``--deadline``) and says what it waits for (``_harness.py``).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _harness import Steps, add_deadline_option  # noqa: E402 - after the path

PAYLOAD = b"x" * 100
GROUP = "bench"
QUIET = 3.0  # seconds without a message: the receiver reports what it got
DISCOVERY_SAMPLES = 5  # fresh sender processes; the median is reported
SMALL_BURST = 2000  # fits pyre's per-peer queue, so pyre loses nothing


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def commands():
    for line in sys.stdin:
        yield json.loads(line)


# -- zactors roles ----------------------------------------------------------
def zactors_role(role):
    import gevent
    import zmq
    from zactors.patterns.harmony import Node

    zmq.Context.instance()  # warm up what any process has before it starts a node
    gevent.get_hub()
    started = time.monotonic()
    node = Node(role).start()
    node.join(GROUP)
    out({"ready": node.id})
    state = {"count": 0, "last": None, "peer": None}

    def pump():
        for event in node.events():
            kind = event.type
            if kind == "SHOUT" or kind == "WHISPER":
                state["count"] += 1
                state["last"] = time.monotonic()
            elif kind == "ENTER" and state["peer"] is None:
                state["peer"] = event.peer
                out({"discovered": time.monotonic() - started, "peer": event.peer})
            elif kind == "EXIT":
                out({"exit": time.monotonic(), "peer": event.peer})

    gevent.spawn(pump)
    if role.endswith("send"):
        # Starting the stdin thread costs milliseconds: not while discovery is being timed.
        with gevent.Timeout(30, False):
            while state["peer"] is None:
                gevent.sleep(0.001)
    pool = gevent.get_hub().threadpool
    while True:
        line = pool.spawn(sys.stdin.readline).get()
        if not line:
            break
        cmd = json.loads(line)
        if cmd["cmd"] in ("shout", "whisper"):
            wait_members(node, cmd)
            out({"start": time.monotonic()})
            send = (lambda: node.shout(GROUP, PAYLOAD)) if cmd["cmd"] == "shout" else (
                lambda peer=cmd["peer"]: node.whisper(peer, PAYLOAD))
            for i in range(cmd["n"]):
                send()
                if i & 1023 == 0:
                    gevent.sleep(0)
            out({"sent": cmd["n"]})
        elif cmd["cmd"] == "count":
            state["count"] = 0
            state["last"] = time.monotonic()
            gevent.spawn(report_when_quiet, state, cmd["n"])
    node.stop()


def wait_members(node, cmd):
    import gevent
    if cmd["cmd"] == "shout":
        with gevent.Timeout(10, False):
            while not node.peers_by_group(GROUP):
                gevent.sleep(0.01)


def report_when_quiet(state, n):
    import gevent
    while state["count"] < n:
        before = state["count"]
        gevent.sleep(0.2)
        if state["count"] == before and time.monotonic() - state["last"] > QUIET:
            break
    out({"received": state["count"], "last": state["last"]})


# -- pyre roles -------------------------------------------------------------
def pyre_role(role):
    import threading
    import uuid

    import zmq
    from pyre import Pyre

    ctx = zmq.Context.instance()
    started = time.monotonic()
    node = Pyre(role, ctx=ctx)
    node.start()
    node.join(GROUP)
    out({"ready": node.uuid().hex.upper()})
    state = {"count": 0, "last": None, "peer": None, "target": None}
    lock = threading.Lock()

    def listen():
        poller = zmq.Poller()
        poller.register(node.socket(), zmq.POLLIN)
        while True:
            if not dict(poller.poll(200)):
                target = state["target"]
                if target is not None and state["last"] and time.monotonic() - state["last"] > QUIET:
                    state["target"] = None
                    out({"received": state["count"], "last": state["last"]})
                continue
            with lock:
                parts = node.recv()
            kind = parts[0]
            if kind in (b"SHOUT", b"WHISPER"):
                state["count"] += 1
                state["last"] = time.monotonic()
                if state["target"] is not None and state["count"] >= state["target"]:
                    state["target"] = None
                    out({"received": state["count"], "last": state["last"]})
            elif kind == b"ENTER" and state["peer"] is None:
                state["peer"] = uuid.UUID(bytes=parts[1]).hex.upper()
                out({"discovered": time.monotonic() - started, "peer": state["peer"]})
            elif kind == b"EXIT":
                out({"exit": time.monotonic(), "peer": uuid.UUID(bytes=parts[1]).hex.upper()})

    threading.Thread(target=listen, daemon=True).start()
    for cmd in commands():
        if cmd["cmd"] in ("shout", "whisper"):
            if cmd["cmd"] == "shout":
                deadline = time.monotonic() + 10
                while not node.peers_by_group(GROUP) and time.monotonic() < deadline:
                    time.sleep(0.01)
            out({"start": time.monotonic()})
            peer = uuid.UUID(cmd["peer"]) if cmd.get("peer") else None
            for _ in range(cmd["n"]):
                with lock:
                    if cmd["cmd"] == "shout":
                        node.shout(GROUP, PAYLOAD)
                    else:
                        node.whisper(peer, PAYLOAD)
            out({"sent": cmd["n"]})
        elif cmd["cmd"] == "count":
            state["count"] = 0
            state["last"] = time.monotonic()
            state["target"] = cmd["n"]
    node.stop()


# -- raw pyzmq ceiling ------------------------------------------------------
def raw_role(role, endpoint=None):
    import zmq
    ctx = zmq.Context.instance()
    if role == "rawrecv":
        sock = ctx.socket(zmq.ROUTER)
        port = sock.bind_to_random_port("tcp://*")
        out({"ready": port})
        n = json.loads(sys.stdin.readline())["n"]
        for _ in range(n):
            sock.recv_multipart()
        out({"received": n, "last": time.monotonic()})
    else:
        sock = ctx.socket(zmq.DEALER)
        sock.connect(endpoint)
        out({"ready": 0})
        n = json.loads(sys.stdin.readline())["n"]
        out({"start": time.monotonic()})
        for _ in range(n):
            sock.send(PAYLOAD)
        out({"sent": n})
        sys.stdin.readline()
    sock.close(1000)


# -- the orchestrator -------------------------------------------------------
class Proc:
    def __init__(self, ns, *args):
        self.proc = ns.popen((sys.executable, os.path.abspath(__file__)) + args, text=True, bufsize=1,
                             stderr=subprocess.DEVNULL)

    def read(self, key, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("benchmark process ended early")
            msg = json.loads(line)
            if key in msg:
                return msg
        raise RuntimeError("no %s within %ss" % (key, timeout))

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()


def stream(sender, receiver, kind, n, peer=None):
    receiver.send(cmd="count", n=n)
    sender.send(cmd=kind, n=n, peer=peer)
    start = sender.read("start")["start"]
    got = receiver.read("received", timeout=600)
    elapsed = (got["last"] or start) - start
    rate = got["received"] / elapsed if elapsed > 0 else 0.0
    return rate, n - got["received"]


def run_pair(lab_pair, kind, n, samples=1):
    a_ns, b_ns = lab_pair
    receiver = Proc(b_ns, "--role", "%s-recv" % kind)
    receiver.read("ready")
    times = []
    for _ in range(samples - 1):  # extra senders that only time their discovery, then leave
        probe = Proc(a_ns, "--role", "%s-send" % kind)
        times.append(probe.read("discovered")["discovered"])
        probe.proc.stdin.close()
        probe.proc.wait(30)
    sender = Proc(a_ns, "--role", "%s-send" % kind)
    sender.read("ready")
    found = sender.read("discovered")
    times.append(found["discovered"])
    results = {"discovery": sorted(times)[len(times) // 2]}
    results["shout"] = stream(sender, receiver, "shout", n)
    results["whisper"] = stream(sender, receiver, "whisper", n, peer=found["peer"])
    return sender, receiver, results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500_000, help="messages per zactors/raw stream")
    parser.add_argument("--pyre-count", type=int, default=200_000, help="messages per pyre stream")
    parser.add_argument("--no-kill", action="store_true", help="skip the 30 s EXIT-after-SIGKILL phase")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    add_deadline_option(parser, 900)
    args = parser.parse_args()
    if args.role:
        if args.role.startswith("zactors"):
            return zactors_role(args.role)
        if args.role.startswith("pyre"):
            return pyre_role(args.role)
        return raw_role(args.role, args.endpoint)

    from tests.netns import Lab, netns_unavailable
    reason = netns_unavailable()
    if reason:
        sys.exit("benchmarks/harmony.py: %s" % reason)
    steps = Steps(args.deadline)
    with Lab() as lab:
        z_pair, p_pair, r_pair = lab.pair(), lab.pair(), lab.pair()

        def raw():  # the ceiling
            recv = Proc(r_pair[1], "--role", "rawrecv")
            port = recv.read("ready")["ready"]
            send = Proc(r_pair[0], "--role", "rawsend", "--endpoint", "tcp://%s:%d" % (r_pair[1].address, port))
            send.read("ready")
            recv.send(n=args.count)
            send.send(n=args.count)
            start = send.read("start")["start"]
            last = recv.read("received")["last"]
            send.send(done=True)
            return {"rate": round(args.count / (last - start))}

        def pair(namespaces, stack, count, samples=0):
            result = {}

            def measure():
                sender, receiver, figures = run_pair(namespaces, stack, count, samples)
                result.update(sender=sender, receiver=receiver)
                return figures
            figures = steps.run("%s %d" % (stack, count), "discovery, then SHOUT and WHISPER of %d messages "
                                "between two %s processes" % (count, stack), measure)
            return result.get("sender"), result.get("receiver"), figures

        measured = steps.run("raw pyzmq", "%d messages DEALER -> ROUTER across the veth" % args.count, raw)
        raw_rate = measured["rate"] if measured else 0
        z_send, z_recv, z = pair(z_pair, "zactors", args.count, DISCOVERY_SAMPLES)
        p_send, p_recv, p = pair(p_pair, "pyre", args.pyre_count, DISCOVERY_SAMPLES)
        # pyre loses big bursts (and a peer whose queue overflowed stays stuck): its
        # lossless rate comes from bursts its 3000-message peer queue can hold.
        small_send, small_recv, small = pair(lab.pair(), "pyre", SMALL_BURST)
        for proc in (small_send, small_recv):
            if proc is not None:
                proc.proc.stdin.close()
        if not (z and p and small):
            print("some figures are missing (see above): no table")
            return 1

        print("Harmony (ZRE v2), 100-byte messages, two processes in two namespaces (veth)")
        print("%-30s %16s %16s %16s" % ("", "zactors", "pyre 0.3.5", "raw pyzmq"))
        print("%-30s %13.1f ms %13.1f ms %16s" % ("discovery, median of %d" % DISCOVERY_SAMPLES, z["discovery"] * 1e3,
                                                  p["discovery"] * 1e3, "-"))
        for kind in ("shout", "whisper"):
            name = kind.upper()
            print("%-30s %14.0f/s %14s %14.0f/s" % ("%s, %d msgs" % (name, args.count), z[kind][0], "", raw_rate))
            print("%-30s %16d %16s %16d" % ("  lost", z[kind][1], "", 0))
            rate, lost = p[kind]
            print("%-30s %16s %14.0f/s" % ("%s, %d msgs" % (name, args.pyre_count), "", rate))
            print("%-30s %16s %16s" % ("  lost", "", "%d%s" % (lost, " (peer stuck)" if lost == args.pyre_count else "")))
            rate, lost = small[kind]
            print("%-30s %16s %14.0f/s" % ("%s, %d msgs" % (name, SMALL_BURST), "", rate))
            print("%-30s %16s %16d" % ("  lost", "", lost))
        for kind in ("shout", "whisper"):
            # against pyre's best run that lost nothing
            base = max([rate for rate, lost in (p[kind], small[kind]) if not lost] or [0])
            print("%-30s %15.1fx" % ("%s zactors / pyre (lossless)" % kind.upper(), z[kind][0] / base if base else 0))

        if not args.no_kill:
            def exits():
                killed = time.monotonic()
                z_recv.proc.send_signal(signal.SIGKILL)
                p_recv.proc.send_signal(signal.SIGKILL)
                return {"zactors": z_send.read("exit", timeout=90)["exit"] - killed,
                        "pyre": p_send.read("exit", timeout=90)["exit"] - killed}
            exit_s = steps.run("EXIT after SIGKILL", "both senders to see EXIT (30 s expiry)", exits, deadline=120)
            if exit_s:
                print("%-30s %14.1f s %14.1f s %16s" % ("EXIT after SIGKILL (30 s expiry)", exit_s["zactors"],
                                                        exit_s["pyre"], "-"))
        for proc in (z_send, p_send):
            proc.proc.stdin.close()


if __name__ == "__main__":
    main()
