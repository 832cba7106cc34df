"""An MDP broker in its own process (so that its RSS is its own): prints its endpoint, then serves.

``python _budget_broker.py '{"max_message": ...}'``: the JSON object is passed to ``Broker``.
On SIGUSR1 it prints its INFO as one JSON line.
"""
import json
import signal
import sys

import gevent

from zactors.patterns.majordomo import Broker


def main(options):
    broker = Broker("tcp://127.0.0.1:*", **json.loads(options))

    def info():
        print(json.dumps(broker.call("INFO")), flush=True)

    gevent.signal_handler(signal.SIGUSR1, lambda: gevent.spawn(info))
    print(broker.endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(sys.argv[1])
