"""A process in a test namespace: a ZEPS broker with multicast output, or a multicast subscriber.

broker JOURNAL GROUP PORT ADDRESS: prints its endpoint, then on each stdin line
"N" publishes N messages (key k.I, body I) and prints "published LAST_SEQ", then
its multicast counters (JSON).
subscriber GROUP PORT ENDPOINT ADDRESS FROM PATTERN: prints one JSON line per message.
"""
import json
import sys

import gevent
from gevent.fileobject import FileObjectThread


def broker(journal, group, port, address):
    from zactors.patterns.zeps import Publisher
    from zactors.patterns.zeps.broker import Broker
    b = Broker(journal, "tcp://0.0.0.0:*", heartbeat=0.2, expiry=2.0, multicast=(group, int(port)),
               multicast_interface=address)
    port_number = b.endpoint.rsplit(":", 1)[1]
    print("tcp://%s:%s" % (address, port_number), flush=True)
    pub = Publisher("tcp://127.0.0.1:%s" % port_number, "s")  # over loopback: the LAN link may go down
    lines = FileObjectThread(sys.stdin, "r")
    sent = 0
    for line in lines:
        for _ in range(int(line)):
            pub.publish(b"k.%d" % (sent % 3), b"%d" % sent)
            sent += 1
            if sent % 200 == 0:
                gevent.sleep(0.002)  # a paced stream: the sender's socket buffer is not what is tested
        pub.flush()
        print("published %d" % sent, flush=True)
        print(json.dumps(b.call("INFO")["multicast"]), flush=True)


def subscriber(group, port, endpoint, address, from_seq, pattern):
    from zactors.patterns.zeps.multicast import MulticastSubscriber
    sub = MulticastSubscriber(group, int(port), endpoint, "s", pattern.encode(), from_seq=int(from_seq) or None,
                              interface=address)
    print(json.dumps({"ready": True}), flush=True)
    for message in sub:
        print(json.dumps({"seq": message.seq, "key": message.key.decode(), "body": message.body.decode(),
                          "stats": dict(sub.stats)}), flush=True)


if __name__ == "__main__":
    {"broker": broker, "subscriber": subscriber}[sys.argv[1]](*sys.argv[2:])
