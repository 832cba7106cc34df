"""A Harmony node that runs out of file descriptors while gossip asks it for 200 peers.

    python -m tests.patterns.harmony.fd_starved

Lowers this process's soft ``RLIMIT_NOFILE`` to just above what it uses,
then gossips 200 valid endpoints at node ``a``: most of the DEALERs cannot
be made (EMFILE).  Prints one JSON line: ``a``'s stats, whether it is alive,
and what a good peer whispered to it afterwards.  Runs in its own process:
the limit must not touch the test runner.
"""
import json
import os
import random
import resource

import gevent

from zactors.patterns.harmony import GOSSIP_HEADER, Node
from zactors.patterns.harmony import protocol as zre
from tests.patterns.harmony.peers import RawPeer, expect


def main():
    a = Node("a", beacon=False, max_peers=5000).start()
    b = Node("b", beacon=False, endpoints=[a.endpoint]).start()
    expect(a, "ENTER", peer=b.id)
    peer = RawPeer(a)
    peer.send(zre.Hello(1, peer.endpoint, [], 0, "gossip", {GOSSIP_HEADER: "1"}))
    peer.seq = 1
    expect(a, "ENTER", peer=peer.id)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 20, hard))
    entries = [("%s tcp://127.0.0.1:%d" % (random.randbytes(16).hex(), 1 + i)).encode() for i in range(200)]
    peer.send(zre.Whisper(peer.next(), [b"\x00zactors/gossip/peers"] + entries))
    with gevent.Timeout(20):
        while not a.stats().get("connect_failed"):
            gevent.sleep(0.01)  # polling the node's counters, with the deadline above
    b.whisper(a.id, b"still here")
    event = expect(a, "WHISPER", peer=b.id)
    print(json.dumps({"stats": a.stats(), "alive": a.actor.alive, "frames": [f.decode() for f in event.frames]}))


if __name__ == "__main__":
    main()
