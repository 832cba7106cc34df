"""A ZEPS broker in its own process, for the consumer-group tests: prints its endpoint, then serves.

``python _group_broker.py JOURNAL_DIR '{"endpoint": ..., "group_ack_wait": ...}'``: the JSON object is
passed to ``Broker``.
"""
import json
import sys

import gevent

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, options):
    broker = Broker(journal_dir, **json.loads(options))
    print(broker.endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
