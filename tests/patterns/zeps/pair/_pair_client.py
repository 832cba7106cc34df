"""A ZEPS client in its own process (inside a test's network namespace), driven by lines on stdin.

argv: endpoint stream.  Commands, one a line; each answers one JSON line on stdout:
``publish TAG N`` (N idempotent messages ``TAG-i``, then a flush: {"ok": bool, "error": ...}),
``flush`` (again), ``info`` (the broker's INFO over QUERY).
"""
import json
import sys

import gevent
from gevent.fileobject import FileObject

from zactors.patterns.zeps.client import Publisher, ZepsError, query


def main(endpoint, stream):
    pub = None
    for line in FileObject(sys.stdin, "r"):
        words = line.split()
        answer = {}
        try:
            if words[0] == "info":
                answer = query(endpoint, timeout=5)
            else:
                if pub is None:
                    pub = Publisher(endpoint, stream, idempotent=True, heartbeat=0.2, expiry=1.0, timeout=15)
                if words[0] == "publish":
                    for i in range(int(words[2])):
                        pub.publish("k", "%s-%d" % (words[1], i))
                pub.flush(timeout=float(words[3]) if len(words) > 3 else 5)
                answer = {"ok": True}
        except ZepsError as exc:
            answer = {"ok": False, "error": str(exc)}
        print(json.dumps(answer), flush=True)
        gevent.sleep(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
