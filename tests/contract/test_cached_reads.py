"""GETs that name a resourceVersion, as kube-apiserver answers them for a custom resource: ``resourceVersion=0``
means any state and ``N`` means not older than N, so kube-apiserver answers both from its watch cache.  The
services answer them from their informer: no kube request, which the service's own ``/metrics`` proves
(:mod:`shared.client.latency`).  What may differ from a consistent GET is only a write not yet seen; what must
not differ is every answer's shape, code and reason, which the CRD oracle gives."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.contract.stack import ORACLE_GROUP, Contract, Stack
from tests.kube import metric_samples, service_metrics, wait_for

RUNNING = {"helm_service": services.HELM_AGL, "tofu_service": services.TOFU_AGL}


def _backing_gets(cluster: Cluster, stack: Stack) -> int:
    """How many GETs of its backing resource the service has sent kube-apiserver so far."""
    text = service_metrics(cluster, services.start(cluster, RUNNING[stack.service_fixture]).port)
    backing = stack.backing.split(".")[0]
    return sum(int(value) for labels, value in metric_samples(text, "agl_kube_requests_total")
               if labels["verb"] == "GET" and labels["resource"] == backing)


def _without_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def test_a_get_at_resource_version_zero_is_answered_from_the_cache(control_plane: Cluster, contract: Contract,
                                                                   stack: Stack) -> None:
    name = f"cached-{uuid.uuid4().hex[:6]}"
    created = contract.create(name, {"size": 2})
    path = stack.path(name)
    # The cache has it once a list at "any state" shows it.
    wait_for(lambda: any(i["metadata"]["name"] == name for i in contract.list_apps("resourceVersion=0")[1]["items"]),
             "the informer holds the new Application", timeout=15, interval=0.1)
    before = _backing_gets(control_plane, stack)
    code, cached = contract.api.request("GET", f"{path}?resourceVersion=0")
    assert code == 200, cached
    assert _backing_gets(control_plane, stack) == before, "a GET at resourceVersion=0 went to kube-apiserver"
    assert cached["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], cached
    code, live = contract.api.request("GET", path)
    assert code == 200 and _backing_gets(control_plane, stack) == before + 1, "a consistent GET reads kube-apiserver"
    assert _without_volatile(cached) == _without_volatile(live)


def test_a_get_not_older_than_a_version_sees_that_write(contract: Contract, stack: Stack, oracle: str) -> None:
    """After a write that answered N, a GET at N shows that write (or a newer one), as for a custom resource."""
    name = f"newer-{uuid.uuid4().hex[:6]}"
    contract.create(name, {"size": 1})
    contract.patch(name, {"spec": {"size": 3}})
    written = contract.api.request("GET", stack.path(name))[1]
    at = written["metadata"]["resourceVersion"]
    code, got = contract.api.request("GET", f"{stack.path(name)}?resourceVersion={at}")
    assert code == 200 and got["spec"]["size"] == 3, got
    assert int(got["metadata"]["resourceVersion"]) >= int(written["metadata"]["resourceVersion"]), got

    code, body = contract.api.request("POST", oracle, stack.manifest(name, {"size": 1}) | {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "metadata": {"name": name}})
    assert code == 201, body
    oracle_path = f"{oracle}/{name}"
    code, oracled = contract.api.request("GET", f"{oracle_path}?resourceVersion={body['metadata']['resourceVersion']}")
    assert code == 200 and oracled["metadata"]["name"] == name, oracled


def test_a_get_at_resource_version_zero_of_a_missing_object_answers_as_the_oracle(contract: Contract, stack: Stack,
                                                                                  oracle: str) -> None:
    missing = f"absent-{uuid.uuid4().hex[:6]}"
    oracle_code, oracle_status = contract.api.request("GET", f"{oracle}/{missing}?resourceVersion=0")
    code, status = contract.api.request("GET", f"{stack.path(missing)}?resourceVersion=0")
    assert (code, status["reason"]) == (oracle_code, oracle_status["reason"]) == (404, "NotFound"), (status,
                                                                                                   oracle_status)
    assert status["details"]["name"] == missing, status


def test_a_get_ahead_of_every_write_times_out_as_the_oracle(contract: Contract, stack: Stack, oracle: str) -> None:
    """A GET at a resourceVersion no write has reached yet: kube-apiserver's watch cache waits for it (3 s) and then
    answers 504 ``ResourceVersionTooLarge``, not the object as it is now, which would be older than asked for."""
    name = f"ahead-{uuid.uuid4().hex[:6]}"
    created = contract.create(name, {"size": 1})
    code, body = contract.api.request("POST", oracle, stack.manifest(name, {"size": 1}) | {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "metadata": {"name": name}})
    assert code == 201, body
    ahead = str(int(created["metadata"]["resourceVersion"]) + 10**12)
    oracle_code, oracle_status = contract.api.request("GET", f"{oracle}/{name}?resourceVersion={ahead}")
    code, status = contract.api.request("GET", f"{stack.path(name)}?resourceVersion={ahead}")
    assert (code, status["reason"]) == (oracle_code, oracle_status["reason"]) == (504, "Timeout"), (status,
                                                                                                   oracle_status)
    assert status["details"] == oracle_status["details"], (status, oracle_status)
    # "current" is each watch cache's own revision, which may differ by the writes each has seen.
    for said in (status, oracle_status):
        assert said["message"].startswith(f"Timeout: Too large resource version: {ahead}, current: "), said
    code, now = contract.api.request("GET", stack.path(name))
    assert code == 200 and now["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], now
    # A watch from there waits for the writes to come: nothing until its timeout.
    ahead_watch = f"?watch=1&resourceVersion={ahead}&timeoutSeconds=1"
    assert contract.api.request("GET", stack.collection + ahead_watch) == contract.api.request(
        "GET", oracle + ahead_watch) == (200, None)


@pytest.mark.parametrize("version", ["abc", "-1", "1.5", str(2**64)])
def test_a_malformed_resource_version_answers_as_the_oracle(contract: Contract, stack: Stack, oracle: str,
                                                            version: str) -> None:
    """kube-apiserver's storage reads a get's or a watch's resourceVersion and fails with a 500 and no reason; a
    list's options are checked first (400).  The services answered the object as it is, or opened the watch."""
    name = f"badrv-{uuid.uuid4().hex[:6]}"
    contract.create(name, {"size": 1})
    code, body = contract.api.request("POST", oracle, stack.manifest(name, {"size": 1}) | {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "metadata": {"name": name}})
    assert code == 201, body
    for ours, theirs in ((f"{stack.path(name)}?resourceVersion={version}",
                          f"{oracle}/{name}?resourceVersion={version}"),
                         (f"{stack.collection}?watch=1&resourceVersion={version}",
                          f"{oracle}?watch=1&resourceVersion={version}"),
                         (f"{stack.collection}?resourceVersion={version}", f"{oracle}?resourceVersion={version}")):
        oracle_code, oracle_status = contract.api.request("GET", theirs)
        code, status = contract.api.request("GET", ours)
        assert oracle_code in (400, 500), (theirs, oracle_status)
        assert (code, status) == (oracle_code, oracle_status), (ours, status, oracle_status)



def _listed_at_exactly_before_two_writes(contract: Contract, stack: Stack, root: str, api_version: str,
                                         token: str) -> list[tuple[str, int, bool]]:
    """Create A, change A, create B; then list at exactly the version A was created at: (name, size, whether the
    item's resourceVersion is that version) of each item."""
    def manifest(name: str, size: int) -> dict[str, Any]:
        return stack.manifest(name, {"size": size}) | {
            "apiVersion": api_version, "metadata": {"name": name, "labels": {"exact": token}}}
    code, first = contract.api.request("POST", root, manifest(f"exact-a-{token}", 1))
    assert code == 201, first
    then = first["metadata"]["resourceVersion"]
    code, body = contract.api.request("PATCH", f"{root}/exact-a-{token}", {"spec": {"size": 3}},
                                      content_type="application/merge-patch+json")
    assert code == 200, body
    assert contract.api.request("POST", root, manifest(f"exact-b-{token}", 2))[0] == 201
    code, listed = contract.api.request(
        "GET", f"{root}?labelSelector=exact%3D{token}&resourceVersion={then}&resourceVersionMatch=Exact")
    assert code == 200 and listed["metadata"]["resourceVersion"] == then, listed
    return [(i["metadata"]["name"], i["spec"]["size"], i["metadata"]["resourceVersion"] == then)
            for i in listed["items"]]


def test_a_list_at_exactly_a_version_is_that_state_as_on_the_oracle(contract: Contract, stack: Stack,
                                                                    oracle: str) -> None:
    """``resourceVersionMatch=Exact``: the list as it was at that resourceVersion, later writes not in it, which only
    kube-apiserver keeps (the services' caches hold the present); the answer names the version asked for."""
    token = uuid.uuid4().hex[:6]
    ours = _listed_at_exactly_before_two_writes(contract, stack, stack.collection, stack.api_version, token)
    theirs = _listed_at_exactly_before_two_writes(contract, stack, oracle, f"{ORACLE_GROUP}/v1alpha1", token)
    assert ours == theirs == [(f"exact-a-{token}", 1, True)], (ours, theirs)
