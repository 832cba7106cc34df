"""``/metrics``: the sampler's last snapshot in the Prometheus text format (prometheus-client).

Scrapes read the snapshot the sampler already took: a scrape never calls a
broker.  Names: ``zactors_<source>_<counter>_total`` for every counter a
pattern keeps and every total the dashboard charts as a rate (ZEPS
``published`` and ``delivered``, Clone ``updates``), the gauges each source lists, ``zactors_up{pattern}``, and
the dashboard's own (SSE clients, snapshots dropped for slow clients).
A per-key token's scrape shows what the key may see (:meth:`.app.Dashboard.view`).
"""
import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _name(text):
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


class Metrics:
    """``render(viewer)``: the exposition of ``dashboard`` (its sources, sampler and clients) for ``viewer``."""

    def __init__(self, dashboard):
        self.dashboard = dashboard

    def render(self, viewer=None):
        """The text for ``viewer`` (None: the operator, everything; else a client key)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.dashboard, viewer))
        return generate_latest(registry)


class _Collector:
    """A prometheus-client collector over what ``viewer`` may see of ``dashboard``."""

    def __init__(self, dashboard, viewer):
        self.dashboard = dashboard
        self.viewer = viewer

    def collect(self):
        dash = self.dashboard
        snapshot = dash.view(self.viewer, dash.latest() or {"sources": {}})
        up = GaugeMetricFamily("zactors_up", "1 while the pattern answers its introspection", labels=["pattern"])
        families = {}
        for source in dash.visible_sources(self.viewer):
            part = snapshot["sources"].get(source.name)
            sample = part and part.get("data")
            up.add_metric([source.name], 0 if sample is None else 1)
            if sample is None:
                continue
            counters = source.counters(sample)
            for key, value in sorted(counters.items()):
                if isinstance(value, (int, float)):
                    yield CounterMetricFamily("zactors_%s_%s" % (source.name, _name(key)),
                                              "%s counter %s" % (source.title, key), value=value)
            for key, value in sorted((part.get("totals") or {}).items()):
                if key not in counters and isinstance(value, (int, float)):  # (a counter already says it)
                    yield CounterMetricFamily("zactors_%s_%s" % (source.name, _name(key)),
                                              "%s total %s (the dashboard charts its rate)"
                                              % (source.title, source.charted.get(key, key)), value=value)
            for name, text, labels, value in source.gauges(sample):
                family = families.get(name)
                if family is None:
                    family = families[name] = GaugeMetricFamily("zactors_" + name, text, labels=sorted(labels))
                family.add_metric([str(labels[k]) for k in sorted(labels)], value)
        yield up
        yield from families.values()
        yield GaugeMetricFamily("zactors_dashboard_sse_clients", "Server-Sent-Events clients connected",
                                value=dash.clients)
        yield CounterMetricFamily("zactors_dashboard_snapshots_dropped", "Snapshots dropped for slow SSE clients",
                                  value=dash.dropped)
        yield CounterMetricFamily("zactors_dashboard_pages_refused", "Live pages refused (max_clients)",
                                  value=dash.refused)
        yield CounterMetricFamily("zactors_dashboard_tails_refused", "Live tails refused (max_tails)",
                                  value=sum(getattr(s, "tails_refused", 0) for s in dash.sources))
