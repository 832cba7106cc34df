"""Clone's persistence (MapJournal) over the crash layer (issue #19): the power goes right after a change
is acknowledged; what the disk then holds recovers to a map that is a clean prefix of the changes, and
with ack="synced" it holds every acknowledged one.  (Compaction's directories and COMPLETE markers do
not go through the layer: these runs stay in one generation.)"""
import os
import random

import pytest

from tests.actors.crashfs import CrashFiles, SimulatedCrash
from tests.conftest import wait_for
from zactors.actors import Actor, command
from zactors.actors.errors import ActorError
from zactors.patterns.clone.persist import MapJournal

pytestmark = pytest.mark.timeout(120)

KEYS = 50


class MapOwner(Actor):
    """Records changes 1, 2, ... to KEYS keys; with ``files``, the power goes right after the first
    change acknowledged at ``ack``."""

    def __init__(self, directory, files=None, ack="synced", fsync="interval"):
        self.directory = directory
        self.files = files
        self.ack = ack
        self.fsync = fsync
        self.acked = None       # the map sequence of the first acknowledgement
        self.sequences = {}     # journal sequence -> map sequence

    def setup(self):
        self.store = MapJournal(self, self.directory, fsync=self.fsync, interval=0.005, ack=self.ack,
                                files=self.files, on_durable=self._durable)
        self.live, self.sequence = self.store.recover()

    def teardown(self):
        try:
            self.store.close()
        except SimulatedCrash:
            pass

    def _durable(self, jseq):
        if self.files is not None and self.acked is None and jseq:
            self.acked = max(seq for j, seq in self.sequences.items() if j <= jseq)
            self.files.crash()          # the power goes right after the acknowledgement

    @command(reply=True)
    def burst(self, n):
        if self.acked is not None:      # the power went: nothing more reaches the disk
            return self.sequence
        for _ in range(n):
            self.sequence += 1
            jseq = self.store.record(b"k%d" % (self.sequence % KEYS), self.sequence, b"u" * 16, {},
                                     b"v%d" % self.sequence, None)
            self.sequences[jseq] = self.sequence
        return self.sequence

    @command(reply=True)
    def recovered(self):
        """The last change recovered (the sequence goes on past it after a loss) and the map."""
        return max((e.sequence for e in self.live.values()), default=0), {k: v.value for k, v in self.live.items()}


def _run(tmp_path, name, ack, fsync, rng):
    directory = str(tmp_path / name)
    MapOwner(directory).destroy()       # generation 0, complete and empty, made (and synced) without the layer
    files = CrashFiles(os.path.join(directory, "gen-00000000"))
    owner = MapOwner(directory, files, ack, fsync)
    try:
        for _ in range(10):
            if owner.acked is not None:
                break
            try:
                owner.call("BURST", rng.randint(1, 300), timeout=10)
            except (SimulatedCrash, ActorError):  # the power went under a write: the owner is gone
                break
        wait_for(lambda: owner.acked is not None, timeout=20, what="an acknowledgement")
        acked = owner.acked
    finally:
        try:
            owner.destroy()
        except (SimulatedCrash, ActorError):
            pass
    files.restore(rng)                  # what no fsync covered is gone; torn tails at random
    again = MapOwner(directory)
    try:
        sequence, live = again.call("RECOVERED")
    finally:
        again.destroy()
    expected = {}
    for seq in range(1, sequence + 1):
        expected[b"k%d" % (seq % KEYS)] = b"v%d" % seq
    assert live == expected, "the recovered map is not the changes 1..%d" % sequence
    return acked, sequence


@pytest.mark.parametrize("fsync", ["batch", "interval"])
def test_a_synced_clone_change_survives_a_power_loss_right_after_its_ack(tmp_path, fsync):
    rng = random.Random(19)
    for round_ in range(4):
        acked, sequence = _run(tmp_path, "r%d" % round_, "synced", fsync, rng)
        assert sequence >= acked, "acknowledged (synced) up to %d, the disk recovered %d" % (acked, sequence)


def test_a_written_clone_change_may_go_with_the_power_but_the_map_stays_a_clean_prefix(tmp_path):
    rng = random.Random(20)
    for round_ in range(4):
        _run(tmp_path, "r%d" % round_, "written", "interval", rng)
