"""The Arrow segment reader against the real Journal: same records, exact ranges, corruption named.

Every test runs on both implementations: the C codec's ``columns`` (when built) and its numpy twin."""
import os

import pytest
from hypothesis import given, settings, strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from zactors.actors.journal import HEADER_SIZE, Journal, JournalError, JournalReader  # noqa: E402
from zactors.patterns.zeps.spark import segments  # noqa: E402
from zactors.patterns.zeps.spark.segments import segment_batches, sparse_index  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True, scope="module", params=["c", "numpy"])
def implementation(request):
    """Read through the C codec, then through the numpy twin."""
    if request.param == "c":
        if segments._c_columns is None:
            pytest.skip("the C journal codec is not built (or ZACTORS_PURE_PYTHON is set)")
        chosen = segments._columns_c
    else:
        chosen = segments._columns_numpy
    saved, segments._chunk_columns = segments._chunk_columns, chosen
    yield request.param
    segments._chunk_columns = saved


def _all(directory, from_seq=1, to_seq=10 ** 12, chunk=8 << 20):
    rows = []
    with JournalReader(directory) as reader:
        for base, path, *_ in reader.segments():
            for batch in segment_batches(path, base, from_seq, to_seq, chunk=chunk):
                d = batch.to_pydict()
                rows.extend(zip(d["seq"], d["key"], d["body"], [t.timestamp() for t in d["timestamp"]]))
    return rows


def _expected(directory, from_seq=1, to_seq=None):
    with JournalReader(directory) as reader:
        return [(r.seq, r.key, r.body, r.timestamp) for r in reader.records(from_seq, to_seq)]


def _write(directory, records, segment_bytes=1 << 16):
    journal = Journal(directory, segment_bytes=segment_bytes)
    for key, body in records:
        journal.append(key, body)
    journal.write()
    journal.close()


def _same(got, want):
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert all(abs(g[3] - w[3]) < 1e-5 for g, w in zip(got, want))


def test_segments_match_the_journal_reader(tmp_path):
    d = str(tmp_path / "s")
    records = [(b"k%d" % (i % 13), os.urandom(i % 300)) for i in range(5000)]
    _write(d, records)
    with JournalReader(d) as reader:
        assert len(reader.segments()) > 5                # several sealed segments and the active one
    _same(_all(d), _expected(d))
    _same(_all(d, chunk=4096), _expected(d))            # records cut across small reads


def test_ranges_are_exact_and_use_the_sparse_index(tmp_path):
    d = str(tmp_path / "s")
    _write(d, [(b"", b"x" * 100) for _ in range(3000)])
    with JournalReader(d) as reader:
        base, path, *_ = reader.segments()[1]
    assert sparse_index(path) is None or len(sparse_index(path)[0]) > 1
    got = [s for b in segment_batches(path, base, base + 17, base + 99) for s in b.column("seq").to_pylist()]
    assert got == list(range(base + 17, base + 100))
    _same(_all(d, 1234, 2345), _expected(d, 1234, 2345))


def test_empty_keys_and_bodies(tmp_path):
    d = str(tmp_path / "s")
    _write(d, [(b"", b""), (b"k", b""), (b"", b"b")])
    assert [(s, k, b) for s, k, b, _ in _all(d)] == [(1, b"", b""), (2, b"k", b""), (3, b"", b"b")]


def test_a_corrupt_sealed_segment_is_named(tmp_path):
    d = str(tmp_path / "s")
    _write(d, [(b"k", b"y" * 200) for _ in range(2000)])
    with JournalReader(d) as reader:
        base, path, *_ = reader.segments()[0]
    with open(path, "r+b") as f:
        f.seek(5000)
        byte = f.read(1)
        f.seek(5000)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(JournalError, match=r"%s: corrupt record at offset \d+ \(bad CRC\)" % os.path.basename(path)):
        for _ in segment_batches(path, base, 1, 10 ** 9):
            pass


def test_a_bad_header_is_named(tmp_path):
    path = tmp_path / ("%020d.seg" % 1)
    path.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(JournalError, match="not a journal segment"):
        list(segment_batches(str(path), 1, 1, 10))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=255), st.binary(max_size=2000)), min_size=1, max_size=200),
       st.integers(1, 200), st.integers(0, 200))
def test_hostile_contents_round_trip(tmp_path_factory, records, lo, span):
    d = str(tmp_path_factory.mktemp("j") / "s")
    _write(d, records, segment_bytes=8192)
    hi = lo + span
    _same(_all(d, lo, hi, chunk=1024), _expected(d, lo, min(hi, len(records))) if lo <= len(records) else [])


def test_a_torn_length_and_a_sequence_break_are_named(tmp_path):
    d = str(tmp_path / "s")
    _write(d, [(b"k", b"z" * 50) for _ in range(100)])
    with JournalReader(d) as reader:
        base, path, *_ = reader.segments()[0]
    data = bytearray(open(path, "rb").read())
    size = 8 + 24 + 1 + 50                                              # one record: prefix, fields, key, body
    fourth = HEADER_SIZE + 3 * size
    bad = bytearray(data)
    bad[fourth:fourth + 4] = (7).to_bytes(4, "little")                  # a length below any record's
    open(path, "wb").write(bad)
    with pytest.raises(JournalError, match=r"corrupt record at offset \d+ \(bad record length 7\)"):
        list(segment_batches(path, base, 1, 10 ** 9))
    # a whole record taken out: every CRC holds, the sequence jumps
    cut = data[:fourth] + data[fourth + size:]
    open(path, "wb").write(cut)
    with pytest.raises(JournalError, match=r"corrupt segment near offset %d \(sequence 5 where 4 was due\)" % fourth):
        list(segment_batches(path, base, 1, 10 ** 9))
