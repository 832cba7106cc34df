"""A ZEPS broker in its own process, for kill -9 tests: prints its endpoint, then serves."""
import sys

import gevent

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, endpoint, ack="written"):
    broker = Broker(journal_dir, endpoint, ack=ack, heartbeat=0.2, expiry=1.0)
    print(broker.endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(*sys.argv[1:])
