"""Connection contexts: ``zactors context ...`` and ``--context`` / $ZACTORS_CONTEXT on client commands."""
import json
import os
import stat

import pytest

from zactors.actors.auth import Authenticator, create_keypair, load_keypair
from zactors.apps import contexts
from zactors.patterns.majordomo import Broker, Worker
from tests.apps.cli_helpers import run_main, zactors

pytestmark = pytest.mark.timeout(60)


run = run_main   # zactors ARGV in this process: (status, stdout, stderr)


class Echo(Worker):
    def handle(self, request):
        return request


@pytest.fixture
def broker():
    with Broker("tcp://127.0.0.1:*") as broker:
        yield broker


def test_add_list_show_select_remove(capsys):
    assert run(capsys, "context", "list")[0] == 0
    assert run(capsys, "context", "add", "dev", "--mdp", "tcp://127.0.0.1:5999", "--zeps", "tcp://127.0.0.1:5998",
               "--clone", "tcp://127.0.0.1:5990", "--clone", "tcp://127.0.0.1:5980", "--select")[0] == 0
    assert run(capsys, "context", "add", "ops", "--zeps", "tcp://localhost:7000")[0] == 0
    status, out, _ = run(capsys, "context", "list")
    assert status == 0
    assert out.splitlines() == [
        "* dev  mdp=tcp://127.0.0.1:5999 zeps=tcp://127.0.0.1:5998 clone=tcp://127.0.0.1:5990,tcp://127.0.0.1:5980",
        "  ops  zeps=tcp://localhost:7000"]
    status, out, _ = run(capsys, "context", "show")               # the selected one
    assert status == 0 and out.splitlines()[:3] == ["name: dev", "mdp: tcp://127.0.0.1:5999",
                                                    "zeps: tcp://127.0.0.1:5998"]
    assert run(capsys, "context", "show", "ops")[1] == "name: ops\nzeps: tcp://localhost:7000\n"
    assert run(capsys, "context", "select", "ops")[0] == 0
    assert contexts.selected() == "ops"
    assert run(capsys, "context", "remove", "ops")[0] == 0
    assert contexts.selected() is None and contexts.names() == ["dev"]
    status, _, err = run(capsys, "context", "show")
    assert status == 1 and "no context in use" in err


def test_the_store_is_private(capsys):
    assert run(capsys, "context", "add", "dev", "--mdp", "tcp://127.0.0.1:5999")[0] == 0
    path = contexts.store_path()
    assert path == os.path.join(os.environ["XDG_CONFIG_HOME"], "zactors", "contexts.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert json.load(open(path))["contexts"]["dev"] == {"mdp": "tcp://127.0.0.1:5999"}


@pytest.mark.parametrize("argv, says", [
    (["context", "add", "dev"], "give at least one address"),
    (["context", "add", "b@d", "--mdp", "tcp://127.0.0.1:1"], "is not a context name"),
    (["context", "add", "dev", "--mdp", "127.0.0.1:1"], "has no transport"),
    (["context", "add", "dev", "--mdp", "tcp://127.0.0.1:1", "--curve-server", "/nonexistent.key"], "no such file"),
    (["context", "add", "dev", "--dashboard", "localhost:8765"], "is not a dashboard URL"),
    (["context", "show", "nope"], "no context 'nope'"),
    (["context", "remove", "nope"], "no context 'nope'"),
    (["context", "select", "nope"], "no context 'nope'"),
    (["context", "select"], "one of the arguments"),
    (["mdp", "mmi", "echo", "--context", "nope"], "zactors mdp mmi: error: no context 'nope'"),
])
def test_mistakes_are_one_line_and_exit_2(capsys, argv, says):
    status, _, err = run(capsys, *argv)
    assert status == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_an_existing_name_needs_force(capsys):
    assert run(capsys, "context", "add", "dev", "--mdp", "tcp://127.0.0.1:1")[0] == 0
    status, _, err = run(capsys, "context", "add", "dev", "--zeps", "tcp://127.0.0.1:2")
    assert status == 2 and "add --force" in err
    assert run(capsys, "context", "add", "dev", "--zeps", "tcp://127.0.0.1:2", "--force")[0] == 0
    assert contexts.get("dev") == {"zeps": "tcp://127.0.0.1:2"}


def test_a_client_command_takes_its_endpoint_from_the_context(capsys, broker, monkeypatch):
    with Echo(broker.endpoint, "echo"):
        assert run(capsys, "context", "add", "here", "--mdp", broker.endpoint)[0] == 0
        status, out, _ = run(capsys, "mdp", "request", "--context", "here", "echo", "hi")
        assert (status, out) == (0, 'FINAL   ["hi"]\n')
        # $ZACTORS_CONTEXT, then the selected context
        monkeypatch.setenv("ZACTORS_CONTEXT", "here")
        assert run(capsys, "mdp", "mmi", "echo")[1] == "echo: has workers (200)\n"
        monkeypatch.delenv("ZACTORS_CONTEXT")
        assert run(capsys, "context", "select", "here")[0] == 0
        assert run(capsys, "mdp", "mmi", "echo")[1] == "echo: has workers (200)\n"
        # an option given wins over the context
        assert run(capsys, "mdp", "mmi", "echo", "--connect", "tcp://127.0.0.1:1", "--timeout", "0.3")[0] == 3


def test_a_context_takes_a_zeps_pair(capsys, tmp_path):
    # the operations guide's HA section: clients of a pair are given both brokers, a context too
    from zactors.patterns.zeps import Broker as ZepsBroker
    with ZepsBroker(str(tmp_path / "zeps"), "tcp://127.0.0.1:*") as zeps:
        pair = "%s,tcp://127.0.0.1:1" % zeps.endpoint       # the second broker of the pair is down
        assert run(capsys, "context", "add", "ha", "--zeps", pair, "--select")[0] == 0
        assert run(capsys, "context", "show", "ha")[1] == "name: ha\nzeps: %s\n" % pair
        status, _, err = run(capsys, "zeps", "publish", "orders", "k", "hello")
        assert status == 0, err
        status, out, err = run(capsys, "zeps", "subscribe", "orders", "--from", "1", "--count", "1")
        assert status == 0 and "hello" in out, err


def test_an_unknown_context_from_the_environment_is_named(capsys, monkeypatch):
    monkeypatch.setenv("ZACTORS_CONTEXT", "gone")
    status, _, err = run(capsys, "zeps", "streams")
    assert status == 2 and "no context 'gone' (from $ZACTORS_CONTEXT)" in err


def test_a_context_without_the_patterns_endpoint_says_so(capsys):
    assert run(capsys, "context", "add", "mq", "--mdp", "tcp://127.0.0.1:1", "--select")[0] == 0
    status, _, err = run(capsys, "clone", "get", "k")
    assert status == 2
    assert "context 'mq' (the selected one) has no clone address: give --connect" in err


def test_the_contexts_keys_are_used(capsys, tmp_path):
    server_public, server_secret = create_keypair(tmp_path, "server")
    client_public, client_secret = create_keypair(tmp_path / "clients", "me")
    with Authenticator(curve=str(tmp_path / "clients")), \
            Broker("tcp://127.0.0.1:*", curve=load_keypair(server_secret)) as broker, \
            Echo(broker.endpoint, "echo", curve=(load_keypair(server_secret).public, load_keypair(client_secret))):
        assert run(capsys, "context", "add", "safe", "--mdp", broker.endpoint, "--curve", client_secret,
                   "--curve-server", server_public)[0] == 0
        assert contexts.get("safe")["curve"] == os.path.abspath(client_secret)
        assert run(capsys, "mdp", "request", "--context", "safe", "echo", "hi")[:2] == (0, 'FINAL   ["hi"]\n')
        # the same broker refuses a client without the context's keys
        status, _, err = run(capsys, "mdp", "mmi", "echo", "--connect", broker.endpoint, "--timeout", "1")
        assert status == 4, err


def test_a_corrupt_store_is_one_line(capsys):
    path = contexts.store_path()
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("{not json")
    status, _, err = run(capsys, "context", "list")
    assert status == 1 and "cannot read %s" % path in err and "fix or remove" in err


def test_the_real_command(tmp_path):
    result = zactors("context", "add", "dev", "--zeps", "tcp://127.0.0.1:5998", "--select")
    assert result.returncode == 0, result.stderr
    result = zactors("context", "list")
    assert result.returncode == 0 and result.stdout == "* dev  zeps=tcp://127.0.0.1:5998\n"


def test_status_takes_the_dashboard_from_the_context(capsys):
    assert run(capsys, "context", "add", "far", "--dashboard", "http://127.0.0.1:1/", "--select")[0] == 0
    status, _, err = run(capsys, "status", "--timeout", "2")
    assert status == 3 and "no dashboard answered at http://127.0.0.1:1/" in err
    assert run(capsys, "context", "show")[1] == "name: far\ndashboard: http://127.0.0.1:1/\n"
