"""CURVE keys and the ZAP authenticator, over real tcp on 127.0.0.1."""
import os
import stat

import pytest
import zmq

from zactors.actors import CommandError
from zactors.actors.auth import (ZAP_ENDPOINT, Authenticator, create_keypair, curve_client, curve_server,
                         generate_keypair, load_keypair, load_public_key, plain_client, plain_server)
from zactors.actors.sockets import Socket, context
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)

#: how long a refused client gets to (not) deliver its message
REFUSAL_WINDOW = 1.5


@pytest.fixture
def sockets():
    made = []

    def make(kind):
        sock = context().socket(kind, socket_class=Socket)
        sock.linger = 0
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close(0)


@pytest.fixture
def keydir(tmp_path):
    allowed = tmp_path / "allowed"
    create_keypair(str(allowed), "good")
    return allowed


@pytest.fixture
def auth(keydir):
    actor = Authenticator(curve=str(keydir))
    yield actor
    actor.destroy()


def _server(sockets, keys):
    pull = sockets(zmq.PULL)
    curve_server(pull, keys)
    pull.bind("tcp://127.0.0.1:*")
    return pull, pull.last_endpoint.decode()


def _send_from(sockets, endpoint, secure, payload):
    push = sockets(zmq.PUSH)
    secure(push)
    push.connect(endpoint)
    push.send_multipart([payload], timeout=5)
    return push


def test_keypair_files_round_trip(tmp_path):
    public_path, secret_path = create_keypair(str(tmp_path / "keys"), "node")
    assert public_path.endswith("node.key") and secret_path.endswith("node.key_secret")
    pair = load_keypair(secret_path)
    assert len(pair.public) == 40 and len(pair.secret) == 40
    assert zmq.curve_public(pair.secret) == pair.public
    assert load_public_key(public_path) == pair.public
    assert load_keypair(public_path).secret is None
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        create_keypair(str(tmp_path / "keys"), "node")


def test_bad_keys_are_clear_errors(sockets):
    with pytest.raises(ValueError):
        curve_server(sockets(zmq.PULL), b"short")


def test_curve_client_with_listed_key_gets_through(auth, keydir, sockets):
    server = generate_keypair()
    pull, endpoint = _server(sockets, server)
    good = load_keypair(str(keydir / "good.key_secret"))
    _send_from(sockets, endpoint, lambda s: curve_client(s, good, server.public), b"hello")
    assert pull.recv_multipart(timeout=10) == [b"hello"]
    assert auth.call("$STATS")["allowed"] >= 1


def test_curve_client_with_unlisted_key_is_refused(auth, keydir, sockets):
    server = generate_keypair()
    pull, endpoint = _server(sockets, server)
    stranger = generate_keypair()
    _send_from(sockets, endpoint, lambda s: curve_client(s, stranger, server.public), b"intruder")
    wait_for(lambda: auth.call("$STATS").get("denied", 0) >= 1, 10, "a ZAP denial")
    with pytest.raises(zmq.Again):
        pull.recv_multipart(timeout=REFUSAL_WINDOW)
    # The listed key still gets in on the same server afterwards.
    good = load_keypair(str(keydir / "good.key_secret"))
    _send_from(sockets, endpoint, lambda s: curve_client(s, good, server.public), b"friend")
    assert pull.recv_multipart(timeout=10) == [b"friend"]


def test_client_with_wrong_server_key_is_refused(auth, keydir, sockets):
    server = generate_keypair()
    pull, endpoint = _server(sockets, server)
    good = load_keypair(str(keydir / "good.key_secret"))
    _send_from(sockets, endpoint, lambda s: curve_client(s, good, generate_keypair().public), b"lost")
    with pytest.raises(zmq.Again):
        pull.recv_multipart(timeout=REFUSAL_WINDOW)


def test_plain_text_client_is_refused_by_curve_server(auth, sockets):
    pull, endpoint = _server(sockets, generate_keypair())
    _send_from(sockets, endpoint, lambda s: None, b"clear text")
    with pytest.raises(zmq.Again):
        pull.recv_multipart(timeout=REFUSAL_WINDOW)


def test_curve_any_and_address_deny(auth, sockets):
    server = generate_keypair()
    pull, endpoint = _server(sockets, server)
    auth.call("CURVE_ANY")
    anyone = generate_keypair()
    _send_from(sockets, endpoint, lambda s: curve_client(s, anyone, server.public), b"anyone")
    assert pull.recv_multipart(timeout=10) == [b"anyone"]
    auth.call("DENY", "127.0.0.1")
    _send_from(sockets, endpoint, lambda s: curve_client(s, generate_keypair(), server.public), b"denied")
    with pytest.raises(zmq.Again):
        pull.recv_multipart(timeout=REFUSAL_WINDOW)
    with pytest.raises(CommandError):  # allow and deny do not mix
        auth.call("ALLOW", "127.0.0.1")


def test_plain_users(auth, sockets):
    auth.call("PLAIN", {"alice": "s3cret"})
    pull = sockets(zmq.PULL)
    plain_server(pull)
    pull.bind("tcp://127.0.0.1:*")
    endpoint = pull.last_endpoint.decode()
    _send_from(sockets, endpoint, lambda s: plain_client(s, "alice", "wrong"), b"guess")
    with pytest.raises(zmq.Again):
        pull.recv_multipart(timeout=REFUSAL_WINDOW)
    _send_from(sockets, endpoint, lambda s: plain_client(s, "alice", "s3cret"), b"alice")
    assert pull.recv_multipart(timeout=10) == [b"alice"]


def test_curve_command_rejects_missing_directory(auth, tmp_path):
    with pytest.raises(CommandError):
        auth.call("CURVE", str(tmp_path / "nowhere"))
    assert auth.call("CURVE", str(tmp_path)) == 0


def test_malformed_zap_requests_are_answered_and_counted(auth, sockets):
    req = sockets(zmq.REQ)
    req.connect(ZAP_ENDPOINT)
    for request in ([b"x"], [b"1.0", b"7", b"d", b"127.0.0.1", b"", b"CURVE", b"abc"],
                    [b"9.9", b"8", b"d", b"127.0.0.1", b"", b"NULL"]):
        req.send_multipart(request, timeout=5)
        reply = req.recv_multipart(timeout=5)
        assert reply[2] in (b"400", b"500")
    stats = auth.call("$STATS")
    assert stats["malformed"] >= 1 and stats["denied"] >= 2
    assert auth.alive


def test_one_authenticator_per_context(auth):
    with pytest.raises(RuntimeError, match="another authenticator"):
        Authenticator()


def _umask_now():
    with open("/proc/self/status") as f:   # read without setting it (os.umask can only swap)
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    pytest.skip("no Umask line in /proc/self/status")


def test_create_keypair_leaves_the_process_umask_alone(tmp_path):
    """Issue 20: create_keypair set the umask of the whole process to 077 while it wrote (racing other threads)."""
    import threading
    old = os.umask(0o022)
    seen = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.add(_umask_now())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(30):
            create_keypair(str(tmp_path / "keys"), "k%d" % i)
    finally:
        done.set()
        watcher.join()
        os.umask(old)
    assert seen == {0o022}
    keys = tmp_path / "keys"
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(keys / "k3.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(keys / "k3.key").st_mode) == 0o644
    assert sorted(os.listdir(keys)) == sorted("k%d.key%s" % (i, tail) for i in range(30) for tail in ("", "_secret"))
