"""The dashboard tests' node: ``zactors up`` in this process on free loopback ports (helpers.start)."""
import pytest

from .helpers import start


@pytest.fixture
def node(tmp_path):
    """A running node, stopped after the test (test_browser.py has its own: a node in a process)."""
    up = start(tmp_path)
    yield up
    up.stop()
