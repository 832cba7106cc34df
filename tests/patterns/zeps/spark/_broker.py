"""A ZEPS broker in its own process (Spark's blocking py4j calls would freeze one in the test's hub).

Prints its endpoint on the first line, then serves until killed or stdin closes.
Usage: python -m tests.patterns.zeps.spark._broker JOURNAL_DIR [ENDPOINT] (default: a free port).
"""
import sys

import gevent
from gevent.fileobject import FileObjectThread

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, endpoint="tcp://127.0.0.1:*"):
    broker = Broker(journal_dir, endpoint, fsync="never")
    print(broker.endpoint, flush=True)
    gevent.spawn(FileObjectThread(sys.stdin).read).join()   # the test closed our stdin (or died)
    broker.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:3])
