"""A ZEPS broker that refuses our key says so at once, as Majordomo and Clone do (HandshakeFailed; CLI exit 4)."""
import time

import pytest

from zactors.actors.auth import Authenticator, create_keypair, generate_keypair, load_keypair
from zactors.apps.cli import main
from zactors.patterns.zeps import HandshakeFailed, Publisher, Subscriber, query

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def curve_broker(journal_dir, tmp_path):
    """A CURVE broker that accepts only the key in tmp_path/clients; yields (broker, server keys)."""
    from zactors.patterns.zeps.broker import Broker

    server_public, server_secret = create_keypair(tmp_path, "server")
    create_keypair(tmp_path / "clients", "the-only-client")
    auth = Authenticator(curve=str(tmp_path / "clients"))
    server = load_keypair(server_secret)
    broker = Broker(journal_dir, curve=server)
    try:
        yield broker, server, server_public
    finally:
        broker.destroy()
        auth.destroy()


@pytest.mark.parametrize("client", ["publisher", "subscriber", "query"])
def test_a_refused_key_raises_handshake_failed_at_once(curve_broker, client):
    broker, server, _ = curve_broker
    stranger = generate_keypair()
    open_ = {"publisher": lambda curve: Publisher(broker.endpoint, "s", curve=curve, timeout=20).close(),
             "subscriber": lambda curve: Subscriber(broker.endpoint, "s", curve=curve, timeout=20).destroy(),
             "query": lambda curve: query(broker.endpoint, curve=curve, timeout=20)}[client]
    for curve, says in [((server.public, stranger), "refused our key"),
                        ((stranger.public, stranger), "the server public key we use is not its key"),
                        (None, "it uses CURVE")]:
        started = time.monotonic()
        with pytest.raises(HandshakeFailed, match=says) as caught:
            open_(curve)
        assert time.monotonic() - started < 5          # not the 20 s timeout
        assert broker.endpoint in str(caught.value) and "ZEPS broker" in str(caught.value)


def test_the_cli_says_refused_in_one_line_with_exit_status_4(curve_broker, capsys, tmp_path):
    broker, _, server_public = curve_broker
    create_keypair(tmp_path / "elsewhere", "stranger")
    stranger = str(tmp_path / "elsewhere" / "stranger.key_secret")
    c = ["--connect", broker.endpoint, "--curve-server", server_public, "--curve", stranger, "--timeout", "20"]
    for argv in (["zeps", "publish", "s", "k", "body"], ["zeps", "subscribe", "s"], ["zeps", "streams"]):
        capsys.readouterr()
        started = time.monotonic()
        assert main(["-q", *argv, *c]) == 4, argv
        err = capsys.readouterr().err.strip()
        assert time.monotonic() - started < 5
        assert "\n" not in err and "refused our key" in err and "Traceback" not in err, err
    assert broker.call("INFO")["streams"] == {}        # nothing was attached
