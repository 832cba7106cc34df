"""A ZEPS broker in its own process (so that its RSS and fds are its own): prints its endpoint, then serves.

``python _budget_broker.py JOURNAL_DIR '{"max_credit": ...}'``: the JSON object is passed to ``Broker``.
"""
import json
import sys

import gevent

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, options):
    broker = Broker(journal_dir, "tcp://127.0.0.1:*", **json.loads(options))
    print(broker.endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
