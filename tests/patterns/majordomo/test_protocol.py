"""The codec against the frame tables of 18/MDP v0.2, and against byte soup."""
import pytest
from hypothesis import given, settings, strategies as st

from zactors.patterns.majordomo.protocol import (
    CLIENT, DISCONNECT, FINAL, HEARTBEAT, MAJORTOMO, PARTIAL, READY, REQUEST, SPEC, WORKER, ProtocolError, framing,
)


# -- MDP/Client, spec framing ------------------------------------------------------
def test_client_request_frames():
    assert SPEC.client_request(b"echo", [b"a", b"b"]) == [b"MDPC02", b"\x01", b"echo", b"a", b"b"]


def test_client_partial_and_final_frames():
    assert SPEC.client_reply(False, b"echo", [b"x"]) == [b"MDPC02", b"\x02", b"echo", b"x"]
    assert SPEC.client_reply(True, b"echo", [b"x", b"y"]) == [b"MDPC02", b"\x03", b"echo", b"x", b"y"]


def test_broker_decodes_client_request():
    m = SPEC.decode_for_broker([b"MDPC02", b"\x01", b"echo", b"a", b"b"])
    assert (m.header, m.command, m.service, m.body) == (CLIENT, REQUEST, b"echo", [b"a", b"b"])


def test_client_decodes_replies():
    m = SPEC.decode_for_client([b"MDPC02", b"\x02", b"echo", b"p"])
    assert (m.command, m.service, m.body) == (PARTIAL, b"echo", [b"p"])
    m = SPEC.decode_for_client([b"MDPC02", b"\x03", b"echo", b"f", b"g"])
    assert (m.command, m.service, m.body) == (FINAL, b"echo", [b"f", b"g"])


# -- MDP/Worker, spec framing --------------------------------------------------------
def test_worker_commands_frames():
    assert SPEC.ready(b"echo") == [b"MDPW02", b"\x01", b"echo"]
    assert SPEC.worker_request(b"C1", [b"q"]) == [b"MDPW02", b"\x02", b"C1", b"", b"q"]
    assert SPEC.worker_reply(False, b"C1", [b"p"]) == [b"MDPW02", b"\x03", b"C1", b"", b"p"]
    assert SPEC.worker_reply(True, b"C1", [b"f"]) == [b"MDPW02", b"\x04", b"C1", b"", b"f"]
    assert SPEC.heartbeat == [b"MDPW02", b"\x05"]
    assert SPEC.disconnect == [b"MDPW02", b"\x06"]


def test_broker_decodes_worker_commands():
    m = SPEC.decode_for_broker([b"MDPW02", b"\x01", b"echo"])
    assert (m.header, m.command, m.service) == (WORKER, READY, b"echo")
    m = SPEC.decode_for_broker([b"MDPW02", b"\x03", b"C1", b"", b"p"])
    assert (m.command, m.address, m.body) == (PARTIAL, b"C1", [b"p"])
    m = SPEC.decode_for_broker([b"MDPW02", b"\x04", b"C1", b"", b"f", b""])
    assert (m.command, m.address, m.body) == (FINAL, b"C1", [b"f", b""])
    assert SPEC.decode_for_broker([b"MDPW02", b"\x05"]).command == HEARTBEAT
    assert SPEC.decode_for_broker([b"MDPW02", b"\x06"]).command == DISCONNECT


def test_worker_decodes_broker_commands():
    m = SPEC.decode_for_worker([b"MDPW02", b"\x02", b"C1", b"", b"q", b"r"])
    assert (m.command, m.address, m.body) == (REQUEST, b"C1", [b"q", b"r"])
    assert SPEC.decode_for_worker([b"MDPW02", b"\x05"]).command == HEARTBEAT
    assert SPEC.decode_for_worker([b"MDPW02", b"\x06"]).command == DISCONNECT


@pytest.mark.parametrize("frames", [
    [],
    [b"MDPC02"],
    [b"MDPC02", b"\x01", b"echo"],                     # REQUEST without a body
    [b"MDPC02", b"\x01", b"", b"x"],                   # empty service name
    [b"MDPC02", b"\x01", b"ech\x00", b"x"],            # unprintable service name
    [b"MDPC02", b"\x02", b"echo", b"x"],               # PARTIAL is broker -> client only
    [b"MDPC01", b"\x01", b"echo", b"x"],               # wrong version
    [b"", b"MDPC02", b"\x01", b"echo", b"x"],          # majortomo's empty first frame
    [b"MDPW02", b"\x01"],                              # READY without service
    [b"MDPW02", b"\x01", b"echo", b"extra"],           # READY with extra frame
    [b"MDPW02", b"\x02", b"C1", b"", b"x"],            # REQUEST is broker -> worker only
    [b"MDPW02", b"\x04", b"C1", b"x"],                 # FINAL without the empty delimiter
    [b"MDPW02", b"\x04", b"", b"", b"x"],              # FINAL with an empty address
    [b"MDPW02", b"\x04", b"C1", b""],                  # FINAL without a body
    [b"MDPW02", b"\x05", b"x"],                        # HEARTBEAT with extra frame
    [b"MDPW02", b"\x07"],                              # unknown command
    [b"MDPW02", b"\x01\x01", b"echo"],                 # two-byte command
])
def test_broker_rejects_invalid(frames):
    with pytest.raises(ProtocolError):
        SPEC.decode_for_broker(frames)


@pytest.mark.parametrize("frames", [
    [b"MDPC02", b"\x03", b"echo"],                     # FINAL without body
    [b"MDPC02", b"\x01", b"echo", b"x"],               # REQUEST to a client
    [b"MDPW02", b"\x03", b"echo", b"x"],
    [b"", b"MDPC02", b"\x04", b"x"],
])
def test_client_rejects_invalid(frames):
    with pytest.raises(ProtocolError):
        SPEC.decode_for_client(frames)


@pytest.mark.parametrize("frames", [
    [b"MDPW02", b"\x02", b"C1", b"x", b"q"],
    [b"MDPW02", b"\x02", b"C1", b""],
    [b"MDPW02", b"\x01", b"echo"],
    [b"MDPW02", b"\x06", b""],
    [b"MDPC02", b"\x02", b"C1", b"", b"q"],
])
def test_worker_rejects_invalid(frames):
    with pytest.raises(ProtocolError):
        SPEC.decode_for_worker(frames)


# -- majortomo framing -----------------------------------------------------------------
def test_majortomo_framing_matches_the_package():
    from majortomo import protocol as mp
    assert MAJORTOMO.client_request(b"echo", [b"a"]) == [b"", mp.CLIENT_HEADER, mp.REQUEST, b"echo", b"a"]
    assert MAJORTOMO.client_reply(True, b"echo", [b"a"]) == [b"", mp.CLIENT_HEADER, mp.FINAL, b"a"]
    assert MAJORTOMO.client_reply(False, b"echo", [b"a"]) == [b"", mp.CLIENT_HEADER, mp.PARTIAL, b"a"]
    assert MAJORTOMO.ready(b"echo") == [b"", mp.WORKER_HEADER, mp.READY, b"echo"]
    assert MAJORTOMO.worker_request(b"C", [b"q"]) == [b"", mp.WORKER_HEADER, mp.REQUEST, b"C", b"", b"q"]
    assert MAJORTOMO.heartbeat == [b"", mp.WORKER_HEADER, mp.HEARTBEAT]
    m = MAJORTOMO.decode_for_broker([b"", b"MDPC02", b"\x02", b"echo", b"a"])
    assert (m.command, m.service, m.body) == (REQUEST, b"echo", [b"a"])
    m = MAJORTOMO.decode_for_client([b"", b"MDPC02", b"\x04", b"a"])
    assert (m.command, m.service, m.body) == (FINAL, None, [b"a"])
    with pytest.raises(ProtocolError):
        MAJORTOMO.decode_for_broker([b"MDPC02", b"\x01", b"echo", b"a"])


def test_framing_lookup():
    assert framing("spec") is SPEC and framing(MAJORTOMO) is MAJORTOMO
    with pytest.raises(ValueError):
        framing("zmtp")


# -- round trips and fuzzing -------------------------------------------------------------
names = st.lists(st.integers(0x20, 0x7e), min_size=1, max_size=20).map(bytes)
bodies = st.lists(st.binary(max_size=50), min_size=1, max_size=5)


@pytest.mark.parametrize("fr", [SPEC, MAJORTOMO])
@given(service=names, body=bodies, address=st.binary(min_size=1, max_size=10), final=st.booleans())
@settings(max_examples=200, deadline=None)
def test_round_trips(fr, service, body, address, final):
    m = fr.decode_for_broker(fr.client_request(service, body))
    assert (m.command, m.service, m.body) == (REQUEST, service, body)
    m = fr.decode_for_client(fr.client_reply(final, service, body))
    assert m.command == (FINAL if final else PARTIAL) and m.body == body
    m = fr.decode_for_broker(fr.worker_reply(final, address, body))
    assert (m.command, m.address, m.body) == (FINAL if final else PARTIAL, address, body)
    m = fr.decode_for_worker(fr.worker_request(address, body))
    assert (m.command, m.address, m.body) == (REQUEST, address, body)
    assert fr.decode_for_broker(fr.ready(service)).service == service


frame = st.one_of(st.binary(max_size=12), st.sampled_from([b"", b"MDPC02", b"MDPW02", b"\x01", b"\x02", b"\x03",
                                                           b"\x04", b"\x05", b"\x06", b"echo"]))


@pytest.mark.parametrize("fr", [SPEC, MAJORTOMO])
@given(frames=st.lists(frame, max_size=8))
@settings(max_examples=500, deadline=None)
def test_byte_soup_gives_typed_errors(fr, frames):
    for decode in (fr.decode_for_broker, fr.decode_for_client, fr.decode_for_worker):
        try:
            decode(list(frames))
        except ProtocolError:
            pass


# -- zactors extensions: error replies, idempotent READY -------------------------------------------
def test_error_reply_body_round_trips_and_is_bounded():
    from zactors.patterns.majordomo.protocol import ERROR_TEXT_MAX, error_body, parse_error
    assert error_body("KeyError", "'k'") == [b"\x00MDP-ERROR", b"KeyError", b"'k'"]
    assert parse_error(error_body("KeyError", "'k'")) == ("KeyError", "'k'")
    long = error_body("E" * 5000, "\u00e9" * 5000)
    assert all(len(frame) <= ERROR_TEXT_MAX for frame in long)
    assert parse_error(long)[1].endswith("...")
    for body in ([b"\x00MDP-ERROR", b"x"], [b"MDP-ERROR", b"a", b"b"], [b"ok"], [], [b"\x00MDP-ERROR", b"a", b"b", b"c"]):
        assert parse_error(body) is None
    assert parse_error([b"\x00MDP-ERROR", b"\xff\xfe", b"\xc3"]) == ("\ufffd\ufffd", "\ufffd")


@pytest.mark.parametrize("framing", [SPEC, MAJORTOMO])
def test_ready_may_say_the_worker_is_idempotent(framing):
    assert framing.decode_for_broker(framing.ready(b"echo", True)).body == (b"idempotent",)
    assert framing.decode_for_broker(framing.ready(b"echo")).body == ()
    with pytest.raises(ProtocolError):
        framing.decode_for_broker(framing.ready(b"echo") + [b"something else"])
