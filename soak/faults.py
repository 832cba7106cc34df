"""The fault-injection soak (issue #19): acknowledged means kept, whatever is killed or filled.

::

    python -m soak.faults --duration 600 --seed 1        # from the repository root

A ZEPS broker and a Clone server run as child processes (``zactors zeps broker``, ``zactors clone
server``), journaling on a small tmpfs the soak mounts (root; otherwise a temporary directory and
no disk-full faults).  While publishers and Clone writers run, faults are injected at random:
SIGKILL of the broker or of the Clone server (restarted on the same ports), the disk filled to
ENOSPC for a while then emptied, subscribers that vanish (killed child processes, dropped actors).
Fast and slow subscribers check what they receive as they go.  At the end the whole stream and the
whole map are read back and the invariants checked:

- 0 acknowledged messages lost.  Acknowledged: a batch whose ``Publisher.flush()`` returned (at the
  broker's ``--ack`` level); a Clone ``set(wait=...)`` that returned its KVPUB sequence.
- 0 duplicates: the plain publisher never resends; the idempotent one resends after a lost peering
  and the broker drops what its journal holds already, across a broker restart or kill too (the
  producer table is in the journal).
- Order kept: each publisher's messages in the stream in publish order; Clone values never go back.
- Every subscriber saw a gap-free sequence, or was told (GAP, StreamRolledBack, ReplayError), and
  every sequence it saw carries the message the journal holds for it (no sequence reused).

It prints the figures, and a last line ``figures: {json}``; exit status 1 if an invariant broke.
Only processes it started are killed, by pid; everything is on 127.0.0.1; every wait has a deadline.
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
from collections import Counter, defaultdict

import gevent

from zactors.actors.errors import ActorTimeout
from zactors.patterns.clone.client import Clone, UpdateRefused
from zactors.patterns.zeps import MessagesLost, Publisher, Subscriber, ZepsError, query
from zactors.patterns.zeps.client import ReplayError, StreamRolledBack

from .common import Child, SoakError, Tmpfs, free_ports, wait_until, zactors_argv

log = logging.getLogger("soak.faults")

STREAM = b"soak"
KEYS = [b"/soak/k%02d" % i for i in range(40)]
HEARTBEAT, EXPIRY = 0.5, 2.0     # clients and broker: a dead broker is noticed within ~2 s


class Broker:
    """The ZEPS broker child: started, SIGKILLed, started again on the same endpoint."""

    def __init__(self, workdir, journal, ack):
        self.endpoint = "tcp://127.0.0.1:%d" % free_ports(1)
        self.journal, self.ack, self.workdir = journal, ack, workdir
        self.child = None
        self.starts = 0

    def start(self, timeout=60.0):
        """Start it and wait until it answers QUERY; a start refused (a full disk) is tried again."""
        def ready():
            if self.child is None or not self.child.alive():
                self.starts += 1
                self.child = Child(zactors_argv("zeps", "broker", "--journal", self.journal, "--bind", self.endpoint,
                                                "--ack", self.ack, "--heartbeat", str(HEARTBEAT),
                                                "--expiry", str(EXPIRY)),
                                   os.path.join(self.workdir, "broker.log"), "zeps broker")
                return False
            try:
                query(self.endpoint, timeout=0.5)
            except ZepsError:
                return False
            return True
        wait_until(ready, timeout, "the ZEPS broker on %s to answer" % self.endpoint, step=0.1)

    def kill(self):
        self.child.kill()


class CloneServer:
    """The Clone server child (ports P..P+3), journaling its map under ``persist``."""

    def __init__(self, workdir, persist):
        self.port = free_ports(4)
        self.persist, self.workdir = persist, workdir
        self.child = None

    @property
    def endpoint(self):
        return "tcp://127.0.0.1:%d" % self.port

    def start(self, timeout=60.0):
        import socket

        def ready():
            if self.child is None or not self.child.alive():
                self.child = Child(zactors_argv("clone", "server", "--port", str(self.port), "--persist", self.persist),
                                   os.path.join(self.workdir, "clone.log"), "clone server")
                return False
            with socket.socket() as probe:
                probe.settimeout(0.5)
                return probe.connect_ex(("127.0.0.1", self.port + 2)) == 0   # the collector: bound last
        wait_until(ready, timeout, "the Clone server on %s to listen" % self.endpoint, step=0.1)

    def kill(self):
        self.child.kill()


class Watch:
    """A subscriber from sequence 1 whose every message is checked as it comes: no gap it was not told
    of, no disorder; ``slow`` takes few messages at a time, with a small credit window."""

    def __init__(self, soak, name, slow):
        self.soak, self.name, self.slow = soak, name, slow
        self.last = 0             # the last sequence taken
        self.seen = {}            # seq -> body
        self.violations = []      # (what, detail)
        self.told = Counter()     # gaps, rollbacks, replay errors reported to it
        self.gaps = []            # (first, last) ranges the broker said retention removed
        self.sub = None
        self.greenlet = gevent.spawn(self._run)

    def _subscribe(self):
        window = 2048 if self.slow else 1 << 20
        return Subscriber(self.soak.broker.endpoint, STREAM, from_seq=self.last + 1, window=window,
                          on_gap=self._gap, heartbeat=HEARTBEAT, expiry=EXPIRY, timeout=5)

    def _gap(self, first, last):
        """Told (in the subscriber's greenlet, perhaps before the messages ahead of it are taken)."""
        self.told["gaps"] += 1
        self.gaps.append((first, last))

    def _told_of(self, first, last):
        return any(a <= first and last <= b for a, b in self.gaps)

    def _run(self):
        try:
            self._follow()
        except Exception as exc:      # a client-side failure is a finding too: say it
            self.violations.append(("crashed", "%s: %r" % (self.name, exc)))

    def _follow(self):
        while True:
            if self.sub is None:
                try:
                    self.sub = self._subscribe()
                except ZepsError:
                    gevent.sleep(0.2)     # the broker is down: try again (the soak's end bounds this)
                    continue
            try:
                batch = self.sub.get_many(8 if self.slow else 1024, timeout=0.5)
            except StreamRolledBack as exc:
                self.told["rolled_back"] += 1
                self.last = min(self.last, exc.last_seq or 0)
                self._drop()
                continue
            except ReplayError:
                self.told["replay_errors"] += 1
                self._drop()
                continue
            except ZepsError as exc:
                self.violations.append(("error", str(exc)))
                self._drop()
                continue
            if not batch and not self.sub.alive:     # the actor ended (it says why in its log): again
                self.violations.append(("ended", "%s: subscriber actor ended at %d" % (self.name, self.last)))
                self._drop()
                continue
            for message in batch:
                if message.seq != self.last + 1 and not (message.seq > self.last + 1 and self._told_of(self.last + 1, message.seq - 1)):
                    self.violations.append(("gap" if message.seq > self.last else "disorder",
                                            "%s: seq %d after %d" % (self.name, message.seq, self.last)))
                self.last = message.seq
                self.seen[message.seq] = message.body
            if self.slow and batch:
                gevent.sleep(0.005)   # a slow consumer: its credit runs out, the broker switches it to replay

    def _drop(self):
        sub, self.sub = self.sub, None
        try:
            sub.destroy()
        except Exception:
            pass

    def close(self):
        self.greenlet.kill(timeout=5)
        if self.sub is not None:
            self._drop()


class Soak:
    def __init__(self, duration, seed, ack="written", tmpfs_size=256 << 20, rate=1000.0, workdir=None):
        self.duration, self.seed, self.ack, self.rate = duration, seed, ack, rate
        self.rng = random.Random(seed)
        self.workdir = workdir or tempfile.mkdtemp(prefix="zactors-soak-")
        self.tmpfs = Tmpfs.open(tmpfs_size)
        data = self.tmpfs.path if self.tmpfs else self.workdir
        self.broker = Broker(self.workdir, os.path.join(data, "zeps"), ack)
        self.clone = CloneServer(self.workdir, os.path.join(data, "clone"))
        self.stopping = False
        self.faults = Counter()
        self.acked = set()                    # (publisher, generation, n) whose flush returned
        self.told_lost = 0                    # messages MessagesLost named (told: not acknowledged)
        self.flush_errors = Counter()         # flushes that raised (refused, no answer): not acknowledged
        self.published = Counter()
        self.resent = 0                       # the idempotent publisher's resends (none may be journaled twice)
        self.clone_acked = {}                 # key -> the highest counter a set(wait=) returned for
        self.clone_sent = {}                  # key -> the highest counter sent
        self.clone_refused = 0
        self.clone_timeouts = 0
        self.clone_regressions = []
        self.watches = []
        self.vanished = 0

    # -- load ------------------------------------------------------------------------------------------
    def _publisher(self, name, idempotent):
        """Publish batches and flush each: a batch is acknowledged when its flush returns."""
        generation = 0
        key = name.encode()
        while not self.stopping:
            generation += 1
            try:
                pub = Publisher(self.broker.endpoint, STREAM, idempotent=idempotent, heartbeat=HEARTBEAT,
                                expiry=EXPIRY, timeout=5)
            except ZepsError:
                gevent.sleep(0.2)       # the broker is down: the fault loop restarts it
                continue
            n = 0
            try:
                while not self.stopping:
                    first = n + 1
                    for _ in range(self.rng.randint(1, 200)):
                        n += 1
                        pub.publish(key, b"%s %d %d" % (key, generation, n))
                    self.published[name] += n - first + 1
                    try:
                        pub.flush(timeout=15)
                    except MessagesLost as exc:
                        self.told_lost += exc.count
                        continue
                    except ZepsError as exc:
                        self.flush_errors["refused" if "PING" in str(exc) or "journal" in str(exc) else "other"] += 1
                        continue
                    self.acked.update((key, generation, i) for i in range(first, n + 1))
                    gevent.sleep(self.rng.expovariate(self.rate / 100.0))   # pacing: ~rate messages/s
            except ZepsError:
                self.flush_errors["publish"] += 1   # idempotent backpressure wait refused or timed out
            finally:
                self.resent += pub.stats["resent"]
                pub.close()

    def _clone_writer(self, client):
        counter = Counter()
        while not self.stopping:
            key = self.rng.choice(KEYS)
            counter[key] += 1
            self.clone_sent[key] = counter[key]
            try:
                client.set(key, b"%d" % counter[key], wait=5)
            except UpdateRefused:
                self.clone_refused += 1
            except ActorTimeout:
                self.clone_timeouts += 1
            else:
                self.clone_acked[key] = max(self.clone_acked.get(key, 0), counter[key])
            gevent.sleep(self.rng.expovariate(200.0))   # pacing: ~200 updates/s

    def _clone_observer(self, key, value, sequence):
        """Change events of a second client: a key's value never goes back (values only grow)."""
        if not value:
            return
        number = int(value)
        if number < self.observed.get(key, 0):
            self.clone_regressions.append((key, self.observed[key], number))
        self.observed[key] = number

    # -- faults ----------------------------------------------------------------------------------------
    def _faults(self):
        kinds = ["kill_broker", "kill_clone", "vanish_subscriber", "vanish_child"]
        if self.tmpfs:
            kinds.append("disk_full")
        rng = random.Random(self.seed)   # its own: the publishers' draws must not change the schedule
        order = []
        while not self.stopping:
            gevent.sleep(rng.uniform(0.5, 3.0))      # the time between faults (a schedule, not a wait)
            if self.stopping:
                break
            if not order:                 # every kind once per round, in a random order
                order = rng.sample(kinds, len(kinds))
            kind = order.pop()
            self.faults[kind] += 1
            if kind == "kill_broker":
                self.broker.kill()
                gevent.sleep(rng.uniform(0, 1.0))   # down for a while
                self.broker.start()
            elif kind == "kill_clone":
                self.clone.kill()
                gevent.sleep(rng.uniform(0, 1.0))
                self.clone.start()
            elif kind == "disk_full":
                self.tmpfs.fill()
                gevent.sleep(rng.uniform(0.5, 2.0))  # full for a while
                self.tmpfs.drain()
            elif kind == "vanish_subscriber":   # an in-process subscriber that never reads, dropped
                try:
                    sub = Subscriber(self.broker.endpoint, STREAM, from_seq=0, window=4096, timeout=5)
                except ZepsError:
                    continue
                gevent.sleep(rng.uniform(0.1, 1.5))
                sub.destroy()
                self.vanished += 1
            elif kind == "vanish_child":        # a subscriber process whose output nobody reads, SIGKILLed
                child = Child(zactors_argv("zeps", "subscribe", "--connect", self.broker.endpoint, STREAM.decode()),
                              os.path.join(self.workdir, "vanish.log"), "subscriber", stdout=-1)
                gevent.sleep(rng.uniform(0.2, 1.5))
                child.kill()
                child.proc.stdout.close()
                self.vanished += 1

    # -- the run ---------------------------------------------------------------------------------------
    def run(self):
        started = time.monotonic()
        self.observed = {}
        self.broker.start()
        self.clone.start()
        writer = Clone(self.clone.endpoint, subtree=b"/soak/", timeout=EXPIRY)
        observer = Clone(self.clone.endpoint, subtree=b"/soak/", timeout=EXPIRY)
        observer.on_change(self._clone_observer)
        self.watches = [Watch(self, "fast", slow=False), Watch(self, "slow", slow=True)]
        workers = [gevent.spawn(self._publisher, "plain", False), gevent.spawn(self._publisher, "idem", True),
                   gevent.spawn(self._clone_writer, writer)]
        faults = gevent.spawn(self._faults)
        try:
            gevent.sleep(self.duration)   # the soak's length
            self.stopping = True
            faults.join(timeout=90)
            if not faults.dead:
                raise SoakError("the fault loop did not finish within 90 s")
            faults.get()                  # raises what the fault loop raised
            if self.tmpfs:
                self.tmpfs.drain()
            if not self.broker.child.alive():
                self.broker.start()
            if not self.clone.child.alive():
                self.clone.start()
            gevent.joinall(workers, timeout=60)
            if not all(g.dead for g in workers):
                raise SoakError("publishers or the Clone writer did not finish within 60 s")
            for g in workers:
                g.get()
            return self._check(writer, observer, time.monotonic() - started)
        finally:
            self.stopping = True
            gevent.killall([faults] + workers, timeout=5)
            for watch in self.watches:
                watch.close()
            for client in (writer, observer):
                try:
                    client.destroy()
                except Exception:
                    pass
            for server in (self.broker, self.clone):
                if server.child is not None:
                    server.child.stop()
            if self.tmpfs:
                self.tmpfs.close()

    def _read_all(self, last_seq):
        """The whole stream, from a fresh subscriber: {seq: body}."""
        journal = {}
        sub = Subscriber(self.broker.endpoint, STREAM, from_seq=1, window=4 << 20, timeout=10)
        try:
            deadline = time.monotonic() + 60 + last_seq / 20000
            while len(journal) < last_seq and time.monotonic() < deadline:
                for message in sub.get_many(4096, timeout=1):
                    journal[message.seq] = message.body
        finally:
            sub.destroy()
        return journal

    def _recovered(self):
        """After the last fault, a new publisher's message is acknowledged (the broker serves again)."""
        try:
            with Publisher(self.broker.endpoint, STREAM, timeout=30) as pub:
                pub.publish(b"final", b"final 1 1")
                pub.flush(timeout=30)
        except ZepsError as exc:
            return str(exc)
        self.acked.add((b"final", 1, 1))
        return True

    def _check(self, writer, observer, elapsed):
        recovered = self._recovered()
        stream = query(self.broker.endpoint, timeout=10)["streams"][STREAM.decode()]
        last_seq = stream["last_seq"]
        journal = self._read_all(last_seq)
        for watch in self.watches:   # let the live subscribers catch up (the slow one takes ~1,500/s)
            try:
                wait_until(lambda: watch.last >= last_seq, 120 + (last_seq - watch.last) / 1000,
                           "subscriber %s to reach %d" % (watch.name, last_seq), step=0.05)
            except SoakError as exc:
                watch.violations.append(("behind", str(exc)))
        occurrences = Counter()
        order = defaultdict(int)      # (publisher, generation) -> highest n seen so far
        disorder = 0
        for seq in sorted(journal):
            name, generation, n = journal[seq].split()
            item = (name, int(generation), int(n))
            occurrences[item] += 1
            if occurrences[item] == 1:
                if item[2] <= order[item[:2]]:
                    disorder += 1
                order[item[:2]] = item[2]
        lost = sum(1 for item in self.acked if item not in occurrences)
        dup_plain = sum(c - 1 for item, c in occurrences.items() if item[0] == b"plain" and c > 1)
        dup_idem = sum(c - 1 for item, c in occurrences.items() if item[0] == b"idem" and c > 1)
        reused = sum(1 for watch in self.watches for seq, body in watch.seen.items() if journal.get(seq) != body)
        # Clone: it takes updates again, and a fresh client's map holds, for every key, at least the value
        # last acknowledged
        reader = Clone(self.clone.endpoint, subtree=b"/soak/", timeout=EXPIRY)
        try:
            if not reader.wait_synced(30):
                raise SoakError("no Clone snapshot within 30 s")
            try:
                reader.set(b"/soak/final", b"1", wait=30)
                clone_recovered = True
            except (UpdateRefused, ActorTimeout) as exc:
                clone_recovered = "%s: %s" % (type(exc).__name__, exc)
            clone_lost = [(k, v, reader.get(k)) for k, v in self.clone_acked.items()
                          if int(reader.get(k) or 0) < v]
        finally:
            reader.destroy()
        figures = {
            "seed": self.seed, "seconds": round(elapsed, 1), "ack": self.ack, "disk_full": bool(self.tmpfs),
            "recovered": recovered, "clone_recovered": clone_recovered,
            "faults": sum(self.faults.values()), "faults_by_kind": dict(self.faults),
            "broker_starts": self.broker.starts,
            "published": sum(self.published.values()), "journaled": len(journal), "last_seq": last_seq,
            "messages_checked": len(self.acked), "lost": lost, "duplicated": dup_plain,
            "duplicated_idempotent": dup_idem, "resent": self.resent, "told_lost": self.told_lost,
            "flush_errors": dict(self.flush_errors), "disorder": disorder, "sequences_reused": reused,
            "subscribers": {w.name: {"received": len(w.seen), "told": dict(w.told), "violations": len(w.violations)}
                            for w in self.watches},
            "subscriber_violations": [v for w in self.watches for v in w.violations][:10],
            "vanished_subscribers": self.vanished,
            "clone_keys_checked": len(self.clone_acked), "clone_updates_sent": sum(self.clone_sent.values()),
            "clone_lost": len(clone_lost), "clone_lost_detail": clone_lost[:5],
            "clone_regressions": len(self.clone_regressions), "clone_refused": self.clone_refused,
            "clone_timeouts": self.clone_timeouts,
        }
        figures["ok"] = (recovered is True and clone_recovered is True and lost == 0 and dup_plain == 0 and dup_idem == 0 and disorder == 0 and reused == 0
                         and not figures["subscriber_violations"] and not clone_lost and not self.clone_regressions)
        return figures


def report(figures, out=sys.stdout):
    f = figures
    print("fault-injection soak: %.0f s, seed %d, ack %s%s" % (f["seconds"], f["seed"], f["ack"],
          "" if f["disk_full"] else " (no tmpfs: no disk-full faults; run as root for them)"), file=out)
    print("  faults injected:     %d (%s)" % (f["faults"], ", ".join("%s %d" % kv for kv in sorted(f["faults_by_kind"].items()))), file=out)
    print("  messages checked:    %d acknowledged of %d published, %d journaled" % (
        f["messages_checked"], f["published"], f["journaled"]), file=out)
    print("  lost:                %d   (told MessagesLost, not acknowledged: %d)" % (f["lost"], f["told_lost"]), file=out)
    print("  duplicated:          %d plain; %d idempotent (of %d messages it sent again)" % (
        f["duplicated"], f["duplicated_idempotent"], f["resent"]), file=out)
    print("  order violations:    %d; sequences reused: %d" % (f["disorder"], f["sequences_reused"]), file=out)
    for name, s in sorted(f["subscribers"].items()):
        print("  subscriber %-9s %d received, told %s, violations %d" % (name + ":", s["received"], s["told"] or "{}",
                                                                      s["violations"]), file=out)
    print("  clone:               %d keys checked, %d updates sent, lost %d, values gone back %d, refused %d" % (
        f["clone_keys_checked"], f["clone_updates_sent"], f["clone_lost"], f["clone_regressions"],
        f["clone_refused"]), file=out)
    print("  after the faults:    ZEPS %s; Clone %s" % (
        "acknowledges a new publisher" if f["recovered"] is True else "NOT SERVING: %s" % f["recovered"],
        "acknowledges a set" if f["clone_recovered"] is True else "NOT SERVING: %s" % f["clone_recovered"]), file=out)
    print("  verdict:             %s" % ("OK" if f["ok"] else "INVARIANT BROKEN"), file=out)
    print("figures: " + json.dumps(f, default=repr), file=out, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m soak.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, metavar="SECONDS", help="how long faults go on")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    parser.add_argument("--ack", choices=("written", "synced"), default="written", help="the broker's ack level")
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s to aim for per publisher")
    parser.add_argument("--tmpfs-mb", type=int, default=256, help="size of the tmpfs the journals live on (RAM)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) at the end")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    soak = Soak(args.duration, seed, ack=args.ack, tmpfs_size=args.tmpfs_mb << 20, rate=args.rate)
    try:
        figures = soak.run()
    except SoakError as exc:
        print("soak.faults: error: %s (logs in %s)" % (exc, soak.workdir), file=sys.stderr)
        return 2
    report(figures)
    if args.keep or not figures["ok"]:
        print("logs in %s" % soak.workdir, file=sys.stderr)
    else:
        shutil.rmtree(soak.workdir, ignore_errors=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
