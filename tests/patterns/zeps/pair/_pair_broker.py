"""One broker of a ZEPS pair in its own process, for SIGKILL tests: prints its endpoints, then serves.

ack="replicated" that degrades after 0.5 s without a passive: the survivor of a kill serves alone.

argv: journal_dir endpoint pair_endpoint peer role [ack]
"""
import sys

import gevent

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, endpoint, pair_endpoint, peer, role, ack="replicated"):
    broker = Broker(journal_dir, endpoint, role=role, peer=peer, pair_endpoint=pair_endpoint, ack=ack,
                    on_passive_lost="degrade", passive_timeout=0.5, heartbeat=0.25, expiry=2.0, name=role)
    print(broker.endpoint, broker.pair_endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(*sys.argv[1:])
