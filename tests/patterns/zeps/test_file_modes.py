"""Journals hold message bodies: created 0600 in 0700 directories, whatever the umask (issue 20)."""
import os
import stat

import pytest

from .test_broker import attached, publish

pytestmark = pytest.mark.timeout(60)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_journal_files_are_the_owners_only(tmp_path, raw):
    from zactors.patterns.zeps.broker import Broker
    old = os.umask(0o022)          # the usual umask, under which files were created 0644 in 0755 directories
    try:
        broker = Broker(str(tmp_path / "journal"))
        try:
            publish(attached(raw, broker, b"orders"), [(b"k", b"a body")])
        finally:
            broker.destroy()
    finally:
        os.umask(old)
    root = tmp_path / "journal"
    assert _mode(root) == 0o700
    made = [os.path.join(d, name) for d, _, names in os.walk(root) for name in names]
    assert made and any(name.endswith(".seg") for name in made), made
    for d, dirs, _ in os.walk(root):
        for name in dirs:
            assert _mode(os.path.join(d, name)) == 0o700, name
    for path in made:
        assert _mode(path) & 0o077 == 0, (path, oct(_mode(path)))
