"""Endpoints a Harmony node may connect to: ``tcp://host:port`` and nothing else.

Every endpoint a node learns from the network (a HELLO, a gossip entry, a
beacon's address) or from its application is checked here before a DEALER
is pointed at it: a peer must never make a node connect to an ``inproc://``
or ``ipc://`` endpoint of its own process, pass libzmq a string it rejects
(``connect`` would raise inside the node), or name an address no peer can
have.  Pure functions: safe from any thread.
"""
import ipaddress
import re

__all__ = ["peer_endpoint"]

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(r"(?:%s\.)*%s\.?\Z" % (_LABEL, _LABEL))


def peer_endpoint(endpoint):
    """``endpoint`` if it is ``tcp://host:port`` a peer may have; ValueError otherwise.

    host: an IPv4 address, an IPv6 address in brackets, or a DNS name (at
    most 253 characters); never a wildcard, an unspecified (0.0.0.0, ::),
    multicast or broadcast address.  port: 1..65535, decimal.
    """
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
        raise ValueError("not a tcp:// endpoint: %.80r" % (endpoint,))
    host, colon, port = endpoint[6:].rpartition(":")
    if not colon or not host:
        raise ValueError("no host:port in %.80r" % endpoint)
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise ValueError("bad port in %.80r" % endpoint)
    if host.startswith("[") and host.endswith("]"):
        address = _address(host[1:-1], ipaddress.IPv6Address, endpoint)
    elif host.isascii() and all(c.isdigit() or c == "." for c in host):
        address = _address(host, ipaddress.IPv4Address, endpoint)
    elif len(host) <= 253 and _HOSTNAME.match(host):
        return endpoint
    else:
        raise ValueError("bad host in %.80r" % endpoint)
    if address.is_unspecified or address.is_multicast or address == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError("%s is not a peer's address" % address)
    return endpoint


def _address(text, kind, endpoint):
    try:
        return kind(text)
    except ValueError:
        raise ValueError("bad address in %.80r" % endpoint) from None
