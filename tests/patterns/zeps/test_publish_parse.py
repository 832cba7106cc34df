"""The broker's PUBLISH parse: the C one (``_deliver.parse_publish``) and its pure-Python twin
(``protocol.py_parse_publish``, the one PUBLISH parser) agree on every frame."""
import pytest
from hypothesis import given, settings, strategies as st

from zactors.actors.purepython import pure_python_requested
from zactors.patterns.zeps import protocol as p

from tests import ctoolchain

pytestmark = pytest.mark.timeout(120)

try:  # imported directly: both twins are tested whatever ZACTORS_PURE_PYTHON says
    from zactors.patterns.zeps import _deliver
except ImportError:
    _deliver = None

PARSERS = [pytest.param(p.py_parse_publish, id="python")]
if _deliver is not None:
    PARSERS.append(pytest.param(_deliver.parse_publish, id="c"))


@pytest.mark.skipif(pure_python_requested(), reason="pure Python asked for")
@pytest.mark.skipif(bool(ctoolchain.missing()), reason="pure Python: %s" % ctoolchain.missing())
def test_the_c_parse_is_built_and_used():
    assert _deliver is not None and p.parse_publish is _deliver.parse_publish


@pytest.mark.parametrize("parse", PARSERS)
def test_parse_publish_takes_a_publish_and_nothing_else(parse):
    frame = p.publish(b"key", b"body")
    assert parse(frame) == (b"key", b"body")
    assert parse(p.publish(b"", b"")) == (b"", b"")
    assert parse(frame[:-1]) is None and parse(frame + b"x") is None and parse(b"") is None
    assert parse(p.PING_FRAME) is None
    with pytest.raises(TypeError):
        parse(bytearray(frame))


@pytest.mark.skipif(_deliver is None, reason="the C extension is not built")
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=40), st.data())
def test_the_twins_agree_on_any_frame(key, body, data):
    frame = bytearray(p.publish(key[:255], body))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        del frame[data.draw(st.integers(0, len(frame))):]
    frame = bytes(frame)
    assert _deliver.parse_publish(frame) == p.py_parse_publish(frame)
