"""Which resource a kube path names, as the services label their own kube requests (shared.client.latency)."""

from __future__ import annotations

import pytest

from shared.client.latency import resource_of
from shared.server.metrics import Metrics
from tests.kube import metric_samples


@pytest.mark.parametrize(("path", "resource"), [
    ("/apis/helm.toolkit.fluxcd.io/v2/namespaces/ns/helmreleases", "helmreleases"),
    ("/apis/helm.toolkit.fluxcd.io/v2/namespaces/ns/helmreleases/app-x", "helmreleases"),
    ("/apis/helm.toolkit.fluxcd.io/v2/namespaces/ns/helmreleases/app-x/status", "helmreleases/status"),
    ("/apis/helm.toolkit.fluxcd.io/v2/helmreleases?labelSelector=a%3Db&limit=1", "helmreleases"),
    ("/api/v1/namespaces/ns/events", "events"),
    ("/api/v1/namespaces/ns/events/app-x.17f", "events"),
    ("/api/v1/namespaces", "namespaces"),
    ("/api/v1/namespaces/ns", "namespaces"),
    ("/api/v1/namespaces/ns/status", "namespaces/status"),
    ("/api/v1/namespaces/ns/pods/p/proxy/metrics", "pods/proxy"),
    ("/apis/authorization.k8s.io/v1/subjectaccessreviews", "subjectaccessreviews"),
    ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/helm-agl", "leases"),
    ("/apis/cozystack.io/v1alpha1/applicationdefinitions/redis", "applicationdefinitions"),
    ("/apis/cozystack.io/v1alpha1", ""),
    ("/apis", ""),
    ("/api/v1", ""),
    ("/version", ""),
    ("", ""),
])
def test_resource_of(path: str, resource: str) -> None:
    assert resource_of(path) == resource


def test_observed_kube_requests_are_counted_and_timed() -> None:
    metrics = Metrics(process=False)
    metrics.observe_kube("POST", "helmreleases", "201", 0.002)
    metrics.observe_kube("POST", "helmreleases", "409", 0.003)
    metrics.observe_kube("GET", "events", "<error>", 0.5)
    text = metrics.render()[0].decode()
    counts = {(s["verb"], s["resource"], s["code"]): v for s, v in metric_samples(text, "agl_kube_requests_total")}
    assert counts == {("POST", "helmreleases", "201"): 1, ("POST", "helmreleases", "409"): 1,
                      ("GET", "events", "<error>"): 1}
    sums = {(s["verb"], s["resource"]): v for s, v in metric_samples(text, "agl_kube_request_duration_seconds_sum")}
    assert sums == pytest.approx({("POST", "helmreleases"): 0.005, ("GET", "events"): 0.5})
