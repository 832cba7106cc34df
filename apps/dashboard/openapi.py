"""The OpenAPI 3.1 description the dashboard serves at ``api/openapi.json``."""
__all__ = ["describe"]

_ERROR = {"description": "refused: {\"error\": \"one line\"}",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_SHOWN = {"type": "object", "description": "bytes made safe to show: text if printable UTF-8, else hex; bounded",
          "properties": {"text": {"type": "string"}, "hex": {"type": "string"}, "size": {"type": "integer"},
                         "truncated": {"type": "boolean"}}}


def _get(summary, schema=None, params=(), stream=False, media="application/json"):
    content = {"text/event-stream": {"schema": {"type": "string"}}} if stream else \
        {media: {"schema": schema or {"type": "object"}}}
    return {"get": {"summary": summary, "parameters": [_param(*p) for p in params],
                    "responses": {"200": {"description": "OK", "content": content}, "4XX": _ERROR,
                                  "503": _ERROR}}}


def _param(name, text, required=False):
    return {"name": name, "in": "query", "required": required, "description": text, "schema": {"type": "string"}}


def _post(summary, properties, required):
    return {"post": {"summary": summary,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": {
                         "type": "object", "properties": properties, "required": required}}}},
                     "responses": {"200": {"description": "sent to the server (the page re-reads the map)",
                                           "content": {"application/json": {"schema": {"type": "object"}}}},
                                   "4XX": _ERROR}}}


def describe(sources):
    """The description of the API over ``sources`` (only the paths they offer)."""
    names = [s.name for s in sources]
    paths = {
        "/api/status": _get("Last snapshot of every pattern: status, summary, current rates, full sample",
                            {"$ref": "#/components/schemas/Snapshot"}),
        "/api/history": _get("Charted series (rates per second, or levels), oldest first, with their times"),
        "/api/events": _get("Server-Sent Events: one `snapshot` event (a Snapshot) per sampler tick", stream=True),
        "/metrics": _get("Prometheus text exposition format 0.0.4 (text/plain; version=0.0.4): counters, gauges,"
                         " zactors_up", {"type": "string"}, media="text/plain"),
    }
    for name in names:
        paths["/api/%s" % name] = _get("The %s part of the last snapshot" % name)
    if "zeps" in names:
        paths["/api/zeps/tail"] = _get("Live tail of a stream: `messages` events with the newest messages",
                                       params=[("stream", "stream name", True),
                                               ("key", "key pattern: a prefix, re:REGEX (RE2 syntax) or glob:GLOB")],
                                       stream=True)
    if "clone" in names:
        paths["/api/clone/keys"] = _get("Keys directly under a prefix (value preview, ttl left), and the subtrees "
                                        "below it", {"$ref": "#/components/schemas/CloneKeys"},
                                        params=[("prefix", "key prefix, e.g. /orders/"),
                                                ("limit", "keys (and subtrees) at most (500)")])
        paths["/api/clone/set"] = _post("Set a key (through a Clone client: KVSET to the collector)",
                                        {"key": {"type": "string"}, "value": {"type": "string"},
                                         "ttl": {"type": "number"}}, ["key", "value"])
        paths["/api/clone/delete"] = _post("Delete a key", {"key": {"type": "string"}}, ["key"])
    if "supervisor" in names:
        paths["/api/supervisor/kill"] = _post("Kill a part's actor (a debug command): the supervision tree "
                                              "restarts it", {"part": {"type": "string"}}, ["part"])
    return {
        "openapi": "3.1.0",
        "info": {"title": "zactors dashboard", "version": "1",
                 "description": "Live state of a zactors node.  With a token every request needs it "
                                "(Authorization: Bearer TOKEN); without one only local callers (by the "
                                "connection's peer address) are served; cross-site requests are refused."},
        "paths": paths,
        "components": {
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "string"}}},
                "Shown": _SHOWN,
                "CloneKeys": {"type": "object", "properties": {
                    "prefix": {"type": "string"},
                    "truncated": {"type": "boolean", "description": "more keys or subtrees than listed"},
                    "keys": {"type": "array", "items": {"type": "object", "properties": {
                        "key": {"$ref": "#/components/schemas/Shown"},
                        "raw": {"type": "string", "description": "the key's bytes, hex"},
                        "value": {"$ref": "#/components/schemas/Shown"},
                        "ttl": {"type": ["number", "null"],
                                "description": "seconds left before the key expires; null: no ttl"}}}},
                    "subtrees": {"type": "array", "items": {"type": "object", "properties": {
                        "prefix": {"$ref": "#/components/schemas/Shown"}, "raw": {"type": "string"},
                        "keys": {"type": "integer", "description": "keys under it"}}}}}},
                "Snapshot": {"type": "object", "properties": {
                    "time": {"type": "number"}, "interval": {"type": "number"},
                    "sources": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                        "title": {"type": "string"}, "status": {"enum": ["ok", "warn", "down"]},
                        "summary": {"type": "string"}, "charted": {"type": "object"},
                        "now": {"type": "object"}, "data": {"type": ["object", "null"]}}}}}},
            },
        },
        "security": [{}, {"token": []}],
    }
