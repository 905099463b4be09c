"""A user kind served by each stack next to a CRD with the same schema, its oracle: the same requests
go to both and the answers are compared (tests/integration/test_admission.py, test_webhooks.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from localcluster.cluster import Cluster

from tests.contract.stack import STACKS, Stack, served
from tests.kube import Api, get_json, kubectl, wait_for

JSON = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """A kind published twice: by a definition in each stack's group and by a CRD in ``oracle_group``."""

    kind: str
    plural: str
    oracle_group: str
    schema: JSON

    @property
    def singular(self) -> str:
        return self.kind.lower()


def crd(group: str, kind: str, plural: str, schema: JSON) -> JSON:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": schema}}}}]},
    }


def definition(stack: Stack, kind: str, plural: str, schema: JSON) -> JSON:
    """The stack's contract definition, publishing ``kind`` with ``schema`` instead."""
    defn = copy.deepcopy(stack.definition)
    defn["metadata"]["name"] = f"admission-{plural}"
    defn["spec"]["application"] = {"kind": kind, "plural": plural, "singular": kind.lower(),
                                   "openAPISchema": json.dumps(schema)}
    defn["spec"]["release"]["prefix"] = f"{kind.lower()}-"
    return defn


@dataclass(frozen=True)
class Target:
    """One place to send the same request to: a stack's kind or the oracle CRD."""

    cluster: Cluster
    api: Api
    group: str
    #: The stack (None for the oracle), for the backing object.
    stack: Stack | None
    kind: Kind

    @property
    def resource(self) -> str:
        return f"{self.kind.plural}.{self.group}"

    def name(self, base: str) -> str:
        """A name per stack: the oracle gets the same requests once per stack."""
        return f"{base}-{self.stack.name}" if self.stack else base

    def path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/{self.group}/v1alpha1/namespaces/{namespace}/{self.kind.plural}"
        return f"{base}/{name}" if name else base

    def manifest(self, namespace: str, name: str, spec: JSON, labels: dict[str, str] | None = None) -> JSON:
        meta: JSON = {"name": name, "namespace": namespace, **({"labels": labels} if labels else {})}
        return {"apiVersion": f"{self.group}/v1alpha1", "kind": self.kind.kind, "metadata": meta, "spec": spec}

    def create(self, namespace: str, name: str, spec: JSON, labels: dict[str, str] | None = None,
               query: str = "") -> tuple[int, Any]:
        return self.api.request("POST", self.path(namespace) + query, self.manifest(namespace, name, spec, labels))

    def patch(self, namespace: str, name: str, patch: Any, content_type: str = "application/merge-patch+json"
              ) -> tuple[int, Any]:
        return self.api.request("PATCH", self.path(namespace, name), json.dumps(patch), content_type=content_type)

    def kubectl(self, *args: str, body: JSON | None = None) -> Any:
        return kubectl(self.cluster, *args, input=json.dumps(body) if body is not None else None, check=False)

    def backing(self, namespace: str, name: str) -> JSON | None:
        """The backing object (the stored object itself for the oracle), or None."""
        resource = self.stack.backing if self.stack else self.resource
        stored = f"{self.kind.singular}-{name}" if self.stack else name
        result = kubectl(self.cluster, "get", resource, stored, "-n", namespace, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None


def apply(api: Api, path: str, body: JSON) -> None:
    status, answer = api.request("POST", path, body)
    assert status in (201, 409), answer


def install_oracle(cluster: Cluster, api: Api, kind: Kind) -> Target:
    document = crd(kind.oracle_group, kind.kind, kind.plural, kind.schema)
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(document))
    kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{document['metadata']['name']}")
    return Target(cluster, api, kind.oracle_group, None, kind)


def serve_kind(cluster: Cluster, api: Api, stack: Stack, kind: Kind) -> Target:
    """Publish ``kind`` through ``stack`` (its service must run) and wait until it is served."""
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(definition(stack, kind.kind, kind.plural, kind.schema)))
    target = Target(cluster, api, stack.group, stack, kind)
    wait_for(lambda: target.resource in served(cluster, stack.group), f"{target.resource} served", timeout=60)
    return target


def wait_refused(cluster: Cluster, stack: Stack, document: JSON) -> JSON:
    """Apply the definition ``document`` and wait for its ``Accepted=False`` condition, which is returned."""
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(document))

    def condition() -> JSON | None:
        found = get_json(cluster, stack.definition_resource, document["metadata"]["name"])
        return next((c for c in (found.get("status") or {}).get("conditions") or []
                     if c["type"] == "Accepted" and c["status"] == "False"), None)

    refused: JSON = wait_for(condition, f"definition {document['metadata']['name']} to be refused", timeout=60)
    return refused


def unserve_kind(cluster: Cluster, stack: Stack, kind: Kind) -> None:
    kubectl(cluster, "delete", stack.definition_resource, f"admission-{kind.plural}", "--ignore-not-found",
            check=False)


def fixtures(kind: Kind) -> tuple[Any, Any]:
    """The module fixtures ``oracle`` (the CRD) and ``ours`` (each stack in turn) for ``kind``; a test
    module takes them with ``oracle, ours = fixtures(KIND)``."""

    @pytest.fixture(scope="module")
    def oracle(control_plane: Cluster, api: Api) -> Target:
        return install_oracle(control_plane, api, kind)

    @pytest.fixture(scope="module", params=list(STACKS))
    def ours(request: pytest.FixtureRequest, control_plane: Cluster, api: Api) -> Iterator[Target]:
        stack = STACKS[request.param]
        request.getfixturevalue(stack.service_fixture)
        yield serve_kind(control_plane, api, stack, kind)
        unserve_kind(control_plane, stack, kind)

    return oracle, ours


def ensure_namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> str:
    apply(api, "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    return name


def normalized(ours: Target, answer: Any) -> Any:
    """``answer`` from ``ours`` with its group made the oracle's."""
    if answer is None:
        return None
    return json.loads(json.dumps(answer).replace(ours.group, ours.kind.oracle_group))


def both(ours: Target, oracle: Target, call: Any) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """The same request to both; the answers with the group made the same."""
    mine, theirs = call(ours), call(oracle)
    return (mine[0], normalized(ours, mine[1])), theirs


def assert_same_refusal(mine: tuple[int, Any], theirs: tuple[int, Any], code: int) -> None:
    assert theirs[0] == code, theirs
    assert mine[0] == code, mine
    for key in ("code", "reason", "message"):
        assert mine[1].get(key) == theirs[1].get(key), (key, mine[1].get(key), theirs[1].get(key))
    assert (mine[1].get("details") or {}).get("causes") == (theirs[1].get("details") or {}).get("causes")


def assert_update_refused(ours: Target, oracle: Target, namespace: str, name: str, patch: JSON, code: int) -> None:
    """A merge patch refused alike by both, leaving the backing object as it was."""
    before = ours.backing(namespace, name)
    mine, theirs = both(ours, oracle, lambda t: t.patch(namespace, name, patch))
    assert_same_refusal(mine, theirs, code)
    after = ours.backing(namespace, name)
    assert before is not None and after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def assert_delete_refused(ours: Target, oracle: Target, namespace: str, name: str, code: int) -> None:
    """A delete (dry-run, then real) refused alike by both, leaving the backing object as it was."""
    before = ours.backing(namespace, name)
    for query in ("?dryRun=All", ""):
        mine, theirs = both(ours, oracle, lambda t, q=query: t.api.request("DELETE", t.path(namespace, name) + q))
        assert_same_refusal(mine, theirs, code)
    after = ours.backing(namespace, name)
    assert before is not None and after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "deletionTimestamp" not in after["metadata"]
