"""Binary Star as a plain state machine: every (state, event, role), and whole scenarios."""
import itertools

import pytest

from zactors.actors.bstar import (
    ACTIVE, BACKUP, CLIENT_REQUEST, PASSIVE, PRIMARY, BinaryStar, decode_state, encode_state,
)

pytestmark = pytest.mark.timeout(30)

HB = 1.0


def expected(state, event, primary, silent):
    """(served, new state): the rules written out independently of the table."""
    if event == CLIENT_REQUEST:
        if state == ACTIVE:
            return True, ACTIVE
        if state in (PRIMARY, PASSIVE) and silent:
            return True, ACTIVE
        return False, state
    if state == PRIMARY:
        return True, {BACKUP: ACTIVE, ACTIVE: PASSIVE}.get(event, PRIMARY)
    if state == BACKUP:
        return True, PASSIVE if event == ACTIVE else BACKUP
    if state == ACTIVE:
        return True, PASSIVE if (event == ACTIVE and not primary) else ACTIVE
    # PASSIVE
    if event in (PRIMARY, BACKUP):
        return True, ACTIVE
    if event == PASSIVE:
        return True, ACTIVE if primary else PASSIVE
    return True, PASSIVE


@pytest.mark.parametrize("state, event, primary, silent", list(itertools.product(
    (PRIMARY, BACKUP, ACTIVE, PASSIVE), (PRIMARY, BACKUP, ACTIVE, PASSIVE, CLIENT_REQUEST), (True, False),
    (True, False))))
def test_every_transition(state, event, primary, silent):
    changes = []
    fsm = BinaryStar(primary, HB, now=0.0, on_change=lambda old, new, why: changes.append((old, new)))
    fsm.state = state
    now = 10.0 if silent else 0.5  # the peer expires 2 x HB after start
    served, new = expected(state, event, primary, silent)
    assert fsm.handle(event, now) is served
    assert fsm.state == new
    assert changes == ([(state, new)] if new != state else [])


def test_peer_heartbeat_postpones_expiry():
    fsm = BinaryStar(False, HB, now=0.0)
    fsm.handle(ACTIVE, 0.0)
    assert fsm.state == PASSIVE
    for t in (1.5, 3.0, 4.5):  # heard every 1.5 s: never silent for 2 s
        assert not fsm.handle(CLIENT_REQUEST, t)
        fsm.handle(ACTIVE, t)
    assert fsm.handle(CLIENT_REQUEST, 6.6)  # silent for 2.1 s: the vote wins
    assert fsm.active


def test_failover_and_primary_restart():
    p, b = BinaryStar(True, HB), BinaryStar(False, HB)
    b.handle(p.state, 0.1); p.handle(b.state, 0.1)
    assert (p.state, b.state) == (ACTIVE, BACKUP)
    b.handle(p.state, 0.2)
    assert b.state == PASSIVE
    assert not b.handle(CLIENT_REQUEST, 1.0)  # primary alive: refused
    assert b.handle(CLIENT_REQUEST, 3.0)      # primary silent since 0.2
    assert b.active
    p2 = BinaryStar(True, HB, now=3.1)        # the primary comes back, empty
    p2.handle(b.state, 3.2)
    b.handle(p2.state, 3.2)
    assert (p2.state, b.state) == (PASSIVE, ACTIVE)


def test_backup_alone_never_serves():
    b = BinaryStar(False, HB)
    assert not any(b.handle(CLIENT_REQUEST, t) for t in (0.0, 5.0, 500.0))
    assert b.state == BACKUP


def test_lone_primary_serves_after_waiting_for_its_peer():
    p = BinaryStar(True, HB, now=0.0)
    assert not p.handle(CLIENT_REQUEST, 1.0)
    assert p.handle(CLIENT_REQUEST, 2.0)


def test_split_brain_primary_wins_both_sides_agree():
    p, b = BinaryStar(True, HB), BinaryStar(False, HB)
    p.state = b.state = ACTIVE
    reasons = []
    b.on_change = lambda old, new, why: reasons.append(why)
    p.handle(b.state, 1.0); b.handle(p.state, 1.0)
    assert (p.state, b.state) == (ACTIVE, PASSIVE)
    assert reasons == ["split brain: the primary wins"]
    p.state = b.state = PASSIVE
    p.handle(b.state, 2.0); b.handle(p.state, 2.0)
    assert (p.state, b.state) == (ACTIVE, PASSIVE)


def test_state_codec():
    assert encode_state(ACTIVE, 5) == [b"BSTAR", b"\x03", b"\x00" * 7 + b"\x05"]
    assert decode_state(encode_state(PASSIVE, 2 ** 63)) == (PASSIVE, 2 ** 63)
    for bad in ([], [b"BSTAR", b"\x09", b"\x00" * 8], [b"BSTAR", b"\x03", b"\x00"], [b"X", b"\x03", b"\x00" * 8],
                [b"BSTAR", b"", b"\x00" * 8]):
        assert decode_state(bad) is None


@pytest.mark.parametrize("primary", (True, False))
def test_unready_passive_never_becomes_active(primary):
    """A passive still re-syncing refuses the vote and every rule that would make it active."""
    fsm = BinaryStar(primary, HB, now=0.0)
    fsm.state = PASSIVE
    fsm.ready = False
    assert fsm.advertised == (PRIMARY if primary else BACKUP)  # "I hold nothing", like a starting server
    assert not fsm.handle(CLIENT_REQUEST, 10.0)  # peer silent, yet refused
    for event in (PRIMARY, BACKUP, PASSIVE):
        fsm.handle(event, 11.0)
        assert fsm.state == PASSIVE
    fsm.ready = True
    assert fsm.advertised == PASSIVE
    assert fsm.handle(CLIENT_REQUEST, 20.0) and fsm.active


def test_restarted_primary_serves_when_the_backup_holds_nothing():
    p, b = BinaryStar(True, HB, now=0.0), BinaryStar(False, HB, now=0.0)
    b.state, b.ready = PASSIVE, False  # the backup was re-syncing when the primary died
    p.handle(b.advertised, 1.0); b.handle(p.advertised, 1.0)
    assert (p.state, b.state) == (ACTIVE, PASSIVE)
