"""Real-time output over UDP multicast, with gaps repaired from the broker's journal.

The spec's multicast output ("real-time data over multicast; clients that
want both real-time and historical data create two connections and
reconcile them").  The pyzmq wheel has no PGM or NORM, so zactors uses plain
UDP multicast:

- :class:`MulticastSender` (the broker owns one: ``Broker(...,
  multicast=(group, port), multicast_interface=ADDRESS)``) sends every
  journaled message of every stream as one MC-DELIVER datagram (stream,
  sequence, key, body; see :mod:`.protocol`) once it is written, and an
  MC-HEAD (stream, last sequence) per stream every heartbeat.  A message
  larger than ``max_datagram`` is not multicast: receivers repair it.  A
  send the kernel refuses (buffers full) is counted, never retried.
- :class:`MulticastSubscriber` (an actor) joins the group and delivers one
  stream's messages, filtered by its patterns, in sequence order with no
  gap and no duplicate: a missing sequence (a lost datagram, a late start
  with ``from_seq``, a lost tail that MC-HEAD reveals) opens a ZEPS peering
  to the broker that replays from the first missing sequence; once the
  multicast messages waiting behind the gap are reached the peering is
  closed again.  Its application side is :class:`~.client.Subscriber`'s:
  ``get``, iteration, ``pending``.

``interface`` is an IPv4 address or an interface name: the one that sends
(``IP_MULTICAST_IF``) or joins (``IP_ADD_MEMBERSHIP``).  Without it the
kernel's routing decides (there must be a route for the group).  Neither
object is safe across OS threads.
"""
import errno
import logging
import socket
import time
from collections import deque

import zmq
from gevent.event import Event

from zactors.actors.actor import Actor, command
from zactors.actors.auth import curve_client
from zactors.actors.sockets import limit_size

from . import protocol as p
from .client import Message, ZepsError
from .matcher import Filter

__all__ = ["MulticastSender", "MulticastSubscriber", "interface_address"]

log = logging.getLogger(__name__)

_monotonic = time.monotonic


def interface_address(interface):
    """The IPv4 address of ``interface`` (an address already, or an interface name); None for None."""
    if interface is None:
        return None
    try:
        socket.inet_aton(interface)
        return interface
    except OSError:
        pass
    import psutil
    for address in psutil.net_if_addrs().get(interface, ()):
        if address.family == socket.AF_INET:
            return address.address
    raise ValueError("no IPv4 interface named or addressed %r" % interface)


def _group(group):
    packed = socket.inet_aton(group)
    if not 224 <= packed[0] <= 239:
        raise ValueError("%s is not an IPv4 multicast group (224.0.0.0/4)" % group)
    return packed


class MulticastSender:
    """Sends MC-DELIVER and MC-HEAD datagrams to ``group:port``.  Plain object; never blocks."""

    __slots__ = ("address", "sock", "max_datagram", "stats", "_fields")

    def __init__(self, group, port, *, interface=None, ttl=1, loop=True, max_datagram=8192):
        _group(group)
        self.address = (group, port)
        self.max_datagram = max_datagram
        self.stats = {"sent": 0, "too_large": 0, "refused": 0}
        self._fields = {}
        sock = self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1 if loop else 0)
            address = interface_address(interface)
            if address is not None:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))
        except BaseException:
            sock.close()
            raise

    def _field(self, stream):
        field = self._fields.get(stream)
        if field is None:
            field = self._fields[stream] = p.stream_field(stream)
        return field

    def send(self, stream, sequence, key, body):
        """Multicast one message (False if too large or refused: receivers repair it)."""
        if len(key) + len(body) + 30 + len(stream) > self.max_datagram:
            self.stats["too_large"] += 1
            return False
        return self._send(p.mc_deliver(self._field(stream), sequence, key, body))

    def head(self, stream, last):
        """Multicast the stream's last sequence."""
        return self._send(p.mc_head(self._field(stream), last))

    def _send(self, datagram):
        try:
            self.sock.sendto(datagram, self.address)
        except OSError as exc:  # ENOBUFS, EAGAIN, ENETUNREACH...: the receivers repair from the journal
            self.stats["refused"] += 1
            if self.stats["refused"] % 1000 == 1:
                log.warning("multicast to %s:%d refused (%s); %d so far", *self.address,
                            errno.errorcode.get(exc.errno, exc), self.stats["refused"])
            return False
        self.stats["sent"] += 1
        return True

    def close(self):
        self.sock.close()


class MulticastSubscriber(Actor):
    """Real-time messages of ``stream`` from multicast, gaps repaired from the broker at ``endpoint``.

    ``group``/``port`` is the broker's multicast output; ``patterns`` filter
    keys as :class:`~.client.Subscriber`'s do.  ``from_seq=N`` starts at
    sequence N (repaired from the journal up to the multicast flow); the
    default takes the multicast flow from the first datagram received.
    ``stats`` counts ``multicast`` (datagrams used), ``repaired`` (messages
    taken from the broker), ``duplicates`` and ``gaps`` (repairs started).

    Commands: ``INFO`` (next sequence, highest seen, repairing, counters).
    """

    #: repair peering: credit window in bytes, and seconds without progress before it is reopened
    repair_window = 4 << 20
    repair_timeout = 5.0
    #: multicast messages held behind a gap at most (more: the oldest held are dropped, repair covers them)
    max_held = 100000

    def __init__(self, group, port, endpoint, stream, *patterns, from_seq=None, interface=None, curve=None,
                 name=None):
        self.group = group
        self.port = port
        self.endpoint = endpoint
        self.stream = stream.encode() if isinstance(stream, str) else bytes(stream)
        self.filter = Filter()
        for pattern in patterns or (b"",):
            self.filter.add(pattern.encode() if isinstance(pattern, str) else bytes(pattern))
        self.next_seq = from_seq if from_seq else None
        self.interface = interface
        self.curve = curve
        self._queue = deque()
        self._ready = Event()
        self._closed = False
        self._error = None
        if name:
            self.name = name

    # -- application side -------------------------------------------------------------
    def get(self, timeout=None):
        """The next :class:`~.client.Message`; None after ``timeout`` seconds with none, or once closed."""
        queue = self._queue
        if not queue:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            self._ready.clear()
            self._ready.wait(timeout)
            if not queue:
                return None
        return queue.popleft()

    @property
    def pending(self):
        return len(self._queue)

    def __iter__(self):
        while True:
            message = self.get(None)
            if message is None:
                return
            yield message

    # -- actor side ---------------------------------------------------------------------
    def setup(self):
        group = _group(self.group)
        address = interface_address(self.interface)
        sock = self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.group, self.port))  # only this group's datagrams
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                            group + socket.inet_aton(address or "0.0.0.0"))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._held = {}            # sequence -> (key, body), multicast messages past a gap
        self._high = None          # highest sequence multicast says exists (None: no datagram yet)
        self._repair = None        # DEALER of the repair peering, while one is open
        self._repair_progress = 0.0
        self._granted = 0
        self.add_fd(sock.fileno(), self._on_datagrams)
        self.call_every(1.0, self._check_repair)
        if self.next_seq is not None:
            self._open_repair()

    def teardown(self):
        self._close_repair()
        self.remove_fd(self._udp.fileno())
        self._udp.close()
        self._closed = True
        self._ready.set()

    def _on_datagrams(self):
        recv = self._udp.recv
        for _ in range(256):
            try:
                datagram = recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("%s: multicast receive failed: %s", self.name, exc)
                return
            try:
                message = p.decode(datagram)
            except p.ProtocolError:
                self.stats["invalid"] += 1
                continue
            kind = type(message)
            if kind is p.McDeliver and message.stream == self.stream:
                self._on_multicast(message.sequence, message.key, message.body)
            elif kind is p.McHead and message.stream == self.stream:
                self._on_head(message.sequence)

    def _on_multicast(self, seq, key, body):
        if self.next_seq is None:
            self.next_seq = seq
        if self._high is None or seq > self._high:
            self._high = seq
        nxt = self.next_seq
        if seq < nxt or seq in self._held:
            self.stats["duplicates"] += 1
            return
        self.stats["multicast"] += 1
        if seq == nxt:
            self._deliver(seq, key, body)
            self._release()
            return
        held = self._held
        if len(held) >= self.max_held:
            held.pop(min(held))
        held[seq] = (key, body)
        if self._repair is None:
            self.stats["gaps"] += 1
            self._open_repair()

    def _on_head(self, last):
        if self._high is None or last > self._high:
            self._high = last
        if self.next_seq is not None and last >= self.next_seq and self._repair is None:
            self.stats["gaps"] += 1
            self._open_repair()

    def _deliver(self, seq, key, body):
        self.next_seq = seq + 1
        if self.filter(key):
            self._queue.append(Message(seq, key, body))
            self._ready.set()

    def _release(self):
        """Deliver the held messages that are now next; close the repair once past the gap."""
        held = self._held
        while held:
            item = held.pop(self.next_seq, None)
            if item is None:
                break
            self._deliver(self.next_seq, *item)
        if self._repair is not None and not held and self._high is not None and self.next_seq > self._high:
            self._close_repair()

    # -- the repair peering ---------------------------------------------------------------
    def _open_repair(self):
        sock = self._repair = self.socket(zmq.DEALER, rcvhwm=0)
        limit_size(sock, max(self.repair_window, 4096))  # a DELIVER costs credit: none is larger than the window
        if self.curve:
            curve_client(sock, self.curve[1], self.curve[0])
        sock.connect(self.endpoint)
        sock.send(p.attach(self.stream))
        sock.send(p.features(b"tokens"))  # PROBEs ask what we drained (a broker may require them)
        sock.send(p.subscribe(b"", self.next_seq - 1))  # everything: the sequence must be seen whole
        sock.send(p.credit(self.repair_window))
        self._granted = 0
        self._repair_progress = _monotonic()
        self.add_reader(sock, self._on_repair)
        log.debug("%s: repairing from %d (multicast is at %d)", self.name, self.next_seq, self._high)

    def _close_repair(self):
        sock, self._repair = self._repair, None
        if sock is not None:
            try:
                sock.send(p.DETACH_FRAME, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self.close_socket(sock, linger=0.1)

    def _on_repair(self, frames):
        try:
            message = p.decode(frames[0])
        except p.ProtocolError:
            self.stats["invalid"] += 1
            return
        kind = type(message)
        if kind is p.Deliver:
            self._repair_progress = _monotonic()
            seq = message.sequence
            self._granted += p.deliver_cost(message.key, message.body)
            if self._granted >= self.repair_window >> 2:
                self._repair.send(p.credit(self._granted))
                self._granted = 0
            if seq < self.next_seq:
                self.stats["duplicates"] += 1
            else:
                if seq > self.next_seq:  # retention removed what we missed: nothing can bring it back
                    self.stats["lost_to_retention"] += seq - self.next_seq
                    log.warning("%s: sequences %d..%d are gone from the journal", self.name, self.next_seq, seq - 1)
                    for old in [s for s in self._held if s < seq]:
                        del self._held[old]
                self._held.pop(seq, None)
                self.stats["repaired"] += 1
                self._deliver(seq, message.key, message.body)
            self._release()
        elif kind is p.Ping:
            self._repair.send(p.PING_OK_FRAME)
        elif kind is p.Probe:
            self._repair.send(p.probe_ok(message.token))
        elif kind is p.Invalid:
            log.warning("%s: the broker refused the repair: %s", self.name, message.reason)
            self._error = ZepsError(message.reason)
            self._ready.set()
        elif kind is p.Detach:
            self._close_repair()

    def _check_repair(self):
        if self._repair is not None and _monotonic() - self._repair_progress > self.repair_timeout:
            if self._high is not None and self.next_seq > self._high and not self._held:
                self._close_repair()  # caught up while quiet
            else:
                log.info("%s: repair made no progress for %gs; reopening it", self.name, self.repair_timeout)
                self._close_repair()
                self._open_repair()

    @command(reply=True)
    def info(self):
        return {"next_seq": self.next_seq, "high": self._high, "held": len(self._held),
                "repairing": self._repair is not None, "counters": dict(self.stats)}
