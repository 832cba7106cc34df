"""A worker in its own process, for the failure tests.

``python -m tests.patterns.majordomo._worker_process ENDPOINT SERVICE SECONDS [idempotent]``
serves SERVICE, taking SECONDS per request (heartbeats flowing), and prints
``READY`` once started and ``REQUEST <body>`` when a request arrives.
"""
import sys
import time

import gevent

from zactors.patterns.majordomo import Worker


class Slow(Worker):
    delay = 0.0

    def handle(self, request):
        print("REQUEST", request[0].decode(), flush=True)
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline:
            gevent.sleep(0.01)
            yield None
        return [b"done", request[0]]


def main():
    endpoint, service, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    Slow.delay = delay
    worker = Slow(endpoint, service, heartbeat=0.2, liveness=5, idempotent=sys.argv[4:] == ["idempotent"])
    print("READY", flush=True)
    for _ in worker.events():
        pass


if __name__ == "__main__":
    main()
