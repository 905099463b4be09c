"""Prometheus metrics of the HTTP layer.

Request counts and latencies by verb, resource and code are what the benchmarks and any
dashboard need to compare the two stacks with kube-apiserver itself, so the names follow
kube-apiserver's (``apiserver_request_total``, ``apiserver_request_duration_seconds``).  The
service's own requests to kube-apiserver are counted and timed too (``agl_kube_*``), as client-go's
``rest_client_*`` metrics do for controllers: a request's time minus its kube calls is the service's own.  Each
server owns its registry: several servers (or tests) in one process never collide.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.client import informer

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ConsistentLists(Collector):
    """How each watch cache answered consistent lists (:func:`shared.client.informer.consistent_list_answers`):
    the share answered by kube-apiserver is what read fences (``--no-read-fence``) save."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "agl_watch_cache_consistent_lists",
            "Consistent lists by watch cache and answer: cache (current as it was), fence (current once its read "
            "fence came back), kube (kube-apiserver answered).",
            labels=("cache", "answer"),
        )
        for name, answer, count in informer.consistent_list_answers():
            family.add_metric((name, answer), count)
        yield family


class Metrics:
    """The counters, histograms and gauges of one API server."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if process:
            # RSS and CPU of the service (benchmark B3 reads the RSS), and its garbage collector.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
            Gauge("python_gc_frozen_objects", "Objects in the collector's permanent generation (gc.freeze): "
                  "never traversed by a collection.", registry=self.registry).set_function(gc.get_freeze_count)
            ConsistentLists(self.registry)
        self.requests = Counter(
            "apiserver_request_total",
            "Requests served, by verb, group, resource and HTTP code.",
            ("verb", "group", "resource", "code"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "apiserver_request_duration_seconds",
            "Request latency (for watches: the whole stream), by verb, group and resource.",
            ("verb", "group", "resource"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.watchers = Gauge(
            "apiserver_registered_watchers",
            "Watch streams currently open, by group and resource.",
            ("group", "resource"),
            registry=self.registry,
        )
        self.kube_requests = Counter(
            "agl_kube_requests_total",
            "The service's own requests to kube-apiserver, by HTTP method, resource and HTTP code "
            "(<error>: no answer).",
            ("verb", "resource", "code"),
            registry=self.registry,
        )
        self.kube_latency = Histogram(
            "agl_kube_request_duration_seconds",
            "Seconds until kube-apiserver's answer to one of the service's own requests began (for a watch: "
            "until it started streaming), by HTTP method and resource.",
            ("verb", "resource"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.authorization_decisions = Counter(
            "apiserver_authorization_decisions_total",
            "Authorization decisions taken by the HTTP layer.",
            ("decision",),
            registry=self.registry,
        )
        self._decisions = {True: self.authorization_decisions.labels("allow"),
                           False: self.authorization_decisions.labels("deny")}
        # Each series' counter and histogram, by their labels: prometheus_client's ``labels`` checks and
        # joins the labels under a lock on every call (a tenth of a get's own work, issue 26's get round in
        # docs/design/perf); the series are the same objects it keeps, none is ever removed.
        self._served: dict[tuple[str, str, str, int], tuple[Counter, Histogram]] = {}
        self._sent: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}

    def observe(self, verb: str, group: str, resource: str, code: int, seconds: float) -> None:
        """Record one finished request."""
        series = self._served.get((verb, group, resource, code))
        if series is None:
            series = self._served[(verb, group, resource, code)] = (
                self.requests.labels(verb, group, resource, str(code)), self.latency.labels(verb, group, resource))
        series[0].inc()
        series[1].observe(seconds)

    def decided(self, allowed: bool) -> None:
        """Count one authorization decision of the HTTP layer."""
        self._decisions[allowed].inc()

    def observe_kube(self, verb: str, resource: str, code: str, seconds: float) -> None:
        """Record one of the service's own kube-apiserver requests (a :data:`shared.client.latency.Observer`)."""
        series = self._sent.get((verb, resource, code))
        if series is None:
            series = self._sent[(verb, resource, code)] = (
                self.kube_requests.labels(verb, resource, code), self.kube_latency.labels(verb, resource))
        series[0].inc()
        series[1].observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its Content-Type, for ``/metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
