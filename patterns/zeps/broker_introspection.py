"""The ZEPS broker's introspection: INFO (and QUERY, its network face) and the rate samples (a mixin of
:class:`.broker.Broker`).  Runs in the broker's loop only."""
from __future__ import annotations

import time

from .broker_peers import _REPLAY

__all__: list[str] = []

_monotonic = time.monotonic


class Introspection:
    """What the broker shows of itself: streams, subscribers, counters, budgets."""

    def _sample(self):
        now = _monotonic()
        for stream in self._streams.values():
            samples = stream.samples
            samples.append((now, stream.journal.last_seq))
            if len(samples) > 11:
                del samples[0]

    def _multicast_heads(self):
        for stream in self._streams.values():
            if stream.delivered_seq:
                self._multicast.head(stream.name, stream.delivered_seq)

    def _info(self, may_see):
        """:meth:`info`; ``may_see(stream name)`` (None: all) filters the streams, and hides the journal path."""
        streams = {}
        for stream in self._streams.values():
            if may_see is not None and not may_see(stream.name):
                continue
            journal = stream.journal
            (t0, s0), (t1, s1) = stream.samples[0], (_monotonic(), journal.last_seq)
            stats = journal.stats()
            subscribers = []
            for peer in stream.peers.values():
                if peer.filter is None:
                    continue
                lag = journal.last_seq - (peer.next - 1) if peer.mode is _REPLAY else \
                    self.router.backlog_of(peer.identity)
                patterns = [x.decode("utf-8", "replace") for x in peer.filter.patterns]
                subscribers.append({"peer": peer.identity.hex(), "patterns": patterns, "mode": peer.mode,
                                    "lag": lag, "credit": peer.credit, "delivered": peer.delivered})
            streams[stream.name.decode()] = {
                "first_seq": journal.first_seq, "last_seq": journal.last_seq,
                "written_seq": journal.written_seq, "synced_seq": journal.synced_seq,
                "rate": round((s1 - s0) / (t1 - t0), 1) if t1 > t0 else 0.0,
                "bytes": stats["disk_bytes"],
                "peers": len(stream.peers), "subscribers": subscribers, "producers": stats["producers"],
                "open": True,
            }
        for name, summary in self._closed_streams.items():  # closed while idle: as they were then
            if may_see is None or may_see(name):
                streams[name.decode()] = summary
        windows = self._windows
        info = {"endpoint": self.endpoint, "ack": self.ack, "streams": streams, "peers": len(self._peers),
                "counters": dict(self.stats),
                "delivered": self._delivered_gone + sum(peer.delivered for peer in self._peers.values()),
                "stream_budget": {"open": len(self._streams) + len(self._opening),
                                  "closed": len(self._closed_streams), "opening": len(self._opening),
                                  "closing": len(self._closing),
                                  "max_open": self._max_open, "max_streams": self.max_streams},
                "credit": {"held": windows.used, "budget": windows.total, "per_subscriber": windows.per_holder,
                           "waiting": windows.waiting, "gone_holding": len(self._gone),
                           "stale": self._stale_bytes, "stale_holding": len(self._stale),
                           "stalls": self._stalls_info()}}
        info["groups"] = self._groups_info(may_see)  # consumer groups (broker_groups)
        if may_see is None:
            info["journal"] = self.journal_dir
        if self._pair is not None:
            info["pair"] = self._pair.info()
        if self._multicast is not None:
            info["multicast"] = dict(self._multicast.stats, group="%s:%d" % self._multicast.address)
        return info
