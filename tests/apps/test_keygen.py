"""``zactors keygen`` writes loadable certificate files and never overwrites."""
import os
import stat

import pytest
import zmq

from zactors.actors.auth import load_keypair
from zactors.apps.cli import main

pytestmark = pytest.mark.timeout(90)


@pytest.mark.timeout(30)
def test_keygen_writes_a_keypair(tmp_path, capsys):
    directory = tmp_path / "keys"
    assert main(["keygen", "--dir", str(directory), "--name", "node"]) == 0
    out = capsys.readouterr().out
    public, secret = directory / "node.key", directory / "node.key_secret"
    assert str(public) in out and str(secret) in out
    keys = load_keypair(str(secret))
    assert zmq.curve_public(keys.secret) == keys.public == load_keypair(str(public)).public
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert main(["keygen", "--dir", str(directory), "--name", "node"]) == 1
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("name, says", [("", "empty"), ("a/b", "give a file name, not a path")])
def test_keygen_names_a_bad_name(tmp_path, capsys, name, says):
    with pytest.raises(SystemExit) as exit:
        main(["keygen", "--dir", str(tmp_path), "--name", name])
    assert exit.value.code == 2 and says in capsys.readouterr().err
