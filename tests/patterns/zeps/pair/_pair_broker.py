"""One broker of a ZEPS pair in its own process, for SIGKILL and network-cut tests: prints its endpoints,
then serves until killed.

argv: journal_dir endpoint pair_endpoint peer role [ack [on_passive_lost]]; ack="replicated" by default,
degrading after 0.5 s without a passive (the survivor of a kill serves alone).
"""
import sys

import gevent

from zactors.patterns.zeps.broker import Broker


def main(journal_dir, endpoint, pair_endpoint, peer, role, ack="replicated", on_passive_lost="degrade"):
    broker = Broker(journal_dir, endpoint, role=role, peer=peer, pair_endpoint=pair_endpoint, ack=ack,
                    on_passive_lost=on_passive_lost, passive_timeout=0.5 if on_passive_lost == "degrade" else 1.0,
                    heartbeat=0.25, expiry=2.0, name=role)
    print(broker.endpoint, broker.pair_endpoint, flush=True)
    gevent.wait()  # until killed


if __name__ == "__main__":
    main(*sys.argv[1:])
