"""``zactors up``: a whole zactors node in one process, with its dashboard.

::

    node = Up(config)          # config: the dict of DEFAULTS' shape (or load_config(path))
    node.start()               # returns once every part listens; raises (and stops the rest) if one cannot
    node.listening()           # [(part, address), ...]
    node.summary()             # one line: what it served so far
    node.stop()                # dashboard first, brokers last; the ZEPS journal is synced

One node per data directory: ``start`` takes an exclusive ``flock`` on
``<data>/node.lock`` (which names the running node: pid, start time, where
it listens) and refuses with a :class:`ConfigError` naming the node that
holds it.  The kernel drops the lock when the process ends, however it ends.

Parts (each may be turned off, ``enabled = false``): a Majordomo broker, a
ZEPS broker journaling under ``<data>/zeps``, a Clone server (ports P..P+2, or
three free ones for port 0; clients need only the first)
journaling its map under ``<data>/clone``, a Harmony node (beacons off unless ``beacon = true``; ``endpoints`` to
connect to known peers), and the dashboard (:mod:`zactors.apps.dashboard`)
served by gevent's ``pywsgi``.  Everything binds 127.0.0.1 by default; a
dashboard bound anywhere else needs a token (generated if none is given).

Config file (TOML), every key optional::

    data = "./zactors-data"
    [node]
    intensity = 5              # more than 5 restarts of parts ...
    period = 10.0              # ... within 10 s: the node stops, failed
    [majordomo]
    bind = "tcp://127.0.0.1:5555"
    [zeps]
    bind = "tcp://127.0.0.1:5570"
    fsync = "100ms"            # "never", "batch" or a period
    ack = "written"            # PING-OK and delivery once "written" (survives a crash) or "synced" (power loss)
    # a broker pair (optional): this node's broker is the primary or the backup; "replicated" needs one
    # role = "primary"
    # peer = "tcp://10.0.0.2:5571"       # the other broker's pair_bind
    # pair_bind = "tcp://*:5571"         # a fixed port: the peer must find us after a restart
    # on_passive_lost = "wait"           # ack = "replicated": "wait" (flush fails) or "degrade"
    # streams over several pairs (optional): the cluster map, one entry per pair (or single broker);
    # a stable hash of its name places each stream on one pair; the dashboard shows and tails them all.
    # Static: no rebalancing (a pair added moves the streams whose hash lands elsewhere): size it up front
    # cluster = ["tcp://a1:5570,tcp://b1:5570", "tcp://a2:5570,tcp://b2:5570"]
    [clone]
    host = "127.0.0.1"
    port = 5556                # "*" or 0: any free ports
    [harmony]
    name = "node-1"
    beacon = false
    endpoints = ["tcp://10.0.0.2:49152"]
    groups = ["ops"]
    tcp_port = 49160           # peers reach us here (0: any free one, kept across restarts)
    [dashboard]
    bind = "127.0.0.1:8765"    # port 0 or *: any free one
    token = "..."              # required off loopback; generated if absent
    interval = 1.0

Every part runs under one
:class:`~zactors.actors.supervisor.Supervisor` (``node.tree``), the
dashboard too (a :class:`DashboardPart`: its server and sampler; it shows
the tree it belongs to): a part whose
actor dies is restarted on the very endpoints it had (a ZEPS broker and the
Clone server recover from their journals; clients reconnect by
themselves).  More than ``[node] intensity`` restarts in ``period`` seconds and
the tree gives up: ``node.failed`` is set and ``node.failure`` says why in
one line (``zactors up`` then exits non-zero).  ``node.broker``,
``node.zeps``, ``node.clone`` and ``node.dashboard`` are the incarnations running now.

All of it runs in the calling thread's gevent hub; the methods are not
thread-safe.
"""
import copy
import datetime
import fcntl
import json
import logging
import os
import secrets
import socket
import tomllib
from types import SimpleNamespace

import gevent
from gevent.event import Event

from zactors.actors import Actor
from zactors.actors.pipe import DIED, EXIT
from zactors.apps.options import UsageError

__all__ = ["Up", "DashboardPart", "DataLock", "DEFAULTS", "load_config", "merge", "parse_period", "parse_ack"]

log = logging.getLogger(__name__)

PARTS = ("majordomo", "zeps", "clone", "harmony", "dashboard")
#: the sections of a config: the node's own settings, then one per part
SECTIONS = ("node",) + PARTS

DEFAULTS = {
    "data": "./zactors-data",
    "node": {"intensity": 5, "period": 10.0},  # the supervision tree's restart intensity
    "majordomo": {"enabled": True, "bind": "tcp://127.0.0.1:5555"},
    "zeps": {"enabled": True, "bind": "tcp://127.0.0.1:5570", "fsync": "100ms", "ack": "written",
             "role": None, "peer": None, "pair_bind": None, "replica_ack": "written", "on_passive_lost": "wait",
             "passive_timeout": 5.0, "cluster": None},
    "clone": {"enabled": True, "host": "127.0.0.1", "port": 5556},
    "harmony": {"enabled": True, "name": None, "beacon": False, "interface": None, "endpoints": [], "groups": [],
                "host": "127.0.0.1", "tcp_port": 0},
    "dashboard": {"enabled": True, "bind": "127.0.0.1:8765", "token": None, "interval": 1.0,
                  "max_clients": None},
}

_KEYS = {section: set(DEFAULTS[section]) for section in SECTIONS}


class ConfigError(UsageError):
    """A config file or option that makes no sense: one line saying which and why (exit status 2)."""


def load_config(path):
    """The TOML file at ``path`` merged over :data:`DEFAULTS` (ConfigError with the reason)."""
    try:
        with open(path, "rb") as f:
            given = tomllib.load(f)
    except OSError as exc:
        raise ConfigError("cannot read the config file %s: %s" % (path, exc.strerror or exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("%s is not valid TOML: %s" % (path, exc)) from None
    return merge(DEFAULTS, given, path)


def merge(config, given, where="the options"):
    """``config`` updated with ``given`` (same shape), checking the names."""
    out = copy.deepcopy(config)
    for key, value in given.items():
        if key == "data":
            if not isinstance(value, str):
                raise ConfigError("%s: data is a directory path" % where)
            out["data"] = value
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError("%s: [%s] is a table" % (where, key))
            unknown = set(value) - _KEYS[key]
            if unknown:
                raise ConfigError("%s: [%s] has no setting %s (known: %s)" % (
                    where, key, ", ".join(sorted(unknown)), ", ".join(sorted(_KEYS[key]))))
            if key == "node":
                _check_intensity(value, where)
            out[key].update(value)
        else:
            raise ConfigError("%s: unknown section %r (known: data, %s)" % (where, key, ", ".join(SECTIONS)))
    return out


def _check_intensity(node, where):
    """``[node] intensity`` is a whole number >= 0, ``period`` a number of seconds > 0."""
    intensity = node.get("intensity", 0)
    if type(intensity) is not int or intensity < 0:
        raise ConfigError("%s: [node] intensity is a whole number of restarts >= 0, not %r" % (where, intensity))
    period = node.get("period", 1.0)
    if type(period) not in (int, float) or not 0 < period < float("inf"):
        raise ConfigError("%s: [node] period is a number of seconds > 0, not %r" % (where, period))


def parse_period(text):
    """A journal's fsync policy from the config: as :func:`zactors.apps.options.fsync_policy`."""
    import argparse

    from zactors.apps import options
    try:
        return options.fsync_policy(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError("fsync: %s" % exc) from None


def parse_ack(text):
    """ZEPS acknowledgement level: "written", "synced" or "replicated" (a pair)."""
    if text not in ("written", "synced", "replicated"):
        raise ConfigError("ack is 'written', 'synced' or 'replicated', not %r" % (text,))
    return text


def parse_cluster(zeps):
    """``[zeps] cluster``: the cluster map (:class:`~zactors.patterns.zeps.cluster.ClusterMap`), or None."""
    from zactors.patterns.zeps.cluster import ClusterMap
    pairs = zeps.get("cluster")
    if pairs is None:
        return None
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, str) and p.strip() for p in pairs) \
            or any(";" in p for p in pairs):
        raise ConfigError("[zeps] cluster is a list of pairs, each \"tcp://a:5570,tcp://b:5570\" (or one "
                          "broker), not %r" % (pairs,))
    return ClusterMap(pairs)


def parse_pair(zeps):
    """The ZEPS broker's pair options from ``[zeps]`` (role, peer, pair_bind, ...): {} without a role."""
    role = zeps.get("role")
    if role is None:
        if zeps.get("peer") or zeps.get("pair_bind") or zeps["ack"] == "replicated":
            raise ConfigError("[zeps] peer, pair_bind and ack = \"replicated\" need role = \"primary\" or \"backup\"")
        return {}
    if role not in ("primary", "backup"):
        raise ConfigError("[zeps] role is 'primary' or 'backup', not %r" % (role,))
    if not zeps.get("peer") or not zeps.get("pair_bind"):
        raise ConfigError("[zeps] role needs peer (the other broker's pair_bind) and pair_bind")
    if zeps["on_passive_lost"] not in ("wait", "degrade"):
        raise ConfigError("[zeps] on_passive_lost is 'wait' or 'degrade', not %r" % (zeps["on_passive_lost"],))
    if zeps["replica_ack"] not in ("written", "synced"):
        raise ConfigError("[zeps] replica_ack is 'written' or 'synced', not %r" % (zeps["replica_ack"],))
    timeout = zeps["passive_timeout"]
    if type(timeout) not in (int, float) or not timeout > 0:
        raise ConfigError("[zeps] passive_timeout is a number of seconds > 0, not %r" % (timeout,))
    return dict(role=role, peer=zeps["peer"], pair_endpoint=zeps["pair_bind"], replica_ack=zeps["replica_ack"],
                on_passive_lost=zeps["on_passive_lost"], passive_timeout=float(timeout))


def split_host_port(text):
    """``HOST:PORT`` (``[v6]:PORT``) -> (host, port); port 0 or ``*`` is any free one (0)."""
    host, sep, port = str(text).rpartition(":")
    host = host.strip("[]")
    port = "0" if port == "*" else port
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("the dashboard binds HOST:PORT, e.g. 127.0.0.1:8765 (port 0 or *: any free one), not %r" % text)
    return host, int(port)


def _same_endpoints(make, *endpoints):
    """A factory whose later incarnations bind the endpoints the first one got (a ``*`` port stays put)."""
    bound = list(endpoints)

    def factory():
        from zactors.apps import options
        import zmq
        try:
            actor = make(*bound)
        except zmq.ZMQError as exc:
            raise options.bind_error(" ".join(str(e) for e in bound), exc, "port 0 / * for any free one") from None
        bound[:] = actor.endpoints[:3] if hasattr(actor, "endpoints") else [actor.endpoint]
        return actor
    return factory


class DataLock:
    """An exclusive ``flock`` on ``DIRECTORY/node.lock``, whose text says which node holds it.

    :meth:`acquire` raises :class:`ConfigError` naming the holder; the lock
    ends with :meth:`release` or with the process.  Blocks on small file I/O.
    """

    NAME = "node.lock"

    def __init__(self, directory):
        self.path = os.path.join(directory, self.NAME)
        self._fd = None
        self._started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    def acquire(self):
        directory = os.path.dirname(self.path)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError("cannot use the data directory %s: %s" % (directory, exc.strerror or exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._holder(fd)
            os.close(fd)
            raise ConfigError("the data directory %s is in use by %s: stop that node first, or give another "
                              "--data" % (directory, holder)) from None
        self._fd = fd
        self.describe([])

    @staticmethod
    def _holder(fd):
        try:
            node = json.loads(os.pread(fd, 65536, 0) or b"{}")
            where = dict(node.get("listening", []))
        except (OSError, ValueError, TypeError):
            node, where = {}, {}
        if not node.get("pid"):
            return "another zactors node (starting now)"
        text = "the zactors node with pid %s on %s (started %s" % (node["pid"], node.get("host", "?"),
                                                                   node.get("started", "?"))
        shown = where.get("dashboard") or where.get("majordomo") or where.get("zeps")
        return text + ("; %s)" % shown.split("?")[0] if shown else ")")

    def describe(self, listening):
        """Write who holds the lock (pid, host, start time, ``listening``) into the lock file."""
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": self._started,
                           "listening": listening}).encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text + b"\n", 0)
        except OSError as exc:  # only the description is lost: the lock holds
            log.warning("cannot write %s: %s", self.path, exc)

    def release(self):
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


class DashboardPart(Actor):
    """The dashboard as a part of the node: its WSGI server and sampler, living and dying as one actor.

    ``DashboardPart(make_sources, host, port, token=..., interval=..., max_clients=...)`` serves
    :class:`~zactors.apps.dashboard.Dashboard` over ``make_sources()`` on ``(host, port)`` (0: any free
    port; ``address`` is the one bound) and raises ``OSError`` if it cannot bind.  It dies (``$DIED``)
    when its sampler does, so that the supervisor restarts the whole of it; stopping it stops the
    server (in-flight requests get 1 s) and then the sampler.  No commands of its own.
    """

    #: seconds given to in-flight requests when it stops
    grace = 1.0
    term_timeout = grace + 4.0

    def __init__(self, make_sources, host, port, **options):
        self.name = "dashboard"
        self._make_sources = make_sources
        self._where = (host, port)
        self._options = options
        self.dashboard = self.server = None
        self.address = None
        self._stopping = False

    def setup(self):
        from zactors.apps.dashboard import Dashboard
        from zactors.apps.dashboard.app import server
        self.dashboard = Dashboard(self._make_sources(), **self._options)
        self.dashboard.sampler.link(self._on_sampler_event)
        # at most a budget of connections (the rest wait in the kernel's backlog), idle ones closed
        self.server = server(self.dashboard, self._where, error_log=log)
        self.server.start()
        self.address = self.server.address[:2]

    def _on_sampler_event(self, event):
        """In the hub: the sampler's end is this part's end (unless it is stopping it)."""
        if event.name in (DIED, EXIT) and not self._stopping:
            self.post(self._sampler_ended, event)

    def _sampler_ended(self, event):
        if not self._stopping:
            raise RuntimeError("the dashboard's sampler ended: %s" % (event.args[0] if event.args else event.name))

    def teardown(self):
        self._stopping = True
        if self.server is not None:
            self.server.stop(timeout=self.grace)
        if self.dashboard is not None:
            self.dashboard.close()


class Up:
    """The node: starts the parts of ``config`` in order (under one supervisor) and stops them in reverse."""

    def __init__(self, config):
        self.config = config
        self.tree = self.harmony = None
        self._harmony_uuid = None  # the Harmony part's identity, kept across its restarts
        self.token = None
        self.url = None
        self.lock = None
        self._greenlets = []
        #: set when the supervision tree gave up; ``failure`` is the one-line reason
        self.failed = Event()
        self.failure = None

    broker = property(lambda self: self._part("majordomo"), doc="The Majordomo broker running now (or None).")
    zeps = property(lambda self: self._part("zeps"), doc="The ZEPS broker running now (or None).")
    clone = property(lambda self: self._part("clone"), doc="The Clone server running now (or None).")
    dashboard = property(lambda self: getattr(self._part("dashboard"), "dashboard", None),
                         doc="The dashboard's WSGI app running now (or None).")
    server = property(lambda self: getattr(self._part("dashboard"), "server", None),
                      doc="The dashboard's WSGI server running now (or None).")

    def _part(self, name):
        return None if self.tree is None else self.tree.child(name)

    def _on_tree_event(self, event):
        """In the hub: log the parts' deaths; the tree's own death fails the node."""
        if event.name == "CHILD_DIED":
            log.warning("part %s died, restarting it: %s", *event.args)
        elif event.name in ("$DIED", "$EXIT") and self.tree is not None:
            reason = event.args[0] if event.args else "the supervisor stopped"
            self.failure = "the node stopped: %s" % " ".join(str(reason).split())
            self.failed.set()

    # -- lifecycle ----------------------------------------------------------------
    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        from zactors.actors.supervisor import ChildSpec, Supervisor
        cfg = self.config
        parts = []
        if cfg["zeps"]["enabled"] or cfg["clone"]["enabled"]:  # the parts that keep data there
            self.lock = DataLock(cfg["data"])
            self.lock.acquire()
        if cfg["majordomo"]["enabled"]:
            from zactors.patterns.majordomo.broker import Broker
            parts.append(ChildSpec("majordomo", _same_endpoints(lambda endpoint: Broker(endpoint, name="majordomo"),
                                                                cfg["majordomo"]["bind"])))
        if cfg["zeps"]["enabled"]:
            from zactors.patterns.zeps.broker import Broker as ZepsBroker
            zeps_dir = self._data_dir("zeps")
            fsync = parse_period(cfg["zeps"]["fsync"])
            ack = parse_ack(cfg["zeps"]["ack"])
            pair = parse_pair(cfg["zeps"])
            parse_cluster(cfg["zeps"])
            parts.append(ChildSpec("zeps", _same_endpoints(
                lambda endpoint: ZepsBroker(zeps_dir, endpoint, fsync=fsync, ack=ack, name="zeps", **pair),
                cfg["zeps"]["bind"])))
        if cfg["clone"]["enabled"]:
            from zactors.patterns.clone.server import CloneServer, endpoints
            host = cfg["clone"]["host"]
            port = cfg["clone"]["port"]
            port = None if port in ("*", 0, "0") else int(port)
            clone_dir = self._data_dir("clone")
            first = endpoints(host, port)[:3] if port is not None else ("tcp://%s:*" % host,) * 3
            parts.append(ChildSpec("clone", _same_endpoints(
                lambda snapshot, publisher, collector: CloneServer(
                    host=host, snapshot=snapshot, publisher=publisher, collector=collector, persist=clone_dir,
                    name="clone"), *first)))
        if cfg["harmony"]["enabled"]:
            parts.append(ChildSpec("harmony", self._start_harmony))
        if parts or cfg["dashboard"]["enabled"]:
            self.tree = Supervisor(parts, intensity=cfg["node"]["intensity"], period=float(cfg["node"]["period"]),
                                   name="up")
            self.tree.link(self._on_tree_event)
        if cfg["dashboard"]["enabled"]:
            self._start_dashboard(cfg["dashboard"])
        if self.lock is not None:
            self.lock.describe(self.listening())

    def _start_harmony(self):
        """The Harmony part: a node in its groups with the first one's identity (UUID), on the endpoint
        the first one got (``tcp_port`` 0: any free one, kept across restarts): peers see the same
        peer leave and come back."""
        from zactors.patterns.harmony.node import Node
        h = self.config["harmony"]
        node = Node(h["name"], beacon=h["beacon"], interface=h["interface"], endpoints=h["endpoints"],
                    host=None if h["beacon"] else h["host"], tcp_port=int(h["tcp_port"] or 0) or None,
                    uuid=self._harmony_uuid).start()
        h["tcp_port"] = int(node.endpoint.rsplit(":", 1)[1])
        self._harmony_uuid = node.uuid
        for group in h["groups"]:
            node.join(group)
        self.harmony = node
        self._greenlets = [g for g in self._greenlets if not g.dead] + [gevent.spawn(self._follow_harmony, node)]
        return node.actor

    def _data_dir(self, part):
        path = os.path.join(self.config["data"], part)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)    # journals hold message bodies: the owner's only
        except OSError as exc:
            raise ConfigError("cannot make the data directory %s: %s" % (path, exc.strerror)) from None
        return path

    def _start_dashboard(self, d):
        """The dashboard part: the tree's last child (stopped first), added once the tree exists, which it shows."""
        from zactors.actors.supervisor import ChildSpec
        from zactors.apps import options
        from zactors.apps.dashboard import is_loopback_bind
        host, port = split_host_port(d["bind"])
        token = d["token"]
        if token is None and not is_loopback_bind(host):
            token = secrets.token_urlsafe(24)
        bound = [port]

        def factory():
            try:
                clients = None if d["max_clients"] is None else int(d["max_clients"])  # None: the fd budget's
                part = DashboardPart(self._dashboard_sources, host, bound[0], token=token,
                                     interval=float(d["interval"]), max_clients=clients)
            except OSError as exc:
                raise options.bind_error("%s:%d" % (host, bound[0]), exc, "port 0 or * for any free one") from None
            bound[0] = part.address[1]  # a restart serves the same URL
            return part
        self.token = token
        part = self.tree.start_child(ChildSpec("dashboard", factory))
        bound_host, bound_port = part.address
        shown = "[%s]" % bound_host if ":" in bound_host else bound_host
        self.url = "http://%s:%d/" % (shown, bound_port)

    def _dashboard_sources(self):
        """The dashboard's sources: proxies, so that each follows its part across restarts."""
        from zactors.apps.dashboard import sources
        tree = self.tree
        parts = []
        if self.config["majordomo"]["enabled"]:
            parts.append(sources.Majordomo(tree.proxy("majordomo")))
        if self.config["zeps"]["enabled"]:
            parts.append(sources.Zeps(tree.proxy("zeps"), cluster=parse_cluster(self.config["zeps"])))
        if self.config["clone"]["enabled"]:
            parts.append(sources.Clone(tree.proxy("clone")))
        if self.config["harmony"]["enabled"]:  # the node running now, whichever it is
            parts.append(sources.Harmony(SimpleNamespace(actor=tree.proxy("harmony"))))
        parts.append(sources.Supervision(tree))
        return parts

    @staticmethod
    def _follow_harmony(node):
        """The node's own events: logged, so that its event window never fills."""
        for event in node.events():
            if event.type in ("ENTER", "EXIT", "EVASIVE"):
                log.info("harmony: %s %s (%s)", event.type, event.name, event.peer)

    def listening(self):
        """``[(part, address), ...]`` of what listens now."""
        out = []
        if self.broker is not None:
            out.append(("majordomo", self.broker.endpoint))
        if self.zeps is not None:
            out.append(("zeps", "%s  journal %s" % (self.zeps.endpoint, self.zeps.journal_dir)))
        if self.clone is not None:
            out.append(("clone", " ".join(self.clone.endpoints[:3])))
        if self.harmony is not None:
            out.append(("harmony", "%s  uuid %s" % (self.harmony.endpoint, self.harmony.id)))
        if self.url is not None:
            out.append(("dashboard", self.url + ("?token=" + self.token if self.token else "")))
        return out

    def summary(self):
        """One line of what the node served so far, part by part (asks each part; blocks up to 5 s each)."""
        parts = []

        def ask(name, actor, say):
            if actor is None:
                return
            try:
                parts.append(say(actor.call("INFO", timeout=5)))
            except Exception as exc:  # a part that died still leaves the others' figures
                parts.append("%s: no answer (%s)" % (name, exc))

        def plural(n, word, words=None):
            return "%d %s" % (n, word if n == 1 else words or word + "s")

        def majordomo(info):
            c = info.get("counters", {})
            return "majordomo %s, %s, %s" % (plural(c.get("requests", 0), "request"),
                                              plural(c.get("replies", 0), "reply", "replies"),
                                              plural(c.get("workers_ready", 0), "worker"))

        def zeps(info):
            c, streams = info.get("counters", {}), info.get("streams", {})
            published = sum(s.get("last_seq", 0) for s in streams.values())  # as the dashboard's totals
            return "zeps %s, %s published, %s" % (plural(len(streams), "stream"), plural(published, "message"),
                                                   plural(c.get("attached", 0), "client"))

        def clone(info):
            c = info.get("counters", {})
            return "clone %s, %s, %s" % (plural(info.get("keys", 0), "key"), plural(c.get("updates", 0), "update"),
                                         plural(c.get("snapshots", 0), "snapshot"))

        ask("majordomo", self.broker, majordomo)
        ask("zeps", self.zeps, zeps)
        ask("clone", self.clone, clone)
        if self.harmony is not None:
            try:
                parts.append("harmony %s" % plural(len(self.harmony.peers(timeout=5)), "peer"))
            except Exception as exc:
                parts.append("harmony: no answer (%s)" % exc)
        if self.dashboard is not None:
            parts.append("dashboard %s" % self.url)
        return "; ".join(parts) or "nothing"

    def stop(self):
        """Stop everything that started (idempotent): the dashboard first, the brokers last."""
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._greenlets = []
        tree, self.tree = self.tree, None  # first: its $EXIT is no failure
        if tree is not None:
            tree.destroy()  # the dashboard, Harmony, the Clone server, the ZEPS broker, then the Majordomo broker
        self.harmony = None
        if self.lock is not None:  # last: the data is at rest
            self.lock.release()
            self.lock = None
