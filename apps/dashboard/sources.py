"""What the dashboard shows: one :class:`Source` per pattern instance.

A source turns its actor's introspection reply (``INFO``) into a sample,
says which counters are rates worth charting, which gauges and counters go
to ``/metrics``, and may offer actions (``/api/NAME/ACTION``).  Adding a
pattern to the dashboard is one subclass here (and, for a page nicer than
the generic table, one render function in ``static/app.js``).

``sample()`` runs in the sampler actor's greenlet and may block it on
actor calls; actions run in the web handler's greenlet.  All of it belongs
to the thread that made the actors.
"""
import json
import logging
import time

import gevent

from zactors.actors.errors import ActorError
from zactors.apps.options import client_endpoint

from .render import PREVIEW, show

__all__ = ["Source", "Majordomo", "Zeps", "Clone", "Harmony", "Supervision", "ActionError"]

log = logging.getLogger(__name__)

#: seconds an introspection call may take before the sample says "down"
CALL_TIMEOUT = 2.0


class ActionError(Exception):
    """A request the action refuses: ``status`` (an HTTP status line) and a one-line message."""

    def __init__(self, message, status="400 Bad Request"):
        super().__init__(message)
        self.status = status


class Source:
    """Base class: ``name`` (URL segment), ``title`` (for people); override :meth:`sample`."""

    name = None
    title = None
    #: counter name -> chart label: charted as rates per second
    charted = {}

    def sample(self):
        """A JSON-able dict of the pattern's state; may block (actor calls)."""
        raise NotImplementedError

    def totals(self, sample):
        """Cumulative numbers of ``sample`` keyed like :attr:`charted` (the sampler turns them into rates)."""
        return {}

    def levels(self, sample):
        """Numbers of ``sample`` keyed like :attr:`charted` that are charted as they are (not as rates)."""
        return {}

    def health(self, sample):
        """``("ok" | "warn", one-line summary)`` for the overview."""
        return "ok", ""

    def gauges(self, sample):
        """``[(name, help, {label: value}, value), ...]`` for ``/metrics``."""
        return []

    def counters(self, sample):
        """``{name: value}`` cumulative counters for ``/metrics``."""
        return dict(sample.get("counters", {}))

    def action(self, verb, method, query, body):
        """Run ``/api/NAME/VERB``: a JSON-able result, or an iterator of SSE bytes; ActionError to refuse."""
        raise ActionError("no such action: %s" % verb, "404 Not Found")

    # -- what a client key may see (the dashboard's per-key tokens) ------------------------------------
    # A source whose pattern grants keys nothing shows them nothing: these defaults.

    def visible_to(self, key):
        """True if client ``key`` sees this source at all."""
        return False

    def visible(self, part, key):
        """``part`` (this source's share of a snapshot) as client ``key`` may see it; None: not at all."""
        return None

    def allows(self, key, verb, method, query):
        """True if client ``key`` may run action ``verb``."""
        return False

    def close(self):
        """Release what the source made (not the actor it watches)."""


class Majordomo(Source):
    """A Majordomo broker (:class:`zactors.patterns.majordomo.broker.Broker`)."""

    name = "majordomo"
    title = "Majordomo"
    charted = {"requests": "requests/s", "replies": "replies/s"}

    def __init__(self, broker):
        self.broker = broker

    def sample(self):
        return self.broker.call("INFO", timeout=CALL_TIMEOUT)

    def totals(self, sample):
        c = sample["counters"]
        return {"requests": c.get("requests", 0), "replies": c.get("replies", 0)}

    def health(self, sample):
        waiting = [name for name, s in sample["services"].items() if s["queued"] and not s["workers"]]
        text = "%d services, %d workers, %d queued" % (len(sample["services"]), sample["workers"], sample["queued"])
        if waiting:
            return "warn", text + "; no workers for " + ", ".join(sorted(waiting)[:3])
        return "ok", text

    def gauges(self, sample):
        out = [("majordomo_workers", "Workers registered", {}, sample["workers"]),
               ("majordomo_queued", "Requests waiting for a worker", {}, sample["queued"])]
        for name, s in sample["services"].items():
            out.append(("majordomo_service_queued", "Requests queued per service", {"service": name}, s["queued"]))
            out.append(("majordomo_service_workers", "Workers per service", {"service": name}, s["workers"]))
        return out


class Zeps(Source):
    """A ZEPS broker (:class:`zactors.patterns.zeps.broker.Broker`); action ``tail`` streams a live tail."""

    name = "zeps"
    title = "ZEPS"
    charted = {"published": "published/s", "delivered": "delivered/s"}
    #: live tails open at once; a tail is one subscriber on the broker
    max_tails = 8
    #: streams in a sample at most (the busiest), and subscribers per stream (the most behind)
    max_streams = 200
    max_subscribers = 100
    #: consumer groups in a sample at most (the most behind: lag, then pending)
    max_groups = 200
    #: rows a tail update carries at most
    tail_rows = 50
    #: seconds of quiet before a tail writes a comment: WSGI tells nobody that a page left, so a write
    #: failing is how its tail learns it (and frees its place among ``max_tails``) within two of these
    tail_idle = 0.5

    #: seconds a sample waits for each other pair of the cluster map
    cluster_timeout = 1.0

    def __init__(self, broker, endpoint=None, permissions=None, cluster=None):
        self.broker = broker
        self.endpoint = endpoint or client_endpoint(broker.endpoint)
        #: a ClusterMap (streams over several pairs): the page shows every pair's streams, the tail
        #: reads a stream from the pair that holds it
        self.cluster = cluster
        self.tails = 0
        self.tails_refused = 0   # past max_tails
        #: the broker's per-stream permissions: what a client key may see here (None: every stream)
        self.permissions = permissions if permissions is not None else getattr(broker, "permissions", None)

    def sample(self):
        info = self.broker.call("INFO", timeout=CALL_TIMEOUT)
        streams = info["streams"]
        if self.cluster is not None:
            info["cluster"] = self._cluster(streams)
        # totals of the whole broker, before the streams are cut to the busiest: messages journaled
        # (every stream's last sequence) and delivered (to every subscriber since the broker started)
        info["totals"] = {"published": sum(s["last_seq"] for s in streams.values()),
                          "delivered": info.get("delivered", sum(x["delivered"] for s in streams.values()
                                                                 for x in s["subscribers"]))}
        if len(streams) > self.max_streams:  # keep the busiest: a snapshot goes to every page each tick
            keep = sorted(streams, key=lambda n: -streams[n]["rate"])[:self.max_streams]
            info["streams"] = {n: streams[n] for n in sorted(keep)}
            info["streams_not_shown"] = len(streams) - self.max_streams
        for stream in info["streams"].values():
            subscribers = stream["subscribers"]
            stream["subscriber_count"] = len(subscribers)
            stream["max_lag"] = max((x["lag"] for x in subscribers), default=0)
            stream["delivered"] = sum(x["delivered"] for x in subscribers)
            if len(subscribers) > self.max_subscribers:
                stream["subscribers"] = sorted(subscribers, key=lambda x: -x["lag"])[:self.max_subscribers]
        groups = info.get("groups", [])  # consumer groups: lag, pending, oldest pending age, redeliveries...
        if len(groups) > self.max_groups:
            info["groups"] = sorted(groups, key=lambda x: (-x["lag"], -x["pending"]))[:self.max_groups]
            info["groups_not_shown"] = len(groups) - self.max_groups
        return info

    def _cluster(self, streams):
        """Each pair of the map as its active broker reports it (QUERY); its streams join ``streams``
        (those not this broker's marked ``remote``: the pair's index).  Parks this greenlet."""
        import zmq

        from zactors.patterns.zeps import ZepsError, query
        pairs = []
        for index, pair in enumerate(self.cluster.pairs):
            try:
                report = query(pair, timeout=self.cluster_timeout)
            except (ZepsError, OSError, ValueError, zmq.ZMQError) as exc:
                pairs.append({"pair": pair, "error": str(exc)[:200]})
                continue
            state = (report.get("pair") or {}).get("state", "single")
            pairs.append({"pair": pair, "state": state, "streams": len(report["streams"]), "peers": report["peers"]})
            for name, stream in report["streams"].items():
                if name not in streams:
                    streams[name] = dict(stream, remote=index)
        return pairs

    def totals(self, sample):
        return dict(sample["totals"])

    def health(self, sample):
        streams = sample["streams"]
        behind = [] if getattr(self.broker, "fsync", None) == "never" else \
            [n for n, s in streams.items() if s["synced_seq"] < s["written_seq"] - 100000]
        text = "%d streams, %d peers, ack %s" % (len(streams) + sample.get("streams_not_shown", 0), sample["peers"],
                                                  sample.get("ack", "written"))
        pair = sample.get("pair")
        if pair is not None:
            text += "; %s %s" % (pair["role"], pair["state"])
        if behind:
            return "warn", text + "; journal sync behind on " + ", ".join(sorted(behind)[:3])
        if pair is not None and (pair.get("degraded") or pair["state"] == "active" and pair.get("peer_state") != "passive"):
            return "warn", text + ("; replication degraded" if pair.get("degraded") else "; no passive ready")
        return "ok", text

    def gauges(self, sample):
        out = [("zeps_peers", "Attached peers", {}, sample["peers"]),
               ("zeps_ack_level", "The broker's acknowledgement level (1 on its label): PING-OK and delivery once "
                "written (survives a process crash) or synced (an fsync covered it: survives a power loss)",
                {"level": sample.get("ack", "written")}, 1)]
        for name, s in sample["streams"].items():
            if "remote" in s:   # another pair's: its own node exports it
                continue
            labels = {"stream": name}
            out.append(("zeps_stream_last_seq", "Last sequence journaled", labels, s["last_seq"]))
            out.append(("zeps_stream_bytes", "Journal bytes on disk", labels, s["bytes"]))
            out.append(("zeps_stream_unwritten", "Records appended but not yet written", labels,
                        max(0, s["last_seq"] - s["written_seq"])))
            out.append(("zeps_stream_unsynced", "Records written but not yet fsynced", labels,
                        max(0, s["written_seq"] - s["synced_seq"])))
            out.append(("zeps_stream_subscribers", "Subscribers", labels, s["subscriber_count"]))
            out.append(("zeps_stream_max_lag", "Largest subscriber lag (messages)", labels, s["max_lag"]))
        pair = sample.get("pair")
        if pair is not None:  # a broker of a pair: its state, and how far the passive is behind
            labels = {"role": pair["role"]}
            out.append(("zeps_pair_active", "1 if this broker of a pair is the active one", labels,
                        int(pair["state"] == "active")))
            out.append(("zeps_pair_ready", "1 if this broker holds the active's state (may take over)", labels,
                        int(bool(pair["ready"]))))
            out.append(("zeps_pair_degraded", "1 if ack=replicated is degraded (no passive keeps up)", labels,
                        int(bool(pair.get("degraded")))))
            for name, lag in pair.get("replication_lag", {}).items():
                out.append(("zeps_pair_replication_lag", "Messages at our level not yet confirmed by the passive",
                            {"stream": name}, lag))
            if "group_replication_lag" in pair:
                out.append(("zeps_pair_group_replication_lag",
                            "Consumer-group records not yet confirmed by the passive", labels,
                            pair["group_replication_lag"]))
            last = pair.get("last_failover")
            out.append(("zeps_pair_last_change_time", "When the pair state last changed (unix time)", labels,
                        last["time"] if last else 0))
        for x in sample.get("groups", []):
            labels = {"stream": x["stream"], "group": x["group"]}
            out.append(("zeps_group_lag", "Messages of the stream past the group's cursor", labels, x["lag"]))
            out.append(("zeps_group_pending", "Messages handed out, not yet acknowledged", labels, x["pending"]))
            out.append(("zeps_group_oldest_pending_seconds", "Age of the oldest pending delivery", labels,
                        x["oldest_pending_age"]))
            out.append(("zeps_group_members", "Members", labels, x["members"]))
            out.append(("zeps_group_redelivered", "Deliveries after the first, since the group began", labels,
                        x["redelivered"]))
            out.append(("zeps_group_dead_letters", "Messages sent to the dead-letter stream", labels,
                        x["dead_letters"]))
        return out

    def visible_to(self, key):
        return True

    def visible(self, part, key):
        """The streams ``key`` may use (attach to), as the broker's QUERY shows that key; no journal path."""
        sample = part.get("data")
        if sample is None:
            return part
        sample = dict(sample)
        sample.pop("journal", None)
        if self.permissions is not None:
            may = self.permissions.may_attach
            sample["streams"] = {n: s for n, s in sample["streams"].items() if may(key, n.encode())}
            sample.pop("streams_not_shown", None)
        status, summary = self.health(sample)
        return dict(part, data=sample, status=status, summary=summary)

    def allows(self, key, verb, method, query):
        return verb == "tail" and (self.permissions is None or
                                   self.permissions.allows(key, "subscribe", query.get("stream", "").encode()))

    def action(self, verb, method, query, body):
        if verb != "tail" or method != "GET":
            return super().action(verb, method, query, body)
        stream = query.get("stream", "")
        if not stream:
            raise ActionError("tail needs ?stream=NAME")
        from zactors.patterns.zeps.matcher import PatternError, parse
        try:
            parse(query.get("key", "").encode())   # refused before anything is asked: 400 with RE2's reason
        except PatternError as exc:
            raise ActionError(str(exc)) from None
        if self.tails >= self.max_tails:
            self.tails_refused += 1
            raise ActionError("too many live tails open (%d)" % self.max_tails, "503 Service Unavailable")
        from zactors.patterns.zeps import NoSuchStream, Subscriber, ZepsError
        pattern = query.get("key", "")
        endpoint = self.endpoint
        try:  # a broker of a pair: the tail follows whichever is active (the peer when this one is passive)
            pair = self.broker.call("INFO", timeout=CALL_TIMEOUT).get("pair") or {}
        except ActorError:
            pair = {}
        if self.cluster is not None:   # the stream's pair, by the map
            endpoint = str(self.cluster)
        elif pair.get("peer_endpoint"):
            endpoint = "%s,%s" % (endpoint, client_endpoint(pair["peer_endpoint"]))
        try:  # a Subscriber never creates a stream: a GET creates nothing
            sub = Subscriber(endpoint, stream, pattern, new=True, window=256 << 10, timeout=3.0,
                             name="dashboard-tail")
        except NoSuchStream:
            raise ActionError("no stream %r" % stream[:100], "404 Not Found") from None
        except (PatternError, ZepsError, ValueError, ActorError) as exc:
            raise ActionError("cannot tail %r: %s" % (stream, exc)) from None
        self.tails += 1
        return self._tail(sub)

    def _tail(self, sub):
        """SSE: batches of the newest messages, at most 5 updates a second, a comment every ``tail_idle`` s of quiet."""
        from zactors.patterns.zeps import ZepsError
        rows = self.tail_rows
        try:
            yield b"retry: 3000\n\n"
            while True:
                try:
                    message = sub.get(timeout=self.tail_idle)
                except ZepsError as exc:
                    yield sse("error", {"error": str(exc)})
                    return
                if message is None:
                    if not sub.alive:
                        return
                    yield b": idle\n\n"
                    continue
                batch = [message]
                while sub.pending:
                    batch.append(sub.get(0))
                skipped = max(0, len(batch) - rows)
                yield sse("messages", {"skipped": skipped, "messages": [
                    {"seq": m.seq, "key": show(m.key), "body": show(m.body)} for m in batch[-rows:]]})
                gevent.sleep(0.2)  # pace the page, not the broker: the subscriber's credit holds it
        finally:
            self.tails -= 1
            sub.destroy()


class Clone(Source):
    """A Clone server (:class:`zactors.patterns.clone.server.CloneServer`); actions ``keys``, ``set``, ``delete``.

    Changes go through a Clone client of this process that follows an
    empty subtree, so it holds no copy of the map.
    """

    name = "clone"
    title = "Clone"
    charted = {"updates": "updates/s"}
    #: keys (and subtrees) a listing returns at most
    max_keys = 500
    #: a change not in the server's map after ``confirm`` seconds is sent again, ``attempts`` times in all
    confirm = 1.0
    attempts = 3

    def __init__(self, server, servers=None):
        self.server = server
        self.servers = servers or [tuple(client_endpoint(e) for e in server.endpoints[:3])]
        self._client = None
        self.client()  # now, so that its publisher is connected before the first change

    def sample(self):
        return self.server.call("INFO", timeout=CALL_TIMEOUT)

    def totals(self, sample):
        return {"updates": sample["sequence"]}

    def health(self, sample):
        text = "%s %s, %d keys, sequence %d" % (sample["role"], sample["state"], sample["keys"], sample["sequence"])
        return ("ok" if sample["state"] == "active" or sample["role"] != "alone" else "warn"), text

    def gauges(self, sample):
        return [("clone_keys", "Keys in the map", {}, sample["keys"]),
                ("clone_sequence", "Last update sequence", {}, sample["sequence"]),
                ("clone_active", "1 while this server is active", {}, int(sample["state"] == "active")),
                ("clone_pending", "Client updates pending (passive server)", {}, sample["pending"])]

    def action(self, verb, method, query, body):
        if verb == "keys" and method == "GET":
            return self.keys(query.get("prefix", ""), query.get("limit", "200"))
        if verb in ("set", "delete") and method == "POST":
            key = _field(body, "key")
            if not key or len(key.encode()) > 255:
                raise ActionError("a key is 1-255 bytes")
            value = "" if verb == "delete" else _field(body, "value")
            if verb == "set" and not value:
                raise ActionError("a value may not be empty (that deletes the key: use delete)")
            ttl = body.get("ttl") if verb == "set" else None
            if ttl is not None and not (isinstance(ttl, (int, float)) and 0 < ttl < 1e9):
                raise ActionError("ttl is a number of seconds > 0")
            try:
                confirmed = self._change(key.encode(), value.encode(), ttl)
            except ValueError as exc:
                raise ActionError(str(exc)) from None
            return {"key": key, "deleted": verb == "delete", "confirmed": confirmed}
        return super().action(verb, method, query, body)

    def _change(self, key, value, ttl):
        """Send the KVSET and confirm it from the server's map; True once it shows there.

        A PUB drops what it sends before its connection is up (the slow
        joiner), so an update the server has not applied within
        ``confirm`` seconds is sent again, at most ``attempts`` times (setting
        the same value twice changes nothing but the sequence).
        """
        client = self.client()
        for _ in range(self.attempts):
            client.set(key, value, ttl=ttl)
            deadline = time.monotonic() + self.confirm
            while time.monotonic() < deadline:
                current = self.server.call("GET", key, timeout=CALL_TIMEOUT)
                if current == (value or None):
                    return True
                gevent.sleep(0.02)
        return False

    def keys(self, prefix, limit):
        """One level of the map under ``prefix``: keys (value preview, ttl left) and subtrees, from one KEYS call."""
        try:
            limit = max(1, min(int(limit), self.max_keys))
        except ValueError:
            raise ActionError("limit is a number") from None
        raw = prefix.encode("utf-8", "surrogateescape")
        listing = self.server.call("KEYS", raw, limit, PREVIEW, b"/", timeout=CALL_TIMEOUT)
        return {"prefix": prefix, "truncated": listing["truncated"],
                "keys": [{"key": show(key), "raw": key.hex(), "value": show(value, size=size), "ttl": ttl}
                         for key, value, size, ttl in listing["keys"]],
                "subtrees": [{"prefix": show(s), "raw": s.hex(), "keys": n} for s, n in listing["subtrees"]]}

    def client(self):
        if self._client is None or not self._client.alive:
            from zactors.patterns.clone.client import Clone as CloneClient
            self._client = CloneClient(self.servers, subtree=b"/$dashboard/", name="dashboard-clone")
            # synced means connected: a KVSET sent before its PUB connects would be lost
            if not self._client.wait_synced(5):
                log.warning("the dashboard's Clone client has no snapshot from %s yet", self.servers[0][0])
        return self._client

    def close(self):
        if self._client is not None:
            self._client.destroy()
            self._client = None


class Harmony(Source):
    """A Harmony node (:class:`zactors.patterns.harmony.node.Node`): peers, groups, headers, evasive peers.

    Watches the node's events through a ``"drop"`` subscription, so it never
    holds the node back nor takes events from the application.
    """

    name = "harmony"
    title = "Harmony"
    charted = {"peers": "peers"}
    #: peers described in a sample at most
    max_peers = 200

    def __init__(self, node):
        self.node = node
        self.evasive = {}
        self._events = node.actor.subscribe(size=1000, policy="drop")
        self._watcher = gevent.spawn(self._watch)

    def _watch(self):
        while True:
            for event in self._events:
                name, args = event.name, event.args
                if name in ("EVASIVE", "SILENT"):
                    self.evasive[args[0]] = name.lower()
                elif args and isinstance(args[0], str):
                    self.evasive.pop(args[0], None)
            # that actor ended: a supervised node (``node.actor`` a proxy) has a new one
            self.evasive.clear()
            try:
                self._events = self.node.actor.subscribe(size=1000, policy="drop")
            except (ActorError, AttributeError):
                return

    def sample(self):
        actor = self.node.actor
        info = actor.call("INFO", timeout=CALL_TIMEOUT)
        ids = actor.call("PEERS", timeout=CALL_TIMEOUT)
        peers = []
        for peer_id in sorted(ids)[:self.max_peers]:
            peer = actor.call("PEER", peer_id, timeout=CALL_TIMEOUT)
            if peer is not None:
                peer["state"] = self.evasive.get(peer_id, "alive")
                peer["headers"] = {k: v for k, v in list(peer["headers"].items())[:32]}
                peers.append(peer)
        info["own_groups"] = actor.call("OWN_GROUPS", timeout=CALL_TIMEOUT)
        info["groups"] = actor.call("PEER_GROUPS", timeout=CALL_TIMEOUT)
        info["peer_count"] = len(ids)
        info["peers"] = peers
        info["evasive"] = sum(1 for p in peers if p["state"] != "alive")
        info["counters"] = actor.call("$STATS", timeout=CALL_TIMEOUT)
        return info

    def levels(self, sample):
        return {"peers": sample["peer_count"]}

    def health(self, sample):
        text = "%d peers, %d evasive, groups: %s" % (sample["peer_count"], sample["evasive"],
                                                       ", ".join(sample["own_groups"][:5]) or "none")
        return ("warn" if sample["evasive"] else "ok"), text

    def gauges(self, sample):
        return [("harmony_peers", "Peers that said HELLO", {}, sample["peer_count"]),
                ("harmony_evasive_peers", "Peers silent past the evasive deadline", {}, sample["evasive"])]

    def close(self):
        self._events.close()
        self._watcher.kill(block=False)


def _field(body, name):
    value = body.get(name, "")
    if not isinstance(value, str):
        raise ActionError("%s must be a string" % name)
    return value


def sse(event, data):
    """One Server-Sent Event: ``event`` name and ``data`` (JSON-encoded)."""
    return b"event: %s\ndata: %s\n\n" % (event.encode(), json.dumps(data, separators=(",", ":")).encode())


class Supervision(Source):
    """A supervision tree (:class:`zactors.actors.supervisor.Supervisor`): its parts, restarts, last deaths.

    Action ``POST kill`` ``{"part": NAME}`` (a debug command): the part's
    actor dies as a bug would kill it, and the tree restarts it.
    """

    name = "supervisor"
    title = "Supervision"
    charted = {"restarts": "restarts/s"}

    def __init__(self, tree):
        self.tree = tree

    def sample(self):
        if not self.tree.alive:
            raise ActorError("the supervision tree has stopped")
        return self.tree.report()  # not through its pipe: the tree may be starting this dashboard

    def totals(self, sample):
        return {"restarts": sample["counters"].get("restarts", 0)}

    def health(self, sample):
        children = sample["children"]
        down = [c["name"] for c in children if not c["running"] and not c.get("starting")]
        text = "%d parts, %d restarts" % (len(children), sample["counters"].get("restarts", 0))
        died = [c for c in children if c["last_reason"]]
        if died:
            text += "; last death: %s (%s)" % (died[-1]["name"], died[-1]["last_reason"][:120])
        if down:
            return "warn", text + "; restarting " + ", ".join(down)
        return "ok", text

    def gauges(self, sample):
        out = []
        for child in sample["children"]:
            labels = {"part": child["name"]}
            out.append(("supervisor_part_running", "1 while the part's actor runs", labels, int(child["running"])))
            out.append(("supervisor_part_restarts", "Restarts of the part since the node started", labels,
                        child["restarts"]))
        return out

    def action(self, verb, method, query, body):
        if verb == "kill" and method == "POST":
            from zactors.actors.testkit import crash
            part = _field(body, "part")
            actor = self.tree.child(part)
            if actor is None:
                raise ActionError("no part %r is running (parts: %s)"
                                  % (part, ", ".join(self.tree.names.names())), "404 Not Found")
            crash(actor, "killed from the dashboard")
            return {"part": part, "killed": True}
        return super().action(verb, method, query, body)
