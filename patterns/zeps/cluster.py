"""Streams over several broker pairs: a static cluster map and a stable hash of the stream name.

A cluster map is the list of pairs (each ``"tcp://a:5570,tcp://b:5570"``, or one broker), written as
one string with ``;`` between pairs::

    "tcp://a1:5570,tcp://b1:5570;tcp://a2:5570,tcp://b2:5570;tcp://a3:5570,tcp://b3:5570"

Each stream lives on exactly one pair: the one at index ``blake2b-64(name) mod len(pairs)``, the same in
every process and every run.  Clients (``Publisher``, ``Subscriber``, ``query``), the CLI's ``--connect``
and the Spark source take a map wherever they take an endpoint.  The map is static: there is no
rebalancing, so adding a pair moves the streams whose hash lands elsewhere (their journals stay where
they were): size the map up front.  Brokers do not know the map; plain functions, thread-safe.
"""
from __future__ import annotations

import hashlib

__all__ = ["ClusterMap", "is_map", "resolve"]


def is_map(endpoint: str) -> bool:
    """True if ``endpoint`` is a cluster map (pairs separated by ``;``)."""
    return ";" in endpoint


class ClusterMap:
    """The pairs of a cluster, in map order; :meth:`pair_for` places a stream on one."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[str]) -> None:
        self.pairs = [p.strip() for p in pairs if p.strip()]
        if not self.pairs:
            raise ValueError("a cluster map needs at least one pair")

    @classmethod
    def parse(cls, text: str) -> ClusterMap:
        return cls(text.split(";"))

    def index_for(self, stream: bytes) -> int:
        digest = hashlib.blake2b(stream, digest_size=8).digest()
        return int.from_bytes(digest, "big") % len(self.pairs)

    def pair_for(self, stream: bytes) -> str:
        """The endpoint(s) of the pair that holds ``stream``."""
        return self.pairs[self.index_for(stream)]

    def __str__(self) -> str:
        return ";".join(self.pairs)


def resolve(endpoint: str, stream: bytes) -> str:
    """The pair (or broker) for ``stream``: ``endpoint`` itself unless it is a cluster map."""
    return ClusterMap.parse(endpoint).pair_for(stream) if is_map(endpoint) else endpoint
