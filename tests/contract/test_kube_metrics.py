"""The service's own kube-apiserver requests on its ``/metrics`` (:mod:`shared.client.latency`): the figure that
tells a request's time spent in kube-apiserver from the service's own."""

from __future__ import annotations

import uuid
from collections import Counter

from localcluster import services
from localcluster.cluster import Cluster

from tests.contract.stack import Contract, Stack
from tests.kube import metric_samples, service_metrics

RUNNING = {"helm_service": services.HELM_AGL, "tofu_service": services.TOFU_AGL}


def _kube_requests(cluster: Cluster, stack: Stack) -> tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str]]]:
    """The service's kube requests so far, by (verb, resource, code), and their timed count by (verb, resource)."""
    # The one serving now: an earlier module may have replaced the session's with a process on another port.
    text = service_metrics(cluster, services.start(cluster, RUNNING[stack.service_fixture]).port)
    answered: Counter[tuple[str, str, str]] = Counter()
    for labels, value in metric_samples(text, "agl_kube_requests_total"):
        answered[labels["verb"], labels["resource"], labels["code"]] += int(value)
    timed: Counter[tuple[str, str]] = Counter()
    for labels, value in metric_samples(text, "agl_kube_request_duration_seconds_count"):
        timed[labels["verb"], labels["resource"]] += int(value)
    return answered, timed


def test_a_create_counts_its_backing_create(control_plane: Cluster, contract: Contract, stack: Stack) -> None:
    """One create through the service is one POST of the backing resource, answered 201 and timed (and no Event:
    ``test_lifecycle``); a second create of the same name is kube-apiserver's 409."""
    backing = stack.backing.split(".")[0]
    name = f"metered-{uuid.uuid4().hex[:6]}"
    answered, timed = _kube_requests(control_plane, stack)
    contract.create(name)
    after, timed_after = _kube_requests(control_plane, stack)
    assert after[("POST", backing, "201")] - answered[("POST", backing, "201")] == 1, after
    assert timed_after[("POST", backing)] - timed[("POST", backing)] == 1, timed_after
    contract.refused("POST", stack.collection, stack.manifest(name), 409, "AlreadyExists")
    again, _ = _kube_requests(control_plane, stack)
    assert again[("POST", backing, "409")] - answered[("POST", backing, "409")] == 1, again
