"""UDP beacon: broadcast a small payload at an interval, and listen for others.

:class:`Beacon` is an actor around one UDP socket (a non-blocking
``gevent.socket`` read from the actor loop through ``add_fd``) bound to
``port`` on all addresses, broadcasting to the broadcast address of one
IPv4 interface.  The interface is chosen by name or address
(``interface="eth0"`` or ``"192.0.2.1"``), else the first interface that is
up, not loopback and has a broadcast address (interfaces come from psutil).
Without one, construction raises :class:`BeaconError` saying so.

Commands (all from the parent, see :class:`actors.Actor`):

``PUBLISH payload [interval]``  (reply: True if the first send worked)
    Broadcast ``payload`` now and then every ``interval`` seconds.
``SILENCE``  (no reply)
    Stop broadcasting.
``SUBSCRIBE prefix``  (no reply)
    Report received beacons whose payload starts with ``prefix`` (b"": all).
``UNSUBSCRIBE``  (no reply)
    Stop reporting.
``INFO``  (reply: dict interface, address, broadcast, port)

Events: ``BEACON address payload`` (address: the sender's IPv4 address as str).

A beacon never reports its own broadcasts (same payload from one of this
host's addresses).  A failing send (network down, unreachable) is counted
in ``stats["send_errors"]``, logged (first time, then every 100th) and tried
again at the next interval: the actor lives on.
"""
from __future__ import annotations

import ipaddress
import logging
import socket as _stdsocket
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import psutil
from gevent import socket

from .actor import Actor, command

if TYPE_CHECKING:
    from .reactor import Timer

__all__ = ["Beacon", "BeaconError", "choose_interface", "MAX_PAYLOAD",
           "PUBLISH", "SILENCE", "SUBSCRIBE", "UNSUBSCRIBE", "INFO", "BEACON"]

#: the command verbs and the event name, for callers (written once, here)
PUBLISH, SILENCE, SUBSCRIBE, UNSUBSCRIBE, INFO = "PUBLISH", "SILENCE", "SUBSCRIBE", "UNSUBSCRIBE", "INFO"
BEACON = "BEACON"

log = logging.getLogger(__name__)

#: largest beacon payload sent or reported (as CZMQ's zbeacon)
MAX_PAYLOAD = 255
_RECV_CAP = 64  # datagrams read per wake-up before yielding


class BeaconError(OSError):
    """No usable interface, or the UDP socket cannot be set up."""


def _ipv4_interfaces():
    """``[(name, address, broadcast, up, loopback)]`` for each IPv4 address."""
    stats = psutil.net_if_stats()
    found = []
    for name, addrs in psutil.net_if_addrs().items():
        st = stats.get(name)
        up = bool(st and st.isup)
        for addr in addrs:
            if addr.family != _stdsocket.AF_INET:
                continue
            ip = ipaddress.IPv4Address(addr.address)
            # The network's broadcast address, from the netmask: what getifaddrs
            # reports as "broadcast" is unset when the address was added without one.
            broadcast = None
            if not ip.is_loopback and not addr.ptp:
                if addr.netmask:
                    network = ipaddress.IPv4Network("%s/%s" % (ip, addr.netmask), strict=False)
                    if network.prefixlen < 31:
                        broadcast = str(network.broadcast_address)
                else:
                    broadcast = addr.broadcast
            found.append((name, addr.address, broadcast, up, ip.is_loopback))
    return found


def choose_interface(spec: str | None = None,
                     interfaces: Sequence[tuple[str, str, str | None, bool, bool]] | None = None,
                     ) -> tuple[str, str, str]:
    """``(name, address, broadcast)`` of the interface to beacon on.

    ``spec`` is an interface name or one of its IPv4 addresses; None picks
    the first interface that is up, not loopback, not link-local and can
    broadcast.  Raises :class:`BeaconError` with what is available.
    ``interfaces`` is a listing from ``_ipv4_interfaces`` to reuse.
    """
    if interfaces is None:
        interfaces = _ipv4_interfaces()
    have = ", ".join("%s %s%s" % (n, a, "" if up else " (down)") for n, a, _, up, _ in interfaces) or "none"
    if spec:
        for name, address, broadcast, up, loopback in interfaces:
            if spec in (name, address):
                if not broadcast:
                    raise BeaconError("interface %s (%s) cannot broadcast; have: %s" % (name, address, have))
                if not up:
                    log.warning("beacon interface %s is down; sends fail until it is up", name)
                return name, address, broadcast
        raise BeaconError("no IPv4 interface named or addressed %r; have: %s" % (spec, have))
    for name, address, broadcast, up, loopback in interfaces:
        if up and broadcast and not loopback and not ipaddress.IPv4Address(address).is_link_local:
            return name, address, broadcast
    raise BeaconError("no broadcast-capable IPv4 interface is up (have: %s); choose an interface, "
                      "or discover peers by endpoint" % have)


class Beacon(Actor):
    """UDP broadcast/listen actor; see the module docstring for its vocabulary."""

    #: beacons are lossy by nature (UDP, sent again every interval): a parent
    #: that reads slowly loses some, counted, rather than holding the actor back
    events_policy = "drop"

    def __init__(self, port: int = 5670, interface: str | None = None, interval: float = 1.0,
                 name: str | None = None) -> None:
        if not 0 < port < 65536:
            raise ValueError("beacon port must be 1..65535, got %r" % (port,))
        if interval <= 0:
            raise ValueError("beacon interval must be positive")
        self.port = port
        self.interface = interface
        self.interval = interval
        self.name = name or "Beacon"
        self.address: str | None = None
        self.broadcast: str | None = None
        self._udp: Any = None
        self._payload: bytes | None = None
        self._timer: Timer | None = None
        self._prefix: bytes | None = None
        self._errors_logged = 0
        self._own: Collection[str] = ()

    # -- actor side ---------------------------------------------------------
    def setup(self) -> None:
        interfaces = _ipv4_interfaces()
        self.interface, self.address, self.broadcast = choose_interface(self.interface, interfaces)
        self._own = {address for _, address, _, _, _ in interfaces}
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            udp.bind(("", self.port))
        except OSError as exc:
            udp.close()
            raise BeaconError("cannot bind UDP port %d: %s" % (self.port, exc)) from None
        udp.setblocking(False)
        self._udp = udp
        self.add_fd(udp.fileno(), self._drain)
        log.debug("%s: %s %s, broadcast %s:%d", self.name, self.interface, self.address, self.broadcast, self.port)

    def teardown(self) -> None:
        if self._udp is not None:
            self.remove_fd(self._udp.fileno())
            self._udp.close()

    def _drain(self):
        """Read what is waiting (level-triggered: the rest wakes us next round)."""
        udp = self._udp
        for _ in range(_RECV_CAP):
            try:
                payload, (sender, _port) = udp.recvfrom(MAX_PAYLOAD + 1)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # e.g. ICMP errors reported on the socket
                self.stats["recv_errors"] += 1
                log.debug("%s: receive failed: %s", self.name, exc)
                break
            self._received(sender, payload)

    def _received(self, sender, payload):
        if self._prefix is None:
            return
        if len(payload) > MAX_PAYLOAD:
            self.stats["oversize"] += 1
            return
        if payload == self._payload and sender in self._own:
            self.stats["own"] += 1
            return
        if not payload.startswith(self._prefix):
            self.stats["filtered"] += 1
            return
        self.stats["received"] += 1
        self.emit(BEACON, sender, payload)

    def _send(self):
        try:
            self._udp.sendto(self._payload, (self.broadcast, self.port))
        except OSError as exc:
            self.stats["send_errors"] += 1
            if self._errors_logged % 100 == 0:
                log.warning("%s: broadcast to %s:%d failed (%s); retrying every %ss",
                            self.name, self.broadcast, self.port, exc.strerror or exc, self.interval)
            self._errors_logged += 1
            return False
        self.stats["sent"] += 1
        if self._errors_logged:
            log.info("%s: broadcasting again after %d failed send(s)", self.name, self._errors_logged)
            self._errors_logged = 0
        return True

    # -- commands -----------------------------------------------------------
    @command(PUBLISH, reply=True)
    def publish(self, payload: bytes, interval: float | None = None) -> bool:
        if not isinstance(payload, bytes) or not 0 < len(payload) <= MAX_PAYLOAD:
            raise ValueError("beacon payload must be 1..%d bytes" % MAX_PAYLOAD)
        if interval is not None:
            if interval <= 0:
                raise ValueError("beacon interval must be positive")
            self.interval = interval
        self._payload = payload
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.call_every(self.interval, self._send)
        return self._send()

    @command(SILENCE)
    def silence(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @command(SUBSCRIBE)
    def listen_for(self, prefix: bytes = b"") -> None:
        self._prefix = bytes(prefix)

    @command(UNSUBSCRIBE)
    def stop_listening(self) -> None:
        self._prefix = None

    @command(INFO, reply=True)
    def info(self) -> dict[str, Any]:

        return {"interface": self.interface, "address": self.address,
                "broadcast": self.broadcast, "port": self.port}

