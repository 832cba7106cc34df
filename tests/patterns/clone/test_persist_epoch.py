"""A Clone server never hands a sequence out twice (issue #19): after a power loss in ack="written" mode the
recovered map is older than what clients hold, so the server starts a new epoch past every sequence it may
have published, and a client holding a lost update re-syncs to the server's map instead of dropping the new
KVPUBs as old."""
import random

import gevent
import pytest
import zmq

from tests.actors.crashfs import CrashFiles, SimulatedCrash
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of, rebind
from zactors.actors.errors import ActorError
from zactors.actors.journal import JournalError
from zactors.patterns.clone.client import Clone
from zactors.patterns.clone.protocol import HUGZ, KVERR
from zactors.patterns.clone.server import CloneServer

pytestmark = pytest.mark.timeout(120)


class Observer:
    """Every KVPUB on a server's publisher (across restarts on the same endpoint): which update each
    sequence was handed to."""

    def __init__(self, raw, publisher):
        self.sub = raw(zmq.SUB, connect=publisher)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.updates = {}           # sequence -> (key, value, uuid)
        self.reused = []            # (sequence, first update, second update)
        self.hugz = 0
        self.reader = gevent.spawn(self._read)

    def _read(self):
        while True:
            key, seq, uid, _props, value = self.sub.recv_multipart()
            if key == HUGZ:
                self.hugz += 1
                continue
            if key == KVERR:
                continue
            seq = int.from_bytes(seq, "big")
            update = (key, value, uid)
            first = self.updates.setdefault(seq, update)
            if first != update:
                self.reused.append((seq, first, update))

    def close(self):
        self.reader.kill()


class PoweredServer(CloneServer):
    """A server whose journal's writes stop with the power: closing it then writes nothing more."""

    def teardown(self):
        try:
            super().teardown()
        except SimulatedCrash:
            pass


def _kill(server):
    try:
        server.destroy()
    except (SimulatedCrash, ActorError, JournalError):
        pass


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_power_loss_in_written_mode_never_hands_a_sequence_out_twice(make, raw, tmp_path, seed):
    directory = tmp_path / "map"
    CloneServer(0, persist=str(directory)).destroy()    # the map's directory, closed cleanly
    files = CrashFiles(directory)
    # ack="written" and no fsync during the test: every update is acknowledged and none is synced
    server = make(PoweredServer, persist=str(directory), files=files, ack="written", fsync=3600.0)
    endpoints = list(server.endpoints)
    observer = Observer(raw, endpoints[1])
    try:
        wait_for(lambda: observer.hugz > 0, timeout=10, what="the observer's subscription")
        holder = make(Clone, [client_of(server)], name="holder")
        assert holder.wait_synced(10)
        acked = [holder.set("k%d" % i, "before-%d" % i, wait=10) for i in range(20)]
        assert acked == list(range(1, 21))
        wait_for(lambda: 20 in observer.updates, timeout=10, what="the observer saw every update")

        files.crash()                               # the power goes
        _kill(server)
        files.restore(random.Random(seed))          # what no fsync covered is gone (torn tails at random)
        server = rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1],
                        collector=endpoints[2], persist=str(directory), ack="written")
        info = server.call("INFO")
        assert info["persist"]["epoch"] == 2 and info["sequence"] > 20, info

        writer = make(Clone, [client_of(server)], name="writer")
        assert writer.wait_synced(10)
        after = [writer.set("k%d" % i, "after-%d" % i, wait=10) for i in range(0, 40, 2)]
        wait_for(lambda: after[-1] in observer.updates, timeout=10, what="the observer saw the new updates")
        assert not observer.reused, "sequences handed out for two different updates: %r" % observer.reused[:3]
        assert after == sorted(after) and after[0] > 20
        wait_for(lambda: dict(holder.items()) == server.call("DUMP"), timeout=20,
                 what="the client that held lost updates has the server's map")
        assert holder.sequence >= after[-1]
    finally:
        observer.close()


def test_a_clean_restart_keeps_the_epoch_and_the_sequence(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(10)
    seq = a.set("k", "v", wait=10)
    endpoints = list(server.endpoints)
    server.destroy()
    server = rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                    persist=str(tmp_path))
    info = server.call("INFO")
    assert info["sequence"] == seq and info["persist"]["epoch"] == 1


def test_updates_past_the_reservation_wait_for_it_and_keep_their_order(make, tmp_path):
    """A tiny reservation (4 sequences ahead): the server keeps writing new ones as updates come; every
    update is applied once, in order, and the sequences file always covers what was published."""
    from zactors.patterns.clone.persist import _read_sequences

    server = make(CloneServer, persist=str(tmp_path), reserve=4)
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(10)
    seen = []
    a.on_change(lambda key, value, seq: seen.append((key, value, seq)))
    for i in range(200):
        a.set("k%d" % (i % 7), str(i))
    last = a.set("last", "x", wait=20)
    assert last == 201
    assert [s for _k, _v, s in seen] == list(range(1, 202))
    assert [v for _k, v, _s in seen[:-1]] == [str(i).encode() for i in range(200)]
    epoch, reserved = _read_sequences(str(tmp_path))
    assert epoch == 1 and reserved >= last


def test_a_damaged_sequences_file_is_refused_with_a_clear_error(tmp_path):
    CloneServer(0, persist=str(tmp_path)).destroy()
    (tmp_path / "SEQUENCES").write_bytes(b"zactors clone sequences 1\nseven\n")
    with pytest.raises(JournalError, match="SEQUENCES is damaged"):
        CloneServer(0, persist=str(tmp_path))


def test_a_cut_in_the_active_segment_starts_a_new_epoch_past_the_lost_sequences(make, tmp_path):
    """Bit rot in a record after a clean stop: recovery cuts it and what follows, so the next sequence
    jumps past every sequence handed out (a client holding them re-syncs, even with ack="synced")."""
    server = make(CloneServer, persist=str(tmp_path), ack="synced", fsync="batch")
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(10)
    seqs = [a.set("k%d" % i, "value-%d" % i, wait=10) for i in range(10)]
    endpoints = list(server.endpoints)
    server.destroy()
    segment = tmp_path / "gen-00000000" / "00000000000000000001.seg"
    data = bytearray(segment.read_bytes())
    data[data.index(b"value-4")] ^= 0xFF
    segment.write_bytes(bytes(data))
    server = rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                    persist=str(tmp_path), ack="synced", fsync="batch")
    info = server.call("INFO")
    assert info["persist"]["epoch"] == 2 and info["sequence"] > seqs[-1]
    assert sorted(server.call("DUMP")) == [b"k%d" % i for i in range(4)]
    wait_for(lambda: dict(a.items()) == server.call("DUMP"), timeout=20, what="the client re-synced")
    assert a.set("k9", "again", wait=10) > seqs[-1]
