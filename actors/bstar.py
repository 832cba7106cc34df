"""Binary Star: the failover state machine of a primary/backup server pair.

A plain object (no sockets, no clock of its own): the owner feeds it the
peer's state heartbeats and its clients' requests, with the time, and acts on
the transitions it reports.  Safe anywhere; not thread-safe.

States: ``PRIMARY`` and ``BACKUP`` (starting, peer not yet heard), ``ACTIVE``
(serving clients), ``PASSIVE`` (standing by).  Events: the peer's state
(``PEER_PRIMARY`` ... ``PEER_PASSIVE``, one per heartbeat it sends) and
``CLIENT_REQUEST`` (a client asks for a snapshot: the Binary Star vote).

Rules (the table :data:`TABLE`):

- A server becomes active when its peer says it is starting or passive as
  appropriate, or on a client's request when the peer has been silent for
  ``2 x heartbeat`` (``peer_expiry``).  A backup never becomes active on its
  own: only a client's vote while the active is silent makes it take over,
  so a network cut between the pair alone cannot make two actives.
- A lone primary becomes active on a client request once it has waited
  ``peer_expiry`` for a backup (it may have been the one that failed over).
- Split brain: if an active server hears its peer say ACTIVE (a cut between
  the pair healed while clients voted on both sides), **the primary wins**:
  the backup yields to PASSIVE (reason ``"split brain"``) and its owner must
  re-sync from the primary.  The same rule settles two passives: the primary
  becomes active.  The rule needs no shared data, so both sides always agree.
- A passive server that does not hold the active's state (its owner sets
  :attr:`BinaryStar.ready` False while it re-syncs, True once a sync is
  complete) never becomes active: it refuses the client vote, and ignores
  the rules above that would make it active.  Its heartbeats say it is
  starting (:attr:`BinaryStar.advertised`: ``PRIMARY`` or ``BACKUP``), so a
  restarted peer that holds the state serves instead of waiting for it.
"""
import logging

__all__ = ["BinaryStar", "PRIMARY", "BACKUP", "ACTIVE", "PASSIVE", "CLIENT_REQUEST", "STATES", "TABLE",
           "encode_state", "decode_state"]

log = logging.getLogger(__name__)

PRIMARY, BACKUP, ACTIVE, PASSIVE = 1, 2, 3, 4
STATES = {PRIMARY: "primary", BACKUP: "backup", ACTIVE: "active", PASSIVE: "passive"}
#: a peer's heartbeat carries its state (1-4); the client vote is event 5
CLIENT_REQUEST = 5

_VOTE = "vote"      # active if the peer is silent, else reject
_ACCEPT = "accept"  # serve the request, stay
_REJECT = "reject"  # do not serve, stay

#: (state, event, is_primary) -> new state, or an action; missing entries: stay, no change
TABLE = {}
for _primary in (True, False):
    TABLE.update({
        (PRIMARY, BACKUP, _primary): ACTIVE,      # backup is starting: we serve
        (PRIMARY, ACTIVE, _primary): PASSIVE,     # the backup took over while we were away
        (PRIMARY, CLIENT_REQUEST, _primary): _VOTE,
        (BACKUP, ACTIVE, _primary): PASSIVE,
        (BACKUP, CLIENT_REQUEST, _primary): _REJECT,
        (ACTIVE, CLIENT_REQUEST, _primary): _ACCEPT,
        (PASSIVE, PRIMARY, _primary): ACTIVE,     # peer restarted without our state: we keep serving
        (PASSIVE, BACKUP, _primary): ACTIVE,
        (PASSIVE, CLIENT_REQUEST, _primary): _VOTE,
    })
TABLE[(ACTIVE, ACTIVE, True)] = ACTIVE      # split brain: primary wins...
TABLE[(ACTIVE, ACTIVE, False)] = PASSIVE    # ...the backup yields
TABLE[(PASSIVE, PASSIVE, True)] = ACTIVE    # two passives: the primary serves
TABLE[(PASSIVE, PASSIVE, False)] = PASSIVE


def encode_state(state, sequence):
    """A state heartbeat: ``[b"BSTAR", state byte, sequence (8 bytes)]``."""
    return [b"BSTAR", bytes((state,)), sequence.to_bytes(8, "big")]


def decode_state(frames):
    """``(state, sequence)`` from a heartbeat, or None if it is not one."""
    if len(frames) != 3 or frames[0] != b"BSTAR" or len(frames[1]) != 1 or len(frames[2]) != 8:
        return None
    state = frames[1][0]
    if state not in STATES:
        return None
    return state, int.from_bytes(frames[2], "big")


class BinaryStar:
    """The Binary Star state of one server of a pair.

    ``on_change(old, new, reason)`` runs on every state change, before
    :meth:`handle` returns.  ``heartbeat`` is the seconds between the state
    messages each side sends; the peer is presumed dead ``2 x heartbeat``
    after its last one.  Times are the caller's monotonic seconds.
    """

    __slots__ = ("primary", "state", "heartbeat", "peer_expiry", "peer_state", "on_change", "changes", "ready")

    def __init__(self, primary, heartbeat=0.25, now=0.0, on_change=None):
        self.primary = bool(primary)
        self.state = PRIMARY if primary else BACKUP
        self.heartbeat = heartbeat
        self.peer_expiry = now + 2 * heartbeat
        self.peer_state = None
        self.on_change = on_change
        self.changes = 0
        self.ready = True   # the owner holds the active's state (see the module docstring)

    @property
    def active(self):
        return self.state == ACTIVE

    @property
    def advertised(self):
        """The state our heartbeats announce: a passive that is not ready says it is starting."""
        if self.state == PASSIVE and not self.ready:
            return PRIMARY if self.primary else BACKUP
        return self.state

    @property
    def name(self):
        return STATES[self.state]

    def peer_silent(self, now):
        return now >= self.peer_expiry

    def handle(self, event, now):
        """Apply one event; True if a CLIENT_REQUEST may be served (always True for peer states)."""
        if event != CLIENT_REQUEST:
            self.peer_state = event
            self.peer_expiry = now + 2 * self.heartbeat
        action = TABLE.get((self.state, event, self.primary))
        if action is None:
            return event != CLIENT_REQUEST
        if action == _ACCEPT:
            return True
        if action == _REJECT:
            return False
        if action == _VOTE:
            if not self.peer_silent(now) or not self.ready:
                return False
            self._change(ACTIVE, "client request, peer silent")
            return True
        if action == ACTIVE and self.state == PASSIVE and not self.ready:
            return True  # we do not hold the state: the peer must serve
        if action != self.state:
            reason = "split brain: the primary wins" if self.state == event == ACTIVE else \
                "two passives: the primary serves" if self.state == event == PASSIVE else \
                "peer is %s" % STATES[event]
            self._change(action, reason)
        elif self.state == event == ACTIVE:
            log.warning("split brain: peer is active too; the primary wins, waiting for the backup to yield")
        return True

    def _change(self, new, reason):
        old, self.state = self.state, new
        self.changes += 1
        log.info("binary star: %s -> %s (%s)", STATES[old], STATES[new], reason)
        if self.on_change is not None:
            self.on_change(old, new, reason)

    def __repr__(self):
        return "<BinaryStar %s %s>" % ("primary" if self.primary else "backup", self.name)
