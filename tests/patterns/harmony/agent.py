"""A Harmony node driven over stdin/stdout in JSON lines, for tests that run nodes in namespaces.

    python -m tests.patterns.harmony.agent '{"name": "A", "interval": 0.1}'       (zactors Node)
    python -m tests.patterns.harmony.agent --pyre '{"name": "P"}'                 (a pyre node)

Prints ``{"ready": id, "endpoint": ...}`` first, then one line per event:
``{"type", "peer", "name", "group", "address", "headers", "frames"}`` (frames
as latin-1 strings).  Reads commands: ``{"cmd": "join"|"leave", "group"}``,
``{"cmd": "shout", "group", "frames"}``, ``{"cmd": "whisper", "peer",
"frames"}``, ``{"cmd": "peers"}`` (prints ``{"peers": [...]}``), ``{"cmd": "stop"}``.
"""
import json
import sys


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def event_line(kind, peer, name, group=None, address=None, headers=None, frames=None):
    return {"type": kind, "peer": peer, "name": name, "group": group, "address": address, "headers": headers,
            "frames": None if frames is None else [f.decode("latin-1") for f in frames]}


def run_zactors(config):
    import gevent
    from zactors.patterns.harmony import Node

    node = Node(**config).start()
    out({"ready": node.id, "endpoint": node.endpoint})

    def pump():
        for e in node.events():
            out(event_line(e.type, e.peer, e.name, e.group, e.address, e.headers, e.frames))

    pumper = gevent.spawn(pump)
    pool = gevent.get_hub().threadpool
    while True:
        line = pool.spawn(sys.stdin.readline).get()
        if not line:
            break
        cmd = json.loads(line)
        frames = [f.encode("latin-1") for f in cmd.get("frames", ())]
        verb = cmd["cmd"]
        if verb == "join":
            node.join(cmd["group"])
        elif verb == "leave":
            node.leave(cmd["group"])
        elif verb == "shout":
            node.shout(cmd["group"], *frames)
        elif verb == "whisper":
            node.whisper(cmd["peer"], *frames)
        elif verb == "peers":
            out({"peers": node.peers()})
        elif verb == "stop":
            break
    node.stop()
    pumper.join(5)
    out({"stopped": True})


def run_pyre(config):
    import threading
    import uuid

    import zmq
    from pyre import Pyre

    node = Pyre(config.get("name"))
    node.start()
    out({"ready": node.uuid().hex.upper(), "endpoint": None})
    lock = threading.Lock()

    def commands():
        for line in sys.stdin:
            cmd = json.loads(line)
            frames = [f.encode("latin-1") for f in cmd.get("frames", ())]
            with lock:
                if cmd["cmd"] == "join":
                    node.join(cmd["group"])
                elif cmd["cmd"] == "leave":
                    node.leave(cmd["group"])
                elif cmd["cmd"] == "shout":
                    node.shout(cmd["group"], frames[0] if len(frames) == 1 else frames)
                elif cmd["cmd"] == "whisper":
                    node.whisper(uuid.UUID(cmd["peer"]), frames[0] if len(frames) == 1 else frames)
                elif cmd["cmd"] == "stop":
                    break
        stopping.set()

    stopping = threading.Event()
    threading.Thread(target=commands, daemon=True).start()
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    while not stopping.is_set():
        if not dict(poller.poll(100)):
            continue
        with lock:
            parts = node.recv()
        kind = parts.pop(0).decode()
        peer = uuid.UUID(bytes=parts.pop(0)).hex.upper()
        name = parts.pop(0).decode()
        if kind == "ENTER":
            headers = json.loads(parts.pop(0).decode())
            out(event_line(kind, peer, name, address=parts.pop(0).decode(), headers=headers))
        elif kind in ("JOIN", "LEAVE"):
            out(event_line(kind, peer, name, group=parts.pop(0).decode()))
        elif kind == "SHOUT":
            group = parts.pop(0).decode()
            out(event_line(kind, peer, name, group=group, frames=parts))
        elif kind == "WHISPER":
            out(event_line(kind, peer, name, frames=parts))
        else:
            out(event_line(kind, peer, name))
    node.stop()
    out({"stopped": True})


if __name__ == "__main__":
    if sys.argv[1] == "--pyre":
        run_pyre(json.loads(sys.argv[2]))
    else:
        run_zactors(json.loads(sys.argv[1]))
