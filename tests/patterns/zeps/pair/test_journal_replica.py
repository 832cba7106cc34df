"""The journal's replica helpers (actors/journal/replica.py): a copy that starts at the source's first
sequence, adopts its epochs, and knows how far it agrees with it."""
import pytest

from zactors.actors.journal import Journal
from zactors.actors.journal import replica as jr


def test_a_copy_starts_at_the_sources_first_sequence_with_its_epochs(tmp_path):
    directory = str(tmp_path / "s")
    jr.create_at(directory, 500, [(1, 1), (2, 300)])
    with pytest.raises(ValueError, match="exists"):
        jr.create_at(directory, 7, [(1, 1)])
    with Journal(directory) as journal:
        assert (journal.first_seq, journal.last_seq, journal.epochs) == (500, 499, [(1, 1), (2, 300)])
        record = journal.append_record(b"k", b"v", 123.0, (b"pid", 9))
        assert record.seq == 500 and record.timestamp == 123.0
        assert jr.new_epoch(journal) == 3
    assert jr.position(directory) == ([(1, 1), (2, 300), (3, 501)], 500, 500)
    with Journal(directory) as journal:                # the history survives a clean reopen, as adopted
        assert journal.epochs == [(1, 1), (2, 300), (3, 501)] and journal.producers() == {b"pid": (9, 500)}
        jr.set_epochs(journal, [(1, 1), (4, 501)])
        with pytest.raises(ValueError):
            jr.set_epochs(journal, [(2, 1), (1, 5)])
    assert jr.epochs_of(directory) == [(1, 1), (4, 501)]


@pytest.mark.parametrize("source, source_last, copy, copy_last, agreed", [
    ([(1, 1)], 130, [(1, 1)], 100, 100),                       # behind: all of it agrees
    ([(1, 1)], 130, [(1, 1), (2, 101)], 150, 100),             # split brain: it took over at 101 alone
    ([(1, 1), (2, 3301)], 9000, [(1, 1), (2, 4001)], 4000, 3300),  # the old primary wrote 3301-4000 alone
    ([(1, 1), (2, 101)], 150, [(1, 1), (2, 101)], 150, 150),   # adopted the same history: equal
    ([(1, 1), (2, 101)], 150, [(1, 1), (3, 101)], 120, 100),   # its own epoch 3 from 101: not the source's
    ([(1, 1)], 0, [(1, 1)], 5, 0),                             # the source has nothing
])
def test_how_far_a_copy_agrees_with_its_source(source, source_last, copy, copy_last, agreed):
    assert jr.agreed(source, source_last, copy, copy_last) == agreed


def test_resume_point_is_check_resume_without_a_journal(tmp_path):
    with Journal(str(tmp_path / "j")) as journal:
        for i in range(10):
            journal.append(b"k", b"%d" % i)
        jr.new_epoch(journal)
        for i in range(3):
            journal.append(b"k", b"%d" % i)
        for epoch, seq in ((1, 5), (1, 10), (1, 11), (2, 13), (2, 14), (7, 1)):
            assert jr.resume_point(journal.epochs, journal.last_seq, epoch, seq) == journal.check_resume(epoch, seq)


@pytest.mark.parametrize("cut_after", [0, 1, 37, 99, 100, 101, 150, 199])
def test_truncate_after_keeps_exactly_the_records_up_to_the_cut_across_segments(tmp_path, cut_after):
    from zactors.actors.journal import JournalReader
    directory = str(tmp_path / "s")
    with Journal(directory, segment_bytes=2048) as journal:    # many small segments
        for i in range(1, 201):
            journal.append_record(b"k", b"body %d" % i, None, (b"p%d" % (i % 3), i) if i % 2 else None)
    with JournalReader(directory) as reader:
        before = list(reader.records(producers=True))
    assert jr.truncate_after(directory, cut_after) == 200 - cut_after
    with Journal(directory) as journal:
        assert journal.last_seq == cut_after
        journal.append(b"k", b"after")                             # the sequence goes on from the cut
        journal.write()
        producers = journal.producers()
    with JournalReader(directory) as reader:
        after = list(reader.records(producers=True))
    assert after[:-1] == before[:cut_after] and after[-1][3] == b"after" and after[-1][0] == cut_after + 1
    expected = {}
    for r in before[:cut_after]:
        if len(r) > 4:
            expected[r[4]] = (r[5], r[0])
    assert producers == expected


def test_truncate_after_before_the_first_record_asks_for_a_full_copy(tmp_path):
    directory = str(tmp_path / "s")
    jr.create_at(directory, 50, [(1, 1)])
    with Journal(directory) as journal:
        for i in range(10):
            journal.append(b"k", b"%d" % i)
    assert jr.truncate_after(directory, 10) == -1 and jr.truncate_after(directory, 49) == 10
