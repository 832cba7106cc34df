"""The hostile-peer soak (issue #20): a swarm of hostile peers cannot hurt a well-behaved client.

::

    python -m soak.hostile --duration 300 --seed 1       # from the repository root

A ``zactors up`` node (Majordomo, ZEPS, Clone) runs as a child process.  Swarm processes (``--swarm``
children, plain pyzmq) attack it with well-formed but hostile traffic: frames over every size cap,
CREDIT floods, stream floods, ReDoS ``re:`` patterns with keys built to trigger them, subscribers
that never read, Clone snapshot floods (ICANHAZ? without reading), Clone re-sync requests from a
peer claiming the routing id ``zactors.clone.peer``, and Majordomo garbage.  Meanwhile this process
is a well-behaved client measuring its own round trips: Majordomo echo (to an echo worker here),
ZEPS publish -> deliver (pattern ``ok.`` on the stream the ReDoS keys go to), Clone set -> KVPUB.
The node's RSS and open descriptors are sampled.

It prints p50/p99 per round trip (quiet, before the swarm, and under attack), what the well-behaved
client lost, the node's peak RSS and fds against their budgets, and a last line
``figures: {json}``; exit status 1 if the client lost anything, its p99 is over ``--p99-ms``, the
node left its budgets, or the node died.  Only processes it started are killed, by pid; everything
is on 127.0.0.1; every wait has a deadline.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter

import gevent

from .common import Child, SoakError, free_ports, percentile, sample, wait_until, zactors_argv

log = logging.getLogger("soak.hostile")

GOOD = b"good"                 # the ZEPS stream the well-behaved client and the ReDoS swarm share


# -- the swarm (a child process) -----------------------------------------------------------------------
class Swarm:
    """Hostile peers, each kind a greenlet looping until the deadline; counts what each did."""

    def __init__(self, mdp, zeps, clone_port, seed, deadline):
        import zmq.green as zmq
        self.zmq = zmq
        self.ctx = zmq.Context()
        self.ctx.setsockopt(zmq.LINGER, 0)
        self.mdp, self.zeps, self.clone_port = mdp, zeps, clone_port
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.done = Counter()

    def running(self):
        return time.monotonic() < self.deadline

    def dealer(self, endpoint, routing_id=None, rcvhwm=None, kind=None):
        sock = self.ctx.socket(self.zmq.DEALER if kind is None else kind)
        sock.linger = 0
        if routing_id is not None:
            sock.routing_id = routing_id
        if rcvhwm is not None:
            sock.rcvhwm = rcvhwm
        sock.sndhwm = 10000
        sock.connect(endpoint)
        return sock

    def clone(self, offset):
        return "tcp://127.0.0.1:%d" % (self.clone_port + offset)

    def drain(self, sock):
        try:
            while True:
                sock.recv_multipart(self.zmq.NOBLOCK)
        except self.zmq.Again:
            pass

    # each attack: one round, then the loop pauses a little (the swarm is hostile, not a CPU burner)
    def huge_frames(self):
        """Frames over every cap (ZMQ_MAXMSGSIZE drops the connection before allocating them)."""
        frame = b"\0" * (24 << 20)        # over MDP's 16 MiB, ZEPS's 1 MiB, Clone's caps
        while self.running():
            endpoint = self.rng.choice([self.mdp, self.zeps, self.clone(0), self.clone(2)])
            # the Clone collector is a SUB: a PUB reaches it, once its subscription has come (the pause)
            sock = self.dealer(endpoint, kind=self.zmq.PUB if endpoint == self.clone(2) else None)
            gevent.sleep(0.1)
            sock.send(frame, copy=False)
            gevent.sleep(0.3)
            sock.close(0)
            self.done["huge_frames"] += 1

    def credit_flood(self):
        """ATTACH + SUBSCRIBE from the start, then CREDIT over and over, never reading."""
        from zactors.patterns.zeps import protocol as p
        while self.running():
            sock = self.dealer(self.zeps, rcvhwm=10)
            sock.send(p.attach(GOOD))
            sock.send(p.subscribe(b"", 0))
            for _ in range(200):
                sock.send(p.credit(self.rng.choice([2 ** 32, 2 ** 63, 1 << 30])))
                self.done["credits"] += 1
                gevent.sleep(0.01)
            sock.close(0)

    def stream_flood(self):
        """New connections each ATTACHing a new stream and publishing into it (past the stream budgets)."""
        from zactors.patterns.zeps import protocol as p
        n = 0
        live = []
        while self.running():
            n += 1
            sock = self.dealer(self.zeps)
            sock.send(p.attach(b"flood-%d-%d" % (os.getpid(), n)))
            sock.send(p.publish(b"k", b"x" * 100))
            live.append(sock)
            if len(live) > 40:
                self.drain(live[0])
                live.pop(0).close(0)
            self.done["streams"] += 1
            gevent.sleep(0.02)
        for sock in live:
            sock.close(0)

    def redos(self):
        """Catastrophic-backtracking patterns, and keys that make a backtracking engine take forever."""
        from zactors.patterns.zeps import protocol as p
        sub = self.dealer(self.zeps)
        sub.send(p.attach(GOOD))
        for pattern in (b"re:(a|a)*$", b"re:(a+)+$", b"re:(a|aa)*c", b"re:(.*a){20}"):
            sub.send(p.subscribe(pattern, p.NEW))
        sub.send(p.credit(1 << 20))
        pub = self.dealer(self.zeps)
        pub.send(p.attach(GOOD))
        while self.running():
            for _ in range(20):
                pub.send(p.publish(b"a" * self.rng.randint(30, 250) + b"!", b"redos"))
                self.done["redos_keys"] += 1
            self.drain(pub)
            self.drain(sub)
            sub.send(p.credit(1 << 16))
            gevent.sleep(0.05)
        sub.close(0)
        pub.close(0)

    def never_reading(self):
        """Subscribers from the start with a big credit that never read a byte."""
        from zactors.patterns.zeps import protocol as p
        while self.running():
            sock = self.dealer(self.zeps, rcvhwm=2)
            sock.send(p.attach(GOOD))
            sock.send(p.subscribe(b"", 0))
            sock.send(p.credit(32 << 20))
            self.done["never_reading"] += 1
            gevent.sleep(self.rng.uniform(2, 6))
            sock.close(0)

    def snapshot_flood(self):
        """Fill the map, then ask for snapshots again and again without reading them."""
        from zactors.patterns.clone.protocol import encode_icanhaz, encode_kvmsg
        collector = self.dealer(self.clone(2), kind=self.zmq.PUB)   # the collector is a SUB
        gevent.sleep(0.5)                                            # its subscription comes back
        for i in range(2000):
            collector.send_multipart(encode_kvmsg(b"/flood/%d" % i, 0, b"v" * 512, os.urandom(16)))
            if i % 100 == 0:
                gevent.sleep(0.01)
        self.done["map_keys"] += 2000
        while self.running():
            sock = self.dealer(self.clone(0), rcvhwm=2)
            for _ in range(50):
                sock.send_multipart(encode_icanhaz(b""))
                self.done["icanhaz"] += 1
            gevent.sleep(self.rng.uniform(0.5, 2))
            sock.close(0)
        collector.close(0)

    def peer_hijack(self):
        """Claim the routing id a pair peer once had, and ask for the peer re-sync."""
        from zactors.patterns.clone.protocol import encode_peer_icanhaz
        while self.running():
            sock = self.dealer(self.clone(0), routing_id=b"zactors.clone.peer", rcvhwm=10)
            sock.send_multipart(encode_peer_icanhaz())
            sock.send_multipart([b"$HIJACK", b"\0" * 8, b"", b"", b"x"])
            gevent.sleep(0.2)
            self.drain(sock)
            sock.close(0)
            self.done["hijacks"] += 1

    def mdp_garbage(self):
        """Majordomo frames that are wrong in every way a parser can meet, and requests nobody serves."""
        rng = self.rng
        shapes = [
            lambda: [os.urandom(rng.randint(0, 64))],
            lambda: [b"MDPC02"],
            lambda: [b"MDPC02", b"\x01"],
            lambda: [b"MDPC02", b"\x09", b"echo", b"x"],
            lambda: [b"MDPW02", b"\x07"],
            lambda: [b"MDPW02", b"\x03", b"not-a-client", b""],
            lambda: [b"MDPW02", b"\x01", b"garbage.%d" % rng.randint(0, 50)],
            lambda: [b"MDPC02", b"\x01", b"nobody.%d" % rng.randint(0, 10 ** 6), b"request"],
            lambda: [b"MDPC02", b"\x01", b"mmi.service", b"\xff" * 300],
            lambda: [b"", b"MDPC02", b"\x02", b"echo"],
        ]
        while self.running():
            sock = self.dealer(self.mdp, rcvhwm=100)
            for _ in range(100):
                sock.send_multipart(rng.choice(shapes)())
                self.done["mdp_garbage"] += 1
            gevent.sleep(0.1)
            self.drain(sock)
            sock.close(0)

    #: attack -> greenlets running it
    ATTACKS = {"huge_frames": 1, "credit_flood": 2, "stream_flood": 1, "redos": 1, "never_reading": 3,
               "snapshot_flood": 1, "peer_hijack": 1, "mdp_garbage": 1}

    def run(self, attacks=None):
        attacks = [getattr(self, name) for name, count in self.ATTACKS.items() for _ in range(count)
                   if attacks is None or name in attacks]
        greenlets = [gevent.spawn(attack) for attack in attacks]
        gevent.joinall(greenlets, timeout=max(0, self.deadline - time.monotonic()) + 30)
        errors = [repr(g.exception) for g in greenlets if g.dead and g.exception is not None]
        gevent.killall(greenlets, timeout=5)
        self.ctx.destroy(0)
        return {"done": dict(self.done), "errors": errors}


# -- the well-behaved client ------------------------------------------------------------------------------
class Good:
    """Round trips of a client that follows every rule; each kind in its own greenlet."""

    def __init__(self, mdp, zeps, clone):
        from zactors.patterns.majordomo.worker import Worker

        class Echo(Worker):
            service = b"echo"

            def handle(self, request):
                return request

        self.worker = Echo(mdp)
        self.mdp, self.zeps, self.clone = mdp, zeps, clone
        self.rtts = {"mdp": [], "zeps": [], "clone": []}
        self.lost = Counter()
        self.errors = []
        self.measuring = False
        self.greenlets = []

    def start(self):
        self.measuring = True
        self.greenlets = [gevent.spawn(self._mdp), gevent.spawn(self._zeps), gevent.spawn(self._clone)]

    def stop(self):
        self.measuring = False
        gevent.joinall(self.greenlets, timeout=30)
        gevent.killall(self.greenlets, timeout=5)
        for g in self.greenlets:
            if g.dead and g.exception is not None:
                self.errors.append(repr(g.exception))
        self.greenlets = []

    def take(self):
        """The round trips so far, and start afresh."""
        rtts, self.rtts = self.rtts, {"mdp": [], "zeps": [], "clone": []}
        return rtts

    def _mdp(self):
        from zactors.patterns.majordomo.client import Client
        client = Client(self.mdp, timeout=5, retries=1)
        try:
            i = 0
            while self.measuring:
                i += 1
                body = b"echo %d" % i
                t0 = time.perf_counter()
                try:
                    reply = client.request(b"echo", body)
                except Exception as exc:
                    self.lost["mdp"] += 1
                    self.errors.append("mdp: %r" % exc)
                    continue
                self.rtts["mdp"].append(time.perf_counter() - t0)
                if reply != [[body]]:
                    self.lost["mdp"] += 1
                    self.errors.append("mdp: wrong reply %r" % (reply,))
                gevent.sleep(0.01)
        finally:
            client.close()

    def _zeps(self):
        from zactors.patterns.zeps import Publisher, Subscriber
        pub = Publisher(self.zeps, GOOD, timeout=10)
        sub = Subscriber(self.zeps, GOOD, b"ok.", new=True, timeout=10)
        try:
            i = 0
            while self.measuring:
                i += 1
                body = b"%d" % i
                t0 = time.perf_counter()
                pub.publish(b"ok.%d" % i, body)
                message = sub.get(timeout=5)
                if message is None:
                    self.lost["zeps"] += 1
                    self.errors.append("zeps: message %d not delivered within 5 s" % i)
                    continue
                self.rtts["zeps"].append(time.perf_counter() - t0)
                while message.body != body:     # a late one (after a loss above): take up to ours
                    message = sub.get(timeout=5)
                    if message is None:
                        break
                gevent.sleep(0.01)
            pub.flush(timeout=10)
        finally:
            sub.destroy()
            pub.close()

    def _clone(self):
        from zactors.patterns.clone.client import Clone
        client = Clone(self.clone, subtree=b"/good/", timeout=2.0)
        try:
            if not client.wait_synced(10):
                raise SoakError("no Clone snapshot within 10 s")
            i = 0
            while self.measuring:
                i += 1
                t0 = time.perf_counter()
                try:
                    client.set(b"/good/k%d" % (i % 10), b"%d" % i, wait=5)
                except Exception as exc:
                    self.lost["clone"] += 1
                    self.errors.append("clone: %r" % exc)
                    continue
                self.rtts["clone"].append(time.perf_counter() - t0)
                gevent.sleep(0.01)
        finally:
            client.destroy()

    def close(self):
        self.worker.destroy()


def _summary(rtts):
    return {kind: {"n": len(v), "p50_ms": round(percentile(v, 0.5) * 1000, 2),
                   "p99_ms": round(percentile(v, 0.99) * 1000, 2), "max_ms": round(max(v, default=0) * 1000, 2)}
            for kind, v in rtts.items()}


#: the node's open-file limit: the ZEPS broker keeps its open streams' descriptors within half of it
#: (``max_open_streams``), the rest is for connections
NODE_NOFILE = 4096
#: descriptors for connections on top of that: the swarm holds ~100 at once, the client a few
CONNECTIONS = 512


def run(duration, seed, swarms=2, quiet=5.0, p99_ms=50.0, rss_budget=256 << 20,
        fd_budget=NODE_NOFILE // 2 + CONNECTIONS, attacks=None, workdir=None):
    workdir = workdir or tempfile.mkdtemp(prefix="zactors-hostile-")
    started = time.monotonic()
    mdp = "tcp://127.0.0.1:%d" % free_ports(1)
    zeps = "tcp://127.0.0.1:%d" % free_ports(1)
    clone_port = free_ports(4)
    node = Child(zactors_argv("up", "--data", os.path.join(workdir, "data"), "--mdp", mdp, "--zeps", zeps,
                              "--clone-port", str(clone_port), "--no-harmony", "--no-web"),
                 os.path.join(workdir, "node.log"), "zactors up", nofile=NODE_NOFILE)
    children = []
    good = None
    samples = []
    try:
        def up():
            if not node.alive():
                raise SoakError("zactors up exited (%s): %s" % (node.proc.returncode, node.tail()))
            with open(node.log, "rb") as f:
                return b"up: Ctrl-C stops" in f.read()
        wait_until(up, 60, "zactors up to listen", step=0.1)
        good = Good(mdp, zeps, "tcp://127.0.0.1:%d" % clone_port)
        good.start()
        gevent.sleep(quiet)                         # quiet round trips: the baseline
        quiet_rtts = good.take()
        base_rss, base_fds = sample(node.pid)
        for i in range(swarms):
            children.append(Child([sys.executable, "-m", "soak.hostile", "--swarm", "--mdp", mdp, "--zeps", zeps,
                                   "--clone-port", str(clone_port), "--seed", str(seed * 100 + i),
                                   "--duration", str(duration)] + (["--attacks", ",".join(attacks)] if attacks else []),
                                  os.path.join(workdir, "swarm-%d.log" % i), "swarm %d" % i))
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            if not node.alive():
                raise SoakError("the node died under attack (status %s): %s" % (node.proc.returncode, node.tail()))
            samples.append(sample(node.pid))
            gevent.sleep(0.5)                         # the sampling period
        attack_rtts = good.take()
        good.stop()
        swarm_reports = []
        for child in children:
            try:
                wait_until(lambda: not child.alive(), 60, "%s to finish" % child.name, step=0.1)
            except SoakError:
                child.kill()
            with open(child.log, "rb") as f:
                lines = [line for line in f.read().decode(errors="replace").splitlines() if line.startswith("swarm: ")]
            swarm_reports.append(json.loads(lines[-1][7:]) if lines else {"errors": [child.tail()]})
        node_alive = node.alive()
        status = node.stop(timeout=30)
    finally:
        if good is not None:
            good.stop()
            good.close()
        for child in children:
            child.kill()
        if node.alive():
            node.kill()
    peak_rss = max((s[0] for s in samples), default=0)
    peak_fds = max((s[1] for s in samples), default=0)
    attack = _summary(attack_rtts)
    swarm_done = Counter()
    for report_ in swarm_reports:
        swarm_done.update(report_.get("done", {}))
    figures = {
        "seed": seed, "seconds": round(time.monotonic() - started, 1), "swarms": swarms,
        "quiet": _summary(quiet_rtts), "under_attack": attack, "lost": dict(good.lost),
        "client_errors": good.errors[:10], "p99_bound_ms": p99_ms,
        "node_rss_mb": {"before": round(base_rss / 2 ** 20, 1), "peak": round(peak_rss / 2 ** 20, 1),
                        "budget": round((base_rss + rss_budget) / 2 ** 20, 1)},
        "node_fds": {"before": base_fds, "peak": peak_fds, "budget": base_fds + fd_budget},
        "node_alive": node_alive, "node_exit": status, "swarm": dict(swarm_done),
        "swarm_errors": [e for r in swarm_reports for e in r.get("errors", [])][:5],
    }
    figures["ok"] = (node_alive and not sum(good.lost.values()) and not good.errors
                     and all(s["n"] > 0 and s["p99_ms"] < p99_ms for s in attack.values())
                     and peak_rss <= base_rss + rss_budget and peak_fds <= base_fds + fd_budget)
    return figures, workdir


def report(f, out=sys.stdout):
    print("hostile-peer soak: %.0f s, seed %d, %d swarm processes" % (f["seconds"], f["seed"], f["swarms"]), file=out)
    print("  swarm did:    %s" % ", ".join("%s %d" % kv for kv in sorted(f["swarm"].items())), file=out)
    for phase in ("quiet", "under_attack"):
        print("  %-13s %s" % (phase.replace("_", " ") + ":", "; ".join(
            "%s p50 %.1f ms p99 %.1f ms (n=%d)" % (k, s["p50_ms"], s["p99_ms"], s["n"])
            for k, s in sorted(f[phase].items()))), file=out)
    print("  p99 bound:    %.0f ms; client lost: %s" % (f["p99_bound_ms"], f["lost"] or "nothing"), file=out)
    print("  node RSS:     %(before).1f MB before, peak %(peak).1f MB (budget %(budget).1f MB)" % f["node_rss_mb"],
          file=out)
    print("  node fds:     %(before)d before, peak %(peak)d (budget %(budget)d)" % f["node_fds"], file=out)
    print("  node:         %s, exit status %s" % ("alive" if f["node_alive"] else "DIED", f["node_exit"]), file=out)
    print("  verdict:      %s" % ("OK" if f["ok"] else "FAILED"), file=out)
    print("figures: " + json.dumps(f), file=out, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m soak.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, metavar="SECONDS", help="how long the swarm attacks")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    parser.add_argument("--swarms", type=int, default=2, help="swarm processes")
    parser.add_argument("--quiet", type=float, default=5.0, metavar="SECONDS",
                        help="round trips measured before the swarm starts (the baseline)")
    parser.add_argument("--p99-ms", type=float, default=50.0, help="the well-behaved client's p99 bound")
    parser.add_argument("--rss-budget-mb", type=int, default=256, help="node RSS allowed above its quiet level")
    parser.add_argument("--fd-budget", type=int, default=NODE_NOFILE // 2 + CONNECTIONS,
                        help="node descriptors allowed above its quiet level (default: half its open-file limit "
                             "%d, the streams' share, plus %d connections)" % (NODE_NOFILE, CONNECTIONS))
    parser.add_argument("--attacks", type=lambda text: text.split(","), metavar="A,B",
                        help="only these attacks (default: all of %s)" % ", ".join(Swarm.ATTACKS))
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) at the end")
    parser.add_argument("--swarm", action="store_true", help=argparse.SUPPRESS)   # a swarm child
    parser.add_argument("--mdp", help=argparse.SUPPRESS)
    parser.add_argument("--zeps", help=argparse.SUPPRESS)
    parser.add_argument("--clone-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    if args.swarm:
        result = Swarm(args.mdp, args.zeps, args.clone_port, seed, time.monotonic() + args.duration).run(args.attacks)
        print("swarm: " + json.dumps(result), flush=True)
        return 0
    try:
        figures, workdir = run(args.duration, seed, swarms=args.swarms, quiet=args.quiet, p99_ms=args.p99_ms,
                               rss_budget=args.rss_budget_mb << 20, fd_budget=args.fd_budget, attacks=args.attacks)
    except SoakError as exc:
        print("soak.hostile: error: %s" % exc, file=sys.stderr)
        return 2
    report(figures)
    if args.keep or not figures["ok"]:
        print("logs in %s" % workdir, file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
