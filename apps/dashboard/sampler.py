"""The one sampler of a dashboard: asks every source for its state each ``interval``.

:class:`Sampler` is an actor.  Each tick it samples every source (blocking
only its own greenlet on the actors' ``INFO`` calls), turns counters into
rates, keeps a bounded history for the charts, encodes the snapshot to JSON
once, and emits it as a ``SNAPSHOT`` event.  A source's part holds its
``totals`` (cumulative, e.g. messages published) and ``now`` (their rates,
and its levels).  Its event policy is
``"drop"``: readers (one per Server-Sent-Events client) take it from their
own ``subscribe(size, policy="drop")`` queue, so a slow, stuck or thousandth
client loses snapshots instead of holding anything back, and the brokers are
asked once per tick whatever the number of pages open.

Commands: ``LATEST`` (reply: the last snapshot, JSON bytes), ``HISTORY``
(reply: ``{"times": [...], "series": {source: {name: [...]}}}``).  The handle
is an actor handle: many greenlets of its thread, not other OS threads.
"""
import json
import logging
import time
from collections import deque

from zactors.actors import Actor, command

__all__ = ["Sampler"]

log = logging.getLogger(__name__)

SNAPSHOT = "SNAPSHOT"


class Sampler(Actor):
    """Samples ``sources`` every ``interval`` seconds; keeps ``history`` points per chart."""

    events_policy = "drop"
    events_size = 16

    def __init__(self, sources, interval=1.0, history=180, name="dashboard-sampler"):
        if interval <= 0 or history < 2:
            raise ValueError("need interval > 0 and history >= 2")
        self.sources = list(sources)
        self.interval = interval
        self.times = deque(maxlen=history)
        self.series = {s.name: {key: deque(maxlen=history) for key in s.charted} for s in self.sources}
        self.previous = {}  # source name -> (time, totals)
        self.latest = None  # the last snapshot as a dict
        self.encoded = b"null"
        self.ticks = 0
        self.name = name

    def setup(self):
        self._tick()
        self.call_every(self.interval, self._tick)

    def _tick(self):
        now = time.time()
        parts = {}
        self.times.append(round(now, 3))
        for source in self.sources:
            parts[source.name] = part = {"title": source.title or source.name, "charted": source.charted}
            try:
                sample = source.sample()
                status, summary = source.health(sample)
                values = dict(source.levels(sample))
                totals = source.totals(sample)
            except Exception as exc:  # the source's actor is gone, slow, or answered nonsense
                log.debug("%s: sampling %s failed: %s", self.name, source.name, exc)
                sample, status, summary, values, totals = None, "down", "%s: %s" % (type(exc).__name__, exc), {}, {}
            before = self.previous.get(source.name)
            if totals:
                for key in totals:
                    values[key] = 0.0
                if before is not None and now > before[0]:
                    dt = now - before[0]
                    for key, total in totals.items():
                        values[key] = round(max(0.0, (total - before[1].get(key, total)) / dt), 1)
                self.previous[source.name] = (now, totals)
            for key, points in self.series[source.name].items():
                points.append(values.get(key, 0))
            part.update(status=status, summary=summary, now=values, totals=totals, data=sample)
        self.latest = {"time": now, "interval": self.interval, "sources": parts}
        self.encoded = json.dumps(self.latest, separators=(",", ":"), default=_jsonable).encode()
        self.ticks += 1
        self.emit(SNAPSHOT, self.encoded)

    @command("LATEST", reply=True)
    def latest_(self):
        return self.encoded

    @command("HISTORY", reply=True)
    def history(self):
        return {"times": list(self.times),
                "series": {name: {key: list(points) for key, points in series.items()}
                           for name, series in self.series.items()}}


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
