"""Gossip: the zactors extension by which Harmony nodes tell each other about peers.

Only between nodes whose HELLO carries the header ``X-ZACTORS-GOSSIP``, so
Zyre and pyre never see it.  It travels as WHISPERs whose first frame is a
mark no application frame starts with (a NUL byte):

* peers: ``\\x00zactors/gossip/peers``, then one frame per peer,
  ``"<32 hex digits of its UUID> <endpoint>"`` (UTF-8), at most
  ``GOSSIP_LIMIT`` per message;
* goodbye: ``\\x00zactors/gossip/bye``: the sender is stopping.

Pure functions; the endpoints parsed here are still to be validated
(:mod:`.endpoints`) by whoever connects to them.  Safe from any thread.
"""

__all__ = ["GOSSIP_HEADER", "GOSSIP_LIMIT", "PEERS_MARK", "BYE_MARK", "is_gossip", "peers_contents",
           "bye_contents", "parse_entry"]

#: the HELLO header by which a node says it speaks gossip
GOSSIP_HEADER = "X-ZACTORS-GOSSIP"
#: entries one gossip message carries, and the most a node reads from one (the rest are counted)
GOSSIP_LIMIT = 256
PEERS_MARK = b"\x00zactors/gossip/peers"
BYE_MARK = b"\x00zactors/gossip/bye"


def is_gossip(content):
    """True if WHISPER ``content`` (a list of frames) is a gossip message."""
    return bool(content) and (content[0] == PEERS_MARK or content[0] == BYE_MARK)


def peers_contents(peers):
    """The WHISPER contents telling about ``peers``, ``(hex id, endpoint)`` pairs, ``GOSSIP_LIMIT`` a message."""
    entries = [("%s %s" % (peer_id, endpoint)).encode() for peer_id, endpoint in peers]
    return [[PEERS_MARK] + entries[start:start + GOSSIP_LIMIT] for start in range(0, len(entries), GOSSIP_LIMIT)]


def bye_contents():
    """The WHISPER content of a goodbye."""
    return [BYE_MARK]


def parse_entry(entry):
    """``(uuid, endpoint)`` of one peers entry (a 16-byte UUID, a str); ValueError if malformed."""
    hexid, endpoint = entry.decode().split(" ", 1)  # UnicodeDecodeError is a ValueError
    uuid = bytes.fromhex(hexid)
    if len(uuid) != 16:
        raise ValueError("a gossip entry's UUID has 16 bytes, not %d" % len(uuid))
    return uuid, endpoint
