"""A Clone server with persist=DIR: restarted, it has the same map at the same sequence."""
import os
import stat
import subprocess

import gevent
import gevent.event
import pytest
import zmq

from zactors.actors.journal import JournalFull
from zactors.patterns.clone.client import Clone, UpdateRefused
from zactors.patterns.clone.server import CloneServer
from tests.conftest import wait_for
from tests.patterns.clone.conftest import client_of, rebind

pytestmark = pytest.mark.timeout(120)


def _restart(server, make, path):
    endpoints = list(server.endpoints)
    server.destroy()
    return rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                  persist=str(path))


def test_restart_keeps_map_sequence_and_ttls(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    for i in range(100):
        a.set("k%d" % i, "v%d" % i)
    a.delete("k5")
    a.set("short", "1", ttl=0.5)
    a.set("long", "1", ttl=60, wait=5)
    before = server.call("DUMP")
    seq = server.call("INFO")["sequence"]
    server = _restart(server, make, tmp_path)
    assert server.call("DUMP") == before and server.call("INFO")["sequence"] == seq
    wait_for(lambda: server.call("GET", b"short") is None, timeout=5, what="the ttl survived the restart")
    assert server.call("GET", b"long") == b"1" and server.call("GET", b"k5") is None
    b = make(Clone, [client_of(server)])
    assert b.wait_synced(5) and b.set("after", "x", wait=5) == seq + 2  # the expiry took seq + 1


def test_compaction_then_restart(make, tmp_path):
    server = make(CloneServer, persist=str(tmp_path))
    a = make(Clone, [client_of(server)])
    a.wait_synced(5)
    for i in range(12000):
        a.set("k%d" % (i % 10), str(i))
    a.set("last", "1", wait=10)
    wait_for(lambda: server.call("INFO")["persist"]["compactions"] >= 1, timeout=20, what="a compaction")
    a.set("after-compaction", "1", wait=5)
    before, seq = server.call("DUMP"), server.call("INFO")["sequence"]
    wait_for(lambda: [p.name for p in tmp_path.iterdir() if p.name.startswith("gen-")] == ["gen-00000001"],
             timeout=10, what="the old generation removed")
    server = _restart(server, make, tmp_path)
    assert server.call("DUMP") == before and server.call("INFO")["sequence"] == seq


def test_kvpub_never_runs_ahead_of_the_journal(make, raw, tmp_path):
    """Every KVPUB a subscriber sees is already in the journal on disk (written level)."""
    from zactors.actors.journal import JournalReader

    server = make(CloneServer, persist=str(tmp_path))
    sub = raw(zmq.SUB, connect=server.endpoints[1])
    sub.setsockopt(zmq.SUBSCRIBE, b"k")
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(5)
    wait_for(lambda: a.set("k-probe", "1", wait=5) and sub.poll(0), what="the raw SUB is live")
    sub.recv_multipart()
    reader = JournalReader(tmp_path / "gen-00000000")
    n, checked, behind = 3000, 0, []
    for i in range(n):
        a.set("k%d" % (i % 100), str(i))
    with gevent.Timeout(30):
        while checked < n:
            frames = sub.recv_multipart()
            seq = int.from_bytes(frames[1], "big")
            reader.refresh()
            on_disk = reader.last_seq
            if on_disk < seq:
                behind.append((seq, on_disk))
            checked += 1
    reader.close()
    assert not behind, "KVPUBs sent before the journal held them: %r" % behind[:5]


def test_full_disk_refuses_the_update_and_keeps_serving(make, small_disk):
    """ENOSPC: the update is refused with KVERR (UpdateRefused), the server goes on serving, and a restart
    comes back at the sequence clients acknowledged, without the refused update."""
    server = make(CloneServer, persist=str(small_disk))
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(5)
    value = b"x" * 8192
    acked = {}
    with pytest.raises(UpdateRefused) as refused:
        for i in range(1000):
            key = "k%d" % i
            acked[key] = a.set(key, value, wait=10)
    assert "No space left" in str(refused.value) or "full" in str(refused.value).lower()
    info = server.call("INFO")
    assert info["counters"]["refused"] >= 1 and info["persist"]["error"]
    last = max(acked.values())
    assert info["sequence"] == last and a.sequence == last
    # Still serving: reads, snapshots, and refusing (not dying) on the next updates.
    assert server.call("GET", b"k0") == value
    b = make(Clone, [client_of(server)])
    assert b.wait_synced(5) and len(b) == len(acked)
    with pytest.raises(UpdateRefused):
        a.set("more", "1", wait=10)
    endpoints = list(server.endpoints)
    server.destroy()
    filler = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)  # every last page: the disk stays full
    try:
        while os.write(filler, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(filler)
    # Still full: the journal cannot even record its new epoch, so the server refuses to start (it would
    # otherwise risk handing out sequences again) and says why.
    with pytest.raises(JournalFull):
        CloneServer(snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2], persist=str(small_disk))
    subprocess.run(["mount", "-o", "remount,size=512k", str(small_disk)], check=True)   # the operator adds room
    server = rebind(make, CloneServer, snapshot=endpoints[0], publisher=endpoints[1], collector=endpoints[2],
                    persist=str(small_disk))
    # the write that failed left the journal unclosed: a new epoch goes on past every sequence handed out
    assert server.call("INFO")["sequence"] >= last and server.call("INFO")["persist"]["epoch"] == 2
    assert set(server.call("DUMP")) == {k.encode() for k in acked}


def test_refused_updates_stay_refused_once_the_disk_has_room(make, small_disk):
    """The journal retries the refused records' write when room comes back: they are voided, so a restart
    does not bring them back, and the server takes updates again."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (96 << 10))
    server = make(CloneServer, persist=str(small_disk / "map"))
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(5)
    acked, refused = {}, None
    for i in range(1000):
        try:
            acked["k%d" % i] = a.set("k%d" % i, b"x" * 8192, wait=10)
        except UpdateRefused:
            refused = "k%d" % i
            break
    assert refused is not None
    filler.unlink()
    wait_for(lambda: server.call("INFO")["persist"]["error"] is None, timeout=10, what="writes resume")
    seq = a.set("after", "1", wait=10)
    assert seq == max(acked.values()) + 1
    server = _restart(server, make, small_disk / "map")
    dump = server.call("DUMP")
    assert refused.encode() not in dump and dump[b"after"] == b"1" and len(dump) == len(acked) + 1
    assert server.call("INFO")["sequence"] == seq


def test_synced_ack_publishes_once_fsynced(make, tmp_path):
    """ack="synced": the KVPUB waits for the fsync that covers the update (group commit with fsync="batch")."""
    from zactors.actors.journal import JournalReader

    server = make(CloneServer, persist=str(tmp_path), ack="synced", fsync="batch")
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(5)
    for i in range(200):
        a.set("k%d" % i, str(i))
    seq = a.set("last", "1", wait=10)
    info = server.call("INFO")
    assert info["persist"]["ack"] == "synced" and info["sequence"] == seq == 201
    with JournalReader(tmp_path / "gen-00000000") as reader:
        assert reader.last_seq >= seq
    server = _restart(server, make, tmp_path)
    assert server.call("INFO")["sequence"] == seq


def test_sigkill_under_load_loses_no_published_update(processes, make, tmp_path):
    """A server process with --persist is killed (SIGKILL) while a client updates as fast as it can:
    restarted on its journal, it holds every update any subscriber saw, at a sequence no lower."""
    import sys

    from tests.patterns.clone.conftest import free_base_port

    port = free_base_port()
    cli = [sys.executable, "-m", "zactors.apps.cli", "-q", "clone", "server", "--port", str(port),
           "--persist", str(tmp_path)]
    server = processes(cli)
    at = "tcp://127.0.0.1:%d" % port
    a = make(Clone, [at], name="writer")
    assert a.wait_synced(20)
    seen, top = {}, [0]

    def saw(key, value, seq):
        if value:
            seen[key] = max(seen.get(key, -1), int(value))
        top[0] = max(top[0], seq)
    a.on_change(saw)
    running = [True]

    def write():
        i = 0
        while running[0]:
            a.set("k%d" % (i % 100), str(i))
            i += 1
            if i % 50 == 0:
                gevent.sleep(0.001)
    writer = gevent.spawn(write)
    wait_for(lambda: top[0] > 3000, timeout=30, what="updates flowing")
    server.kill()
    server.wait()
    running[0] = False
    writer.join(5)
    a.destroy()
    processes(cli)
    b = make(Clone, [at], name="checker")
    assert b.wait_synced(20)
    assert b.sequence >= top[0], "restarted at %d, a subscriber saw %d" % (b.sequence, top[0])
    lost = {k: v for k, v in seen.items() if int(b.get(k, b"-1")) < v}
    assert not lost, "published updates lost by the restart: %r" % list(lost.items())[:5]


def test_persisted_files_are_the_owners_only(make, tmp_path):
    directory = tmp_path / "clone"
    server = make(CloneServer, persist=str(directory))
    a = make(Clone, [client_of(server)])
    assert a.wait_synced(5) and a.set("k", "secret", wait=5) == 1
    seen = 0
    for root, dirs, files in os.walk(directory):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
        for name in files:
            path = os.path.join(root, name)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
            seen += 1
    assert seen >= 2


def test_recovery_replays_in_one_pass_with_the_collector_paused(tmp_path):
    """Recovery builds the map's entries straight from the journal (the highest sequence of a key wins,
    deletes and expired keys leave), with no garbage collection walking the growing map meanwhile."""
    import gc
    import time

    from zactors.actors import Actor
    from zactors.patterns.clone.persist import MapJournal

    wall = time.time()
    changes = [(b"a", 5, b"new", None), (b"a", 3, b"old", None),      # a compaction's cut and changes interleave
               (b"b", 2, b"gone", None), (b"b", 4, b"", None),        # deleted
               (b"c", 6, b"stale", wall - 1), (b"d", 7, b"fresh", wall + 60)]
    changes += [(b"k%06d" % i, 100 + i, b"v", None) for i in range(50000)]
    _generation(tmp_path, changes, mark=200000)

    class Owner(Actor):
        def setup(self):
            collections = []
            gc.callbacks.append(lambda phase, info: collections.append(info) if phase == "start" else None)
            try:
                self.store = MapJournal(self, str(tmp_path))
                self.entries, self.sequence = self.store.recover()
            finally:
                gc.callbacks.pop()
            self.collections = len(collections)

        def teardown(self):
            self.store.close()

    started = time.process_time()
    owner = Owner()
    took = time.process_time() - started
    owner.destroy()
    print("\n50,006 records recovered in %.3f s of CPU, %d garbage collections" % (took, owner.collections))
    entries = owner.entries
    assert owner.sequence == 200000 and len(entries) == 50002
    assert entries[b"a"].value == b"new" and entries[b"a"].sequence == 5
    assert b"b" not in entries and b"c" not in entries
    assert 55 < entries[b"d"].deadline - time.monotonic() <= 60
    assert owner.collections <= 2 and gc.isenabled(), "collections during recovery: %d" % owner.collections


def _generation(directory, changes, mark=None):
    """A complete journal generation of ``changes`` ``(key, sequence, value, expires)`` in ``directory``."""
    import msgpack

    from zactors.actors.journal import Journal
    generation = directory / "gen-00000000"
    journal = Journal(str(generation))
    for key, seq, value, expires in changes:
        journal.append(key, msgpack.packb((seq, b"u" * 16, b"", value, expires)))
    if mark is not None:
        journal.append(b"", msgpack.packb((mark,)))  # a mark: the map was at this sequence
    journal.close()
    (generation / "COMPLETE").touch()


def test_the_rest_of_the_process_runs_while_a_large_map_is_recovered(make, tmp_path):
    """The replay runs on the hub's threadpool: a restarted Clone server holding many keys must not
    stall the node's other parts (its MDP broker, say) for the seconds its recovery takes."""
    import time
    _generation(tmp_path, [(b"key-%07d" % i, i + 1, b"v" * 100, None) for i in range(300000)])
    ticks = []
    stop = gevent.event.Event()

    def ticker():  # another part of the node: it runs every 5 ms, or says how long it could not
        while not stop.is_set():
            ticks.append(time.monotonic())
            gevent.sleep(0.005)

    beat = gevent.spawn(ticker)
    gevent.sleep(0.05)
    started = time.monotonic()
    server = make(CloneServer, persist=str(tmp_path))
    took = time.monotonic() - started
    stop.set()
    beat.join(5)
    during = [b - a for a, b in zip(ticks, ticks[1:]) if b > started]
    print("\n300,000 keys recovered in %.3f s; the longest the rest of the process waited: %.3f s"
          % (took, max(during)))
    assert server.call("INFO")["keys"] == 300000
    assert max(during) < max(0.1, took / 3), "the process stalled %.3f s of the %.3f s recovery" % (max(during), took)
