"""Every CLI test runs with its own empty contexts store and no $ZACTORS_CONTEXT (in-process and subprocess)."""
import pytest

from tests.apps import cli_helpers


@pytest.fixture(autouse=True)
def _own_contexts(tmp_path_factory, monkeypatch):
    config = str(tmp_path_factory.mktemp("config"))
    monkeypatch.setenv("XDG_CONFIG_HOME", config)
    monkeypatch.delenv("ZACTORS_CONTEXT", raising=False)
    env = dict(cli_helpers.ENV, XDG_CONFIG_HOME=config)
    env.pop("ZACTORS_CONTEXT", None)
    monkeypatch.setattr(cli_helpers, "ENV", env)
