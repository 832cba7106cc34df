"""Journal against a list model: random appends, writes, reopens, retention and reads."""
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from zactors.actors.journal import Journal, JournalReader, Record, SequenceGone

pytestmark = pytest.mark.timeout(300)

blobs = st.binary(max_size=300)


class JournalModel(RuleBasedStateMachine):
    @initialize(segment_bytes=st.sampled_from([256, 1024, 8192]),
                cache=st.sampled_from([0, 2048, 1 << 20]))
    def open(self, segment_bytes, cache):
        self.dir = tempfile.mkdtemp(prefix="journal-model-")
        self.options = dict(segment_bytes=segment_bytes, tail_cache_bytes=cache)
        self.j = Journal(self.dir, **self.options)
        self.records = []           # the model: every record ever appended
        self.first = 1              # first retained sequence
        self.written = 0
        self.clock = 1000.0

    def teardown(self):
        if getattr(self, "j", None) is not None:
            self.j.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(key=st.binary(max_size=20), body=blobs, dt=st.sampled_from([0.0, 0.5, 3.0]))
    def append(self, key, body, dt):
        self.clock += dt
        seq = self.j.append(key, body, timestamp=self.clock)
        assert seq == len(self.records) + 1
        self.records.append(Record(seq, self.clock, key, body))

    @rule(n=st.integers(1, 60), size=st.integers(0, 200))
    def append_many(self, n, size):
        for _ in range(n):
            self.append(b"m", b"z" * size, 0.25)

    @rule()
    def write(self):
        assert self.j.write() == len(self.records)
        self.written = len(self.records)

    @rule()
    def sync(self):
        self.j.write()
        assert self.j.sync() == len(self.records)
        self.written = len(self.records)

    @rule(sync=st.booleans())
    def reopen(self, sync):
        self.j.close(sync=sync)
        self.j = Journal(self.dir, **self.options)
        self.written = len(self.records)
        assert self.j.written_seq == self.j.last_seq == len(self.records)

    @rule()
    def crash(self):
        """What a kill -9 leaves: the files as they are now, unwritten records gone."""
        snapshot = tempfile.mkdtemp(prefix="journal-model-")
        shutil.copytree(self.dir, snapshot, dirs_exist_ok=True)
        written = self.j.written_seq
        self.j.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = snapshot
        del self.records[written:]
        self.j = Journal(self.dir, **self.options)
        self.written = written
        assert self.j.last_seq == written

    @rule(keep=st.integers(0, 20000))
    def retain_bytes(self, keep):
        self.j.write()
        self.written = len(self.records)
        self.j.retain_bytes = keep
        self.j.apply_retention()
        self.j.retain_bytes = None
        assert self.j.first_seq >= self.first
        self.first = self.j.first_seq

    @rule(age=st.floats(0, 200))
    def retain_age(self, age):
        self.j.write()
        self.written = len(self.records)
        self.j.retain_seconds = age
        self.j.apply_retention(now=self.clock)
        self.j.retain_seconds = None
        assert self.j.first_seq >= self.first
        removed = self.j.first_seq > self.first
        self.first = self.j.first_seq
        if removed:
            # whatever was removed ended before the cutoff
            assert self.records[self.first - 2].timestamp < self.clock - age

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def read(self, data):
        seq = data.draw(st.integers(1, len(self.records) + 2))
        limit = data.draw(st.integers(1, 50))
        if seq < self.first:
            with pytest.raises(SequenceGone) as info:
                self.j.read(seq, max_records=limit)
            assert info.value.first_seq == self.first
            return
        got = self.j.read(seq, max_records=limit, max_bytes=None)
        assert got == self.records[seq - 1:seq - 1 + limit]

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def seek_time(self, data):
        t = data.draw(st.floats(999.0, self.clock + 1.0))
        expect = next((r.seq for r in self.records[self.first - 1:] if r.timestamp >= t), len(self.records) + 1)
        assert self.j.seq_at_time(t) == expect

    @invariant()
    def ranges(self):
        if getattr(self, "j", None) is None:
            return
        assert self.j.last_seq == len(self.records)
        assert self.j.first_seq == self.first
        assert self.j.written_seq >= self.written

    @precondition(lambda self: self.records)
    @rule()
    def reader_sees_what_is_written(self):
        self.j.write()
        self.written = len(self.records)
        with JournalReader(self.dir) as reader:
            assert reader.first_seq == self.first
            assert reader.last_seq == len(self.records)
            assert list(reader.records()) == self.records[self.first - 1:]


TestJournalModel = JournalModel.TestCase
TestJournalModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
