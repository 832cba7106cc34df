"""Traffic through a node, so that its dashboard has something to show: ``zactors up --demo``, ``zactors demo --stay``.

:class:`DemoTraffic` runs, in greenlets of the calling thread, at about
``rate`` operations a second each: Majordomo ``echo`` requests (through one
worker it starts), ZEPS publishes to ``orders`` and ``sensors`` with one live
subscriber, Clone sets under ``/demo/``, and a Harmony peer that joins the
node by endpoint, shouts in group ``demo`` and whispers to the node (a tenth as often).  ``stop()``
ends it all.
"""
import logging
import random

import gevent

__all__ = ["DemoTraffic"]

log = logging.getLogger(__name__)


class DemoTraffic:
    """Demo traffic through the parts of ``node`` (an :class:`~zactors.apps.up.Up`) that run."""

    def __init__(self, node, rate=20):
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = rate
        self._actors = []
        self._closers = []
        self._greenlets = []
        if node.broker is not None:
            self._majordomo(node.broker.endpoint)
        if node.zeps is not None:
            from zactors.apps.options import client_endpoint
            self._zeps(client_endpoint(node.zeps.endpoint))
        if node.clone is not None:
            self._clone(node.clone)
        if node.harmony is not None:
            self._harmony(node.harmony)

    def _every(self, work, every=1):
        def loop():
            pause = every / self.rate
            while True:
                try:
                    work()
                except Exception as exc:  # a demo goes on: the dashboard is what shows trouble
                    log.debug("demo: %s", exc)
                gevent.sleep(pause * random.uniform(0.5, 1.5))
        self._greenlets.append(gevent.spawn(loop))

    def _majordomo(self, endpoint):
        from zactors.patterns.majordomo.client import Client
        from zactors.patterns.majordomo.worker import Worker

        class Echo(Worker):
            service = b"echo"

            def handle(self, request):
                return request
        self._actors.append(Echo(endpoint))
        client = Client(endpoint, timeout=2.5)
        self._closers.append(client.close)
        self._every(lambda: client.request("echo", b"ping"))

    def _zeps(self, endpoint):
        from zactors.patterns.zeps import Publisher, Subscriber
        orders = Publisher(endpoint, "orders")
        sensors = Publisher(endpoint, "sensors")
        self._closers += [orders.close, sensors.close]
        regions = ("eu.fr", "eu.de", "us.ny", "ap.jp")

        def publish():
            orders.publish(random.choice(regions).encode(), b'{"qty": %d}' % random.randint(1, 9))
            for i in range(3):
                sensors.publish(b"room-%d" % i, b"%.1f" % random.uniform(18, 24))
        self._every(publish)
        subscriber = Subscriber(endpoint, "orders", b"eu.", new=True, callback=lambda message: None)
        self._actors.append(subscriber)

    def _clone(self, server):
        from zactors.apps.options import client_endpoint
        from zactors.patterns.clone.client import Clone
        client = Clone([tuple(client_endpoint(e) for e in server.endpoints[:3])], subtree=b"/demo/")
        self._actors.append(client)
        counter = [0]

        def update():
            counter[0] += 1
            client.set(b"/demo/counter", b"%d" % counter[0])
            client.set(b"/demo/sessions/%d" % random.randint(1, 20), b"user-%d" % random.randint(1, 999), ttl=30)
        self._every(update)

    def _harmony(self, hub):
        from zactors.patterns.harmony.node import Node
        peer = Node("demo-peer", {"X-Role": "demo"}, beacon=False, endpoints=[hub.endpoint]).start()
        self._closers.append(peer.stop)
        peer.join("demo")
        def tick():
            peer.shout("demo", b"tick")
            if hub.id in peer.peers(timeout=1):   # the node is in no group: without a whisper it hears
                peer.whisper(hub.id, b"tick")     # silence, and ZRE calls a silent peer EVASIVE at each ping
        self._every(tick, every=10)

    def stop(self):
        gevent.killall(self._greenlets)
        for close in self._closers:
            close()
        for actor in self._actors:
            actor.destroy()
        self._greenlets = self._closers = self._actors = []
