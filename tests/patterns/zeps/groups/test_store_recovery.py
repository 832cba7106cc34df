"""A consumer groups' store whose newest generation cannot be read falls back to the previous one and
leaves nothing of the bad one open (leftovers item 3): its journal opened, its records failed to
decode, and its descriptors and writer lock were kept until the process ended."""
import os

import msgpack

from tests.conftest import open_under
from zactors.actors.journal import Journal
from zactors.patterns.zeps import group_store


def test_an_unreadable_generation_is_closed_and_the_previous_one_is_used(tmp_path):
    directory = str(tmp_path / "s.groups")
    generation, journal, records = group_store.load(directory)
    journal.append(b"", msgpack.packb(["X", "g"]))
    journal.close()
    bad = os.path.join(directory, "%016d" % 2)
    journal = Journal(bad)
    journal.append(b"", b"\xc1 not msgpack")    # a record whose CRC is fine and whose body is not a record
    journal.close()
    generation, journal, records = group_store.load(directory)
    try:
        assert generation == 1 and records == [["E"], ["X", "g"]]
        assert not os.path.exists(bad)
        assert [path for path in open_under(tmp_path) if not path.startswith(journal.directory + os.sep)] == []
    finally:
        journal.close()
    assert open_under(tmp_path) == []
    generation, journal, records = group_store.load(directory)     # and again
    journal.close()
    assert generation == 1
