"""The ZEPS broker's commands: ATTACH, SUBSCRIBE, PING, DETACH, FEATURES, EPOCH, QUERY and the permissions
that guard them (a mixin of :class:`.broker.Broker`).

:meth:`Commands._on_message` decodes every frame the hot path did not take
(:func:`.protocol.decode`) and dispatches it; each command is answered as
:mod:`.protocol` says, anything else with INVALID and a reason.  A resuming
SUBSCRIBE whose position the journal lost is refused with ROLLBACK: past the
stream's end, or, with the client's EPOCH, lost in any epoch since
(``Journal.check_resume``).  Runs in the broker's loop only.
"""
from __future__ import annotations

import json
import logging
import time
from functools import partial

from . import protocol as p
from .groups_protocol import is_group_command
from .broker_peers import _LIVE, _REPLAY, _Peer
from .matcher import Filter, PatternError

__all__: list[str] = []

log = logging.getLogger("zactors.patterns.zeps.broker")  # one logger for the whole broker
_monotonic = time.monotonic
#: seconds between two log lines about refusals by the permissions (each one is counted)
_REFUSE_LOG_PERIOD = 10.0


class Commands:
    """Commands from peers.  State: ``_refuse_logged`` (when a refusal was last logged), ``_ping_tokens``."""

    def _on_message(self, identity, frames):
        if len(frames) != 1:
            self._invalid(identity, "one ZEPS command per message, got %d frames" % len(frames))
            return
        if self._attaching and self._hold(identity, frames):  # its ATTACH waits for the journal
            return
        frame = frames[0]
        if is_group_command(frame):  # consumer groups: their own codec and handlers (broker_groups)
            self._on_group_command(identity, self._peers.get(identity), frame)
            return
        try:
            message = p.decode(frame)
        except p.ProtocolError as exc:
            self._invalid(identity, str(exc))
            return
        peer = self._peers.get(identity)
        kind = type(message)
        if kind is p.Publish:
            if peer is None:
                self._unattached(identity, "PUBLISH")
            else:
                self._publish(peer, message.key, message.body)
        elif kind is p.PublishId:
            if peer is None:
                self._unattached(identity, "PUBLISH")
            else:
                self._publish(peer, message.key, message.body, message.producer, message.sequence)
        elif kind is p.Credit:
            if peer is None:
                self._unattached(identity, "CREDIT")
            else:
                self._credit(peer, message.credit)
        elif kind is p.Ping:
            self._ping(identity, peer)
        elif kind is p.PingOk:
            self._ping_ok(identity)
        elif kind is p.ProbeOk:  # (FEATURES "tokens": the credit budget's PING, with its token)
            self._ping_ok(identity, message.token)
        elif kind is p.DetachOk:
            pass
        elif kind is p.Attach:
            if self._pair is None or self._pair.vote(identity):  # a pair: only the active serves
                self._attach(identity, peer, message)
        elif kind is p.Subscribe or kind is p.SubscribeSince:
            self._subscribe(identity, peer, message)
        elif kind is p.Detach:
            if peer is not None:
                self.stats["detached"] += 1
                self._drop(peer)
            self._send(identity, p.DETACH_OK_FRAME)
        elif kind is p.Features:
            if peer is not None:  # (before ATTACH: ignored, as the extension says)
                names = message.features.split()
                peer.gaps = b"gaps" in names
                peer.tokens = peer.tokens or b"tokens" in names  # (for good: bare PING-OKs never count again)
                if b"epochs" in names:  # the stream journal's epoch, and where it started
                    self._send(identity, p.epoch(*peer.stream.journal.epochs[-1]))
        elif kind is p.Epoch:  # the client says where its position is from (before its SUBSCRIBE)
            if peer is None:
                self._unattached(identity, "EPOCH")
            else:
                peer.resume = message
        elif kind is p.Query:
            self.stats["queries"] += 1
            may_see = None
            if self.permissions is not None:   # a key sees only the streams it may use
                key = self._keys.pop(identity, None)
                may_see = partial(self.permissions.may_attach, key)
            self._send(identity, p.query_ok(json.dumps(self._info(may_see)).encode()))
        else:
            self._invalid(identity, "a broker does not accept %s" % p.NAMES[message.id])

    def _attach(self, identity, peer, message):
        if peer is not None:
            self._invalid(identity, "already attached to stream %s" % peer.stream.name.decode())
            return
        if message.version != p.VERSION:
            self._invalid(identity, "protocol version %d not supported (this broker speaks 1)" % message.version)
            return
        name = message.stream
        if len(name) > self.max_stream_name:
            self._invalid(identity, "stream name over %d bytes" % self.max_stream_name)
            return
        if name.startswith(b"$"):
            self._invalid(identity, "stream names starting with $ are reserved")
            return
        if len(self._peers) + len(self._attaching) >= self.max_peers:
            self._invalid(identity, "broker full: %d peerings" % self.max_peers)
            return
        key = None
        if self.permissions is not None:
            key = self._keys.pop(identity, None)
            if not self.permissions.may_attach(key, name):
                self._refuse(identity, "refused by the broker's permissions: this key may not use stream %s"
                             % name.decode(), "refused_attach")
                return
        stream = self._streams.get(name)
        if stream is None and message.existing and name not in self._closed_streams \
                and name not in self._opening:  # ATTACH-EXISTING
            self.stats["no_stream"] += 1    # a reader asked: not an invalid command
            self._send(identity, p.invalid("NO-STREAM: stream %s does not exist" % name.decode()))
            return
        if stream is None:
            self._open(identity, name, key)  # its journal opens off the loop, then _attached
        else:
            self._attached(identity, stream, key)

    def _attached(self, identity, stream, key):
        """The ATTACH of ``identity`` to the open ``stream``: its peering, and ATTACH-OK."""
        stream.idle_since = None
        self._idle.pop(stream.name, None)
        peer = self._peers[identity] = stream.peers[identity] = _Peer(identity, stream, key)
        old = self._gone.pop(identity, None) or self._restore(identity)
        if old is not None:  # the same connection, attached again: what is still on its way to it stays counted
            peer.honoured, peer.acked, peer.probes = old.honoured, old.acked, old.probes
        self._alive.touch(identity)
        if self._alive_timer is None:
            self._arm_liveness()
        self.stats["attached"] += 1
        self._send(identity, p.ATTACH_OK_FRAME)

    def _subscribe(self, identity, peer, message):
        if peer is None:
            self._unattached(identity, "SUBSCRIBE")
            return
        if not self._allowed(peer, "subscribe"):
            return
        first = peer.filter is None
        flt = peer.filter or Filter(peer)
        if len(flt) >= self.max_patterns and message.pattern not in flt.patterns:
            self._invalid(identity, "at most %d patterns per peering" % self.max_patterns)
            return
        if not first:
            live = peer.mode is _LIVE
            try:
                flt.add(message.pattern)
            except PatternError as exc:
                self._invalid(identity, str(exc))
                return
            if live:
                peer.stream.matcher.add(flt)
            self._send(identity, p.SUBSCRIBE_OK_FRAME)
            return
        try:
            flt.add(message.pattern)
        except PatternError as exc:
            self._invalid(identity, str(exc))
            return
        journal = peer.stream.journal
        if type(message) is p.Subscribe and message.latest != p.NEW and peer.resume is not None \
                and self._rolled_back(identity, peer, peer.resume):
            return
        if type(message) is p.Subscribe and message.latest != p.NEW and message.latest > journal.last_seq:
            self.stats["rollbacks"] += 1
            reason = ("ROLLBACK: stream %s ends at sequence %d, before the %d you resume after: the journal lost "
                      "messages and sequences from %d on are new ones; subscribe again from sequence %d or earlier"
                      % (peer.stream.name.decode(), journal.last_seq, message.latest, journal.last_seq + 1,
                         journal.last_seq + 1))
            log.warning("%s: %r: %s", self.name, identity, reason)
            self._send(identity, p.invalid(reason))
            return
        since = None
        if type(message) is p.SubscribeSince:
            since = message.since / 1e6  # in the loop only when the tail cache holds the whole journal
            start = journal.seq_at_time(since) if journal.cached(journal.first_seq) else 0
        elif message.latest == p.NEW:
            start = journal.last_seq + 1
        else:
            start = message.latest + 1
        peer.filter = flt
        peer.next = max(start, 1)
        self.stats["subscribed"] += 1
        self._send(identity, p.SUBSCRIBE_OK_FRAME)
        if not start:  # the time is looked up off the hub: replay starts there
            peer.mode = _REPLAY
            self._find_since(peer, since)
        elif peer.next > peer.stream.delivered_seq:
            self._go_live(peer)
        else:
            peer.mode = _REPLAY
            if peer.credit:
                self._replaying[identity] = peer
                self._pump()

    def _rolled_back(self, identity, peer, resume):
        """The EPOCH extension: True, and INVALID "ROLLBACK: ...", when the client's position (sequence
        ``resume.seq`` of epoch ``resume.epoch``) was lost since: the journal gives those sequences to
        other messages (``Journal.check_resume``), even if the stream has since grown past them."""
        journal = peer.stream.journal
        last = journal.check_resume(resume.epoch, resume.seq)
        if last is None:
            return False
        self.stats["rollbacks"] += 1
        name = peer.stream.name.decode()
        reason = ("ROLLBACK: stream %s: epoch %d ends at sequence %d, before the %d you resume after: the journal "
                  "lost messages; sequences from %d on are other ones: subscribe again from %d or earlier"
                  % (name, resume.epoch, last, resume.seq, last + 1, last + 1))
        log.warning("%s: %r: %s", self.name, identity, reason)
        self._send(identity, p.invalid(reason))
        return True

    def _ping(self, identity, peer):
        if peer is None:  # no peering here (the broker restarted?): tell it to attach again
            self._send(identity, p.DETACH_FRAME)
            return
        stream = peer.stream
        if peer.fence is not None:  # its producer's messages from there were refused: not a PING-OK
            self._invalid(identity, "PING: %sstream %s could not write its journal: %s"
                          % (self._journaled(peer), stream.name.decode(), peer.fence[1]))
            return
        published = peer.published

        def ok():
            self._send(identity, p.PING_OK_FRAME)

        def answer():  # at our level; ack="replicated": the passive's too
            if self._pair is None:
                ok()
            else:
                self._pair.source.when_replicated(stream, published, ok,
                                                  lambda reason: self._invalid(identity, "PING: " + reason))

        def written(_):
            answer()

        def failed(exc):
            # No PING-OK: what it published is not written.  The reason starts with "PING:" so that a
            # client waiting for the PING-OK knows this INVALID is the answer (the write is retried).
            self._invalid(identity, "PING: %sstream %s cannot write its journal: %s"
                          % (self._journaled(peer), stream.name.decode(), exc))

        if self.level == "written":
            stream.commit.when_written(written, peer.published, failed)
            return
        token = self._ping_tokens = self._ping_tokens + 1
        stream.pings[token] = identity

        def synced(_):
            if stream.pings.pop(token, None) is not None:  # else answered already by _write_failed
                answer()

        def not_synced(exc):  # a PING that came while the writes were already failing: answered too
            if stream.pings.pop(token, None) is not None:
                failed(exc)

        stream.commit.when_synced(synced, peer.published, not_synced)

    def _allowed(self, peer, action):
        if self.permissions is None:
            if action == "publish":
                peer.may_publish = True
            return True
        allowed = self.permissions.allows(peer.key, action, peer.stream.name)
        if action == "publish":
            peer.may_publish = allowed
        if not allowed:
            self._refuse(peer.identity, "refused by the broker's permissions: this key is not allowed to %s on"
                         " stream %s" % (action, peer.stream.name.decode()), "refused_" + action)
        return allowed

    def _refuse(self, identity, reason, counter):
        """INVALID for what the permissions refuse: counted (``refused`` and ``counter``), logged once a period."""
        stats = self.stats
        stats["refused"] += 1
        stats[counter] += 1
        now = _monotonic()
        if now >= self._refuse_logged + _REFUSE_LOG_PERIOD:  # 10,000 forged messages are not 10,000 lines
            self._refuse_logged = now
            log.warning("%s: refused %r: %s (%d refused so far; logged at most every %gs)", self.name, identity,
                        reason, stats["refused"], _REFUSE_LOG_PERIOD)
        self._send(identity, p.invalid(reason))
