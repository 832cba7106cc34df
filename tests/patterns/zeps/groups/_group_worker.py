"""A consumer-group member in its own process: prints ``SEQ DELIVERIES TIME`` per message (flushed), then
acks it.  ``python _group_worker.py ENDPOINT STREAM GROUP ACK_WAIT``.  Prints ``ready`` once joined."""
import sys
import time

from zactors.patterns.zeps.consumer import Consumer


def main(endpoint, stream, group, ack_wait):
    consumer = Consumer(endpoint, stream, group, ack_wait=float(ack_wait), window=32 << 10, heartbeat=0.2,
                        expiry=1.0, timeout=10.0)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for message in consumer:
        out.write("%d %d %.6f\n" % (message.seq, message.deliveries, time.time()))
        out.flush()      # printed before it is acknowledged: a SIGKILL never hides a processed message
        message.ack()


if __name__ == "__main__":
    main(*sys.argv[1:])
