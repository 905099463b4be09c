"""Fixtures of the contract suite: ``stack`` runs each service in turn with the contract definition
served, ``contract`` gives a test its verbs for that stack (see stack.py)."""

from __future__ import annotations

import json

import pytest
from localcluster.cluster import Cluster

from tests.contract.stack import ORACLE_CRD, ORACLE_GROUP, ORACLE_NAMESPACE, PLURAL, STACKS, Contract, Stack, served
from tests.kube import Api, kubectl, wait_for


@pytest.fixture(scope="session", params=list(STACKS))
def stack(request: pytest.FixtureRequest, control_plane: Cluster) -> Stack:
    """One service running with the contract definition served and its namespace created."""
    chosen = STACKS[request.param]
    request.getfixturevalue(chosen.service_fixture)
    kubectl(control_plane, "create", "namespace", chosen.namespace, check=False)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(chosen.definition))
    wait_for(lambda: chosen.resource in served(control_plane, chosen.group), f"{chosen.resource} served", timeout=60)
    # Served in discovery is not yet serving: lists may answer 429 at first, and watches answer 503
    # until the kind's watch cache has listed (a resourceVersion written before that is outside its
    # window, so a watch from it would rightly get 410).
    admin = Api(control_plane)
    wait_for(lambda: admin.request("GET", chosen.collection)[0] == 200, f"{chosen.resource} listable", timeout=60)
    wait_for(lambda: admin.request("GET", f"{chosen.collection}?watch=1&timeoutSeconds=1")[0] == 200,
             f"{chosen.resource} watchable", timeout=60)
    return chosen


@pytest.fixture
def contract(control_plane: Cluster, api: Api, stack: Stack) -> Contract:
    return Contract(control_plane, api, stack)


@pytest.fixture(scope="session")
def oracle(control_plane: Cluster) -> str:
    """A CRD with the contract schema: where the contract says "as for a custom resource", the answer
    is taken from kube-apiserver itself, not written down.  Returns its collection path in the
    oracle namespace."""
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(ORACLE_CRD))
    name = ORACLE_CRD["metadata"]["name"]
    kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    kubectl(control_plane, "create", "namespace", ORACLE_NAMESPACE, check=False)
    api = Api(control_plane)
    path = f"/apis/{ORACLE_GROUP}/v1alpha1/namespaces/{ORACLE_NAMESPACE}/{PLURAL}"
    wait_for(lambda: api.request("GET", path)[0] == 200, "oracle CRD served")
    return path
