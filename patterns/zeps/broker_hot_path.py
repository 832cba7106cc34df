"""The ZEPS broker's hot path: PUBLISH in, journal append, live delivery (a mixin of :class:`.broker.Broker`).

Every message on the ROUTER comes in through :meth:`HotPath._on_frames`: a
PUBLISH from an attached peer is parsed by :func:`.protocol.parse_publish`
(the one PUBLISH parser, which :func:`.protocol.decode` shares) and appended
to its stream's journal; everything else goes to the commands
(:mod:`.broker_commands`).  Once the stream's GroupCommit has the messages at
the acknowledgement level, :meth:`HotPath._written` delivers them to the live
subscribers whose credit covers them, straight to libzmq; the others switch
to replay (:mod:`.broker_replay`).  Runs in the broker's loop only.
"""
from __future__ import annotations

import struct
from bisect import bisect_right
from itertools import accumulate as _accumulate
from operator import itemgetter

from zmq import ZMQError

from zactors.actors.journal import JournalError
from zactors.actors.speedups import send_each

from . import protocol as p
from .broker_peers import _LIVE, _REPLAY
from .deliver import frames as _frames

__all__: list[str] = []

#: at most this many client keys noted from ATTACHes not handled yet
_MAX_PENDING_KEYS = 10000
_parse_publish = p.parse_publish
_unpack_u64 = struct.Struct(">Q").unpack_from
_key = itemgetter(2)   # a Record's key


def _shares(match, fresh):
    """Each subscriber's share of the records ``fresh``: ``{owner: [(start, end), ...]}``, index
    spans in order.  ``match`` runs once per distinct key, not per message; when every key has the
    same owners (one filter for everything, the common case) each owner's share is all of them, one
    span.  Otherwise consecutive records with the same owners are one span, so a subscriber costs a
    few slices per round, not a step per message."""
    owners_of = {key: match(key) for key in set(map(_key, fresh))}
    found = iter(owners_of.values())
    first = next(found, ())
    if all(owners == first for owners in found):
        return {sub: [(0, len(fresh))] for sub in first}
    shares = {}
    owners = None
    start = 0
    for i, now in enumerate(map(owners_of.__getitem__, map(_key, fresh))):
        if now is not owners and now != owners:
            for sub in owners or ():
                shares.setdefault(sub, []).append((start, i))
            owners, start = now, i
    for sub in owners or ():
        shares.setdefault(sub, []).append((start, len(fresh)))
    return shares


def _index_of(frames, frame):
    """The index of DELIVER ``frame`` among this round's ``frames`` (by its sequence)."""
    return _unpack_u64(frame, 3)[0] - _unpack_u64(frames[0], 3)[0]


class HotPath:
    """PUBLISH, the journal append and live delivery.  State: ``stream.fresh``, ``peer.published``
    (the producers of PUBLISH-ID: the journal's table, :meth:`Journal.producer`); with permissions, ``_keys`` (the ZAP User-Id of ATTACHes not handled yet)."""

    def _on_keyed_frames(self, frames):
        """With permissions: note the ZAP User-Id of each ATTACH, then as :meth:`_on_frames`.  A message
        whose key is not its peering's (another key's connection took the routing id over: the ROUTER
        hands an id over to its newest connection) ends that peering first: no key acts with another's."""
        data = [f.bytes for f in frames]
        try:
            key = frames[0].get("User-Id") or None
        except ZMQError:
            key = None
        peer = self._peers.get(data[0])
        if peer is not None and peer.key != key:
            self._taken_over(peer)
        if len(data) == 2 and len(data[1]) > 2 and data[1][2] in (p.ATTACH, p.ATTACH_EXISTING, p.QUERY):
            if len(self._keys) >= _MAX_PENDING_KEYS:       # ATTACHes the handler has not taken: bounded
                self._keys.clear()
            self._keys[data[0]] = key
        self._on_frames(data)

    def _on_frames(self, frames):
        """Every message on the ROUTER: a PUBLISH from an attached peer is appended here; the rest
        (and a PUBLISH that needs a check or a refusal) goes to :meth:`_on_message`."""
        if len(frames) == 2:
            identity, frame = frames
            peer = self._peers.get(identity)
            if peer is not None:
                self._heard.add(identity)
                parsed = _parse_publish(frame)
                if parsed is not None:
                    key, body = parsed
                    if peer.may_publish is not True or len(key) + len(body) > self.max_message:
                        self._publish(peer, key, body)  # checks, and INVALID with the reason
                        return
                    stream = peer.stream  # the common case: append, then deliver this round
                    try:
                        record = stream.journal.append_record(key, body)
                    except JournalError:
                        self._publish(peer, key, body)  # refused again there, and said so
                        return
                    peer.published = record[0]
                    stream.fresh.append(record)
                    stream.commit.kick()
                    return
            self._on_message(identity, [frame])
        elif len(frames) > 2:
            self._on_message(frames[0], frames[1:])
        else:
            self.stats["router_malformed"] += 1

    def _publish(self, peer, key, body, producer=None, sequence=0):
        stream = peer.stream
        if len(key) + len(body) > self.max_message:
            self._invalid(peer.identity, "message of %d bytes is over the limit of %d"
                          % (len(key) + len(body), self.max_message))
            return
        if peer.may_publish is not True:
            if not self._allowed(peer, "publish"):
                return
        journal = stream.journal
        if producer is not None:  # PUBLISH-ID: the journal's producer table is the one that decides
            producer = (producer.to_bytes(8, "little"), sequence)
            seen = journal.producer(producer[0])
            if peer.producer != producer[0]:  # its first on this peering: what it had at the level before
                peer.producer, peer.journaled = producer[0], 0
                peer.ids.clear()
                if seen is not None and seen[1] <= self._level(journal):
                    peer.journaled = seen[0]
            if peer.fence is not None:
                if sequence > peer.fence[0]:  # after one the journal refused: refused too (counted; its PING
                    self.stats["journal_refused"] += 1   # says so), so that what a producer has journaled
                    return                               # is always its first N
                peer.fence = None             # it sends again from the refused one: try
            if seen is not None and sequence <= seen[0]:  # journaled already (a resend): its PING waits
                self.stats["duplicates_dropped"] += 1    # for that one
                peer.published = max(peer.published, seen[1])
                self._appended(peer, seen[1], seen[0])
                return
            evicted = journal.producers_evicted
        try:  # the producer goes into the journal with the message, so dedup survives a restart
            record = journal.append_record(key, body, None, producer)
        except JournalError as exc:
            self.stats["journal_refused"] += 1
            if producer is not None:
                peer.fence = (sequence, str(journal.error or exc))   # the cause, without the path again
            self._invalid(peer.identity, "%sstream %s refused the message: %s"
                          % (self._journaled(peer), stream.name.decode(), exc))
            return
        if producer is not None:
            if journal.producers_evicted > evicted:  # its budget: max_producers
                self.stats["producers_evicted"] += journal.producers_evicted - evicted
            self._appended(peer, record[0], sequence)
        peer.published = record[0]
        stream.fresh.append(record)
        stream.commit.kick()

    def _level(self, journal):
        """``journal``'s last sequence at the acknowledgement level."""
        return journal.written_seq if self.ack == "written" else journal.synced_seq

    def _appended(self, peer, seq, pseq):
        """``peer``'s producer has its sequence ``pseq`` at journal sequence ``seq`` (appended now, or
        before: a dropped resend).  ``peer.ids`` keeps what is not yet at the acknowledgement level
        (pruned every 64: bounded by what the journal holds unwritten)."""
        ids = peer.ids
        if not ids or seq > ids[-1][0]:
            ids.append((seq, pseq))
            if len(ids) & 63 == 0:
                self._settle(peer)

    def _settle(self, peer):
        """Move ``peer.journaled`` up to what its producer has at the acknowledgement level."""
        level = self._level(peer.stream.journal)
        ids = peer.ids
        while ids and ids[0][0] <= level:
            peer.journaled = ids.popleft()[1]

    def _journaled(self, peer):
        """The JOURNALED field for a refusal sent to ``peer`` ("" unless it publishes with PUBLISH-ID):
        ``[journaled=N held=H] ``, its producer's last sequence at the acknowledgement level, and (when
        more are appended but not yet there) the last appended."""
        if peer.producer is None:
            return ""
        self._settle(peer)
        ids = peer.ids
        if ids:
            return "[journaled=%d held=%d] " % (peer.journaled, ids[-1][1])
        return "[journaled=%d] " % peer.journaled

    def _written(self, stream, seq):
        """``stream``'s GroupCommit wrote (``ack="written"``) or fsynced (``"synced"``) its journal up
        to ``seq``: deliver the fresh messages up to there to live subscribers.

        At the level first: a subscriber never holds a message that a crash
        (of the broker, or of the machine with ``"synced"``) could take back:
        its sequence would be given to another.
        """
        fresh = stream.fresh
        if not fresh:
            return
        n = seq - fresh[0][0] + 1  # fresh holds consecutive sequences; with "synced" some may be past seq
        if n <= 0:
            return
        if n >= len(fresh):
            stream.fresh = []
        else:
            fresh, stream.fresh = fresh[:n], fresh[n:]
        stream.publishes += len(fresh)
        stream.delivered_seq = fresh[-1][0]
        if stream.name in self._tables:  # consumer groups of this stream (broker_groups)
            self._groups_written(stream)
        if self._multicast is not None:
            multicast, name = self._multicast.send, stream.name
            for seq, _, key, body in fresh:
                multicast(name, seq, key, body)
        matcher = stream.matcher
        if not matcher:
            return
        frames = _frames(fresh, 0, fresh[-1][0], 1 << 62, None)[0]  # every DELIVER frame, in one call
        sizes = list(_accumulate(map(len, frames), initial=0))      # sizes[j]: the first j frames' bytes
        for sub, spans in _shares(matcher.match, fresh).items():
            if sub.mode is _LIVE:
                self._deliver_live(sub, spans, frames, sizes, fresh[0][0])

    def _deliver_live(self, sub, spans, frames, sizes, first):
        """Send live subscriber ``sub`` its share of this round's ``frames`` (index ``spans``; the
        first is sequence ``first``; ``sizes[j]``: the first j frames' bytes) as far as its credit
        goes: in one C call while libzmq takes them (:func:`send_each`), the rest behind the kernel
        outbox; from the first one its credit (or a full transport) does not cover, it replays."""
        floor = sub.floor - first
        credit = sub.credit
        share = []
        stop = None   # the index of the first frame not covered
        for start, end in spans:
            if end <= floor:
                continue
            if start < floor:
                start = floor
            cost = sizes[end] - sizes[start]
            if cost > credit:  # the frames its credit covers, and the first it does not
                stop = bisect_right(sizes, sizes[start] + credit, start, end) - 1
                cost = sizes[stop] - sizes[start]
            share.extend(frames[start:end if stop is None else stop])
            credit -= cost
            if stop is not None:
                break
        identity = sub.identity
        sent = 0
        if share and not sub.held:
            if not self._outbox_pending(identity):
                sock = self.router.socket
                sent = send_each(sock, sock.handle, identity, share)  # straight to libzmq, while it takes them
                sub.credit = credit if sent == len(share) else sub.credit - sum(map(len, share[:sent]))
                sub.delivered += sent
            send = self._outbox_send
            while sent < len(share) and not sub.held:  # behind what waits already, in order
                frame = share[sent]
                sub.credit -= len(frame)
                sub.delivered += 1
                sent += 1
                if not send(identity, [frame]):  # gone: dropped (by on_unroutable)
                    return
        if sent < len(share):
            self._to_replay(sub, first + _index_of(frames, share[sent]))
        elif stop is not None:  # its credit ran out
            self._to_replay(sub, first + stop)
            self._short(sub)

    def _to_replay(self, sub, seq):
        """``sub`` could not take message ``seq`` live: replay from it."""
        sub.stream.matcher.remove(sub.filter)
        sub.mode = _REPLAY
        sub.next = seq
        self.stats["to_replay"] += 1
