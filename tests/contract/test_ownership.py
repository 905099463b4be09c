"""finalizers, ownerReferences and deletecollection, with the CRD oracle on the same kube-apiserver.

Each scenario sends the same requests to an Application of the stack and to an object of the oracle
CRD (same kind, same schema) with the same name, in a namespace of the oracle's own, and compares the
answers whole: HTTP code, the object or Status (message and causes included), warnings.  Only what
is not the same by construction is normalised away (:func:`_comparable`): the group and namespace
names, the server-assigned uid/resourceVersion/timestamps (a deletionTimestamp is compared as being
there or not), managedFields, and the Application's ``status`` (the oracle CRD has none).

No backend controller runs in this tier, so no backing object carries the controller's finalizer
unless a test puts it there: the timing a real helm-controller or tofu-controller adds is
documented in docs/operating.md.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from localcluster.cluster import Cluster

from tests.contract.stack import KIND, ORACLE_GROUP, PLURAL, Contract, Stack, selector
from tests.kube import Api, kubectl, warning_texts

JSON = dict[str, Any]
HOLD = "example.com/hold"
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "6f2a0c3e-0000-4000-8000-000000000001"}
#: Server-assigned metadata, different by construction between two objects.
VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "managedFields")


class Pair:
    """The same request to the stack's collection and to the oracle's, answers made comparable."""

    def __init__(self, cluster: Cluster, api: Api, stack: Stack, test: str) -> None:
        self.api = api
        self.stack = stack
        # One oracle namespace per stack and test, so that names (and thus messages) are the same.
        self.oracle_namespace = f"oracle-{stack.name}-{test}"
        kubectl(cluster, "create", "namespace", self.oracle_namespace, check=False)
        self.oracle = f"/apis/{ORACLE_GROUP}/v1alpha1/namespaces/{self.oracle_namespace}/{PLURAL}"

    def manifest(self, name: str, spec: JSON | None = None, **meta: Any) -> JSON:
        return self.stack.manifest(name, spec or {"size": 1}, **meta)

    def send(self, method: str, suffix: str = "", body: JSON | None = None,
             content_type: str = "application/json") -> tuple[Any, Any]:
        """(stack's answer, oracle's answer), each (code, body, warnings) after :func:`_comparable`."""
        answers = []
        for root, group, namespace in ((self.stack.collection, self.stack.group, self.stack.namespace),
                                       (self.oracle, ORACLE_GROUP, self.oracle_namespace)):
            sent = _renamed(body, self.stack.group, group, self.stack.namespace, namespace)
            code, answer, warnings = _call(self.api, method, root + suffix, sent, content_type)
            answers.append((code, _comparable(answer, group, namespace), warnings))
        return answers[0], answers[1]

    def same(self, method: str, suffix: str = "", body: JSON | None = None,
             content_type: str = "application/json") -> Any:
        """Send to both; the answers must be equal.  Returns the (normalised) answer."""
        mine, oracle = self.send(method, suffix, body, content_type)
        assert mine == oracle, f"{method} {suffix}:\n  stack:  {mine}\n  oracle: {oracle}"
        return mine

    def merge(self, name: str, patch: JSON) -> Any:
        return self.same("PATCH", f"/{name}", patch, "application/merge-patch+json")


def _call(api: Api, method: str, path: str, body: JSON | None, content_type: str) -> tuple[int, Any, list[str]]:
    """One request; its code, JSON answer and the texts of its Warning headers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60, context=api.ctx) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None, warning_texts(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), warning_texts(exc.headers)


def _renamed(body: JSON | None, group: str, to_group: str, namespace: str, to_namespace: str) -> JSON | None:
    if body is None:
        return None
    renamed: JSON = json.loads(json.dumps(body).replace(group, to_group).replace(f'"{namespace}"',
                                                                                 f'"{to_namespace}"'))
    return renamed


def _comparable(answer: Any, group: str, namespace: str) -> Any:
    if not isinstance(answer, dict):
        return answer
    text = json.dumps(answer).replace(group, "GROUP").replace(namespace, "NAMESPACE")
    out: JSON = json.loads(text)
    if out.get("kind") == f"{KIND}List":
        out["metadata"] = {}
        out["items"] = [_object(item) for item in out.get("items") or []]
        return out
    if out.get("kind") == KIND:
        return _object(out)
    (out.get("details") or {}).pop("uid", None)
    return out


def _object(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    for key in VOLATILE:
        meta.pop(key, None)
    if "deletionTimestamp" in meta:
        meta["deletionTimestamp"] = "set"
    obj.pop("status", None)
    return obj


@pytest.fixture
def pair(request: pytest.FixtureRequest, control_plane: Cluster, api: Api, stack: Stack, oracle: str) -> Pair:
    test = request.node.originalname.removeprefix("test_").replace("_", "-")[:30].rstrip("-")
    return Pair(control_plane, api, stack, test)


# ------------------------------------------------------------------------- finalizers


def test_a_finalizer_holds_the_deletion_as_on_a_crd(pair: Pair, contract: Contract) -> None:
    """Create with a finalizer, delete (the DELETE's own answer), read while deleting (get, list,
    watch), update the deleting object, try to add a finalizer, remove the last one: the object goes."""
    created = pair.same("POST", "", pair.manifest("held", labels={"scenario": "held"}, finalizers=[HOLD]))
    assert created[0] == 201 and created[1]["metadata"]["finalizers"] == [HOLD]
    backing = contract.backing("held") or {}
    assert backing["metadata"]["finalizers"] == [HOLD]
    since = _resource_versions(pair, "held")
    deleting = pair.same("DELETE", "/held")
    assert deleting[0] == 200 and deleting[1]["metadata"]["deletionTimestamp"] == "set", deleting
    assert deleting[1]["metadata"]["deletionGracePeriodSeconds"] == 0
    read = pair.same("GET", "/held")
    assert read[1]["metadata"]["deletionTimestamp"] == "set"
    listed = pair.same("GET", f"?labelSelector={selector('scenario=held')}")
    assert [i["metadata"]["name"] for i in listed[1]["items"]] == ["held"]
    # the deleting object still takes updates, but no new finalizer
    assert pair.merge("held", {"spec": {"size": 2}})[0] == 200
    refused = pair.merge("held", {"metadata": {"finalizers": [HOLD, "example.com/late"]}})
    assert refused[0] == 422 and "no new finalizers" in refused[1]["message"], refused
    gone = pair.merge("held", {"metadata": {"finalizers": None}})
    assert gone[0] == 200, gone
    assert pair.same("GET", "/held")[0] == 404
    assert contract.backing("held") is None
    events = _watched(pair, "held", since)
    assert events["stack"] == events["oracle"], events
    assert [e[0] for e in events["stack"]] == ["MODIFIED", "MODIFIED", "DELETED"], events


def test_invalid_finalizers_and_their_warnings_as_on_a_crd(pair: Pair, contract: Contract) -> None:
    with contract.nothing_changes():
        refused = pair.same("POST", "", pair.manifest("badfin", finalizers=["Not A Name!", HOLD]))
        assert refused[0] == 422 and refused[1]["details"]["causes"], refused
        both = pair.same("POST", "", pair.manifest("badfin", finalizers=["orphan", "foregroundDeletion"]))
        assert both[0] == 422, both
        with_spec = pair.same("POST", "", pair.manifest("badfin", {"size": 0}, finalizers=["a/b/c", "/x", "-y"]))
        assert len(with_spec[1]["details"]["causes"]) == 4, with_spec
    warned = pair.same("POST", "", pair.manifest("warned", finalizers=["plain", "dotted.name", HOLD]))
    assert warned[0] == 201 and len(warned[2]) == 2, warned
    # only added finalizers are warned about on an update
    again = pair.merge("warned", {"metadata": {"finalizers": ["plain", "dotted.name", "other"]}})
    assert again[0] == 200
    updated = pair.merge("warned", {"metadata": {"finalizers": ["plain", "next"]}})
    assert updated[0] == 200 and len(updated[2]) == 1, updated
    pair.merge("warned", {"metadata": {"finalizers": None}})
    pair.same("DELETE", "/warned")


def test_dry_run_delete_and_create_keep_nothing(pair: Pair, contract: Contract) -> None:
    assert pair.same("POST", "?dryRun=All", pair.manifest("dry", finalizers=[HOLD]))[0] == 201
    assert pair.same("GET", "/dry")[0] == 404
    pair.same("POST", "", pair.manifest("dry", finalizers=[HOLD]))
    answer = pair.same("DELETE", "/dry?dryRun=All")
    assert answer[0] == 200 and answer[1]["metadata"]["deletionTimestamp"] == "set", answer
    assert "deletionTimestamp" not in pair.same("GET", "/dry")[1]["metadata"]
    assert "deletionTimestamp" not in (contract.backing("dry") or {})["metadata"]
    pair.merge("dry", {"metadata": {"finalizers": None}})
    pair.same("DELETE", "/dry")


OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions"}


@pytest.mark.parametrize(("suffix", "options", "finalizer"), [
    pytest.param("?propagationPolicy=Orphan", None, "orphan", id="orphan-query"),
    pytest.param("", {**OPTIONS, "propagationPolicy": "Foreground"}, "foregroundDeletion", id="foreground-body"),
    pytest.param("?orphanDependents=true&gracePeriodSeconds=30", None, "orphan", id="orphan-dependents"),
])
def test_a_propagation_policy_holds_the_deletion_as_on_a_crd(pair: Pair, contract: Contract, suffix: str,
                                                            options: JSON | None, finalizer: str) -> None:
    """kube-apiserver marks the object with the garbage collector's finalizer (no collector runs in this tier,
    so it stays until removed); a second DELETE with the other policy changes it; removing it lets the object go."""
    pair.same("POST", "", pair.manifest("propagated"))
    deleting = pair.same("DELETE", f"/propagated{suffix}", options)
    assert deleting[0] == 200 and deleting[1]["metadata"]["finalizers"] == [finalizer], deleting
    assert deleting[1]["metadata"]["deletionTimestamp"] == "set", deleting
    assert (contract.backing("propagated") or {})["metadata"]["finalizers"] == [finalizer]
    other, other_finalizer = ("Foreground", "foregroundDeletion") if finalizer == "orphan" else ("Orphan", "orphan")
    again = pair.same("DELETE", f"/propagated?propagationPolicy={other}")
    assert again[0] == 200 and again[1]["metadata"]["finalizers"] == [other_finalizer], again
    assert pair.merge("propagated", {"metadata": {"finalizers": None}})[0] == 200
    assert pair.same("GET", "/propagated")[0] == 404
    assert contract.backing("propagated") is None


def test_a_delete_with_a_body_reads_no_option_from_its_query_as_on_a_crd(pair: Pair, contract: Contract) -> None:
    """kube-apiserver reads a DELETE's options from its body when it has one, else from its query, never both; and
    DeleteOptions has no fieldManager or fieldValidation to refuse."""
    pair.same("POST", "", pair.manifest("bodied"))
    deleted = pair.same("DELETE", "/bodied?dryRun=All&propagationPolicy=Orphan", OPTIONS)
    assert deleted[0] == 200 and deleted[1]["kind"] == "Status", deleted
    assert pair.same("GET", "/bodied")[0] == 404 and contract.backing("bodied") is None
    pair.same("POST", "", pair.manifest("unmanaged"))
    ignored = pair.same("DELETE", "/unmanaged?fieldManager=%01&fieldValidation=Bogus")
    assert ignored[0] == 200 and ignored[1]["kind"] == "Status", ignored
    assert contract.backing("unmanaged") is None


def test_the_controllers_finalizer_is_hidden_and_kept(pair: Pair, contract: Contract) -> None:
    """The backend controller's finalizer is not the user's: never shown, never removed by a user's update."""
    stack = pair.stack
    contract.create("ctrl", {"size": 1}, finalizers=[HOLD])
    code, body = contract.api.request("PATCH", stack.backing_path("ctrl"),
                                      {"metadata": {"finalizers": [HOLD, stack.backing_finalizer]}},
                                      content_type="application/merge-patch+json")
    assert code == 200, body
    assert contract.get("ctrl")["metadata"]["finalizers"] == [HOLD]
    contract.patch("ctrl", {"metadata": {"finalizers": ["example.com/other"]}})
    assert contract.get("ctrl")["metadata"]["finalizers"] == ["example.com/other"]
    assert (contract.backing("ctrl") or {})["metadata"]["finalizers"] == ["example.com/other",
                                                                          stack.backing_finalizer]
    contract.patch("ctrl", {"metadata": {"finalizers": None}})
    assert "finalizers" not in contract.get("ctrl")["metadata"]
    assert (contract.backing("ctrl") or {})["metadata"]["finalizers"] == [stack.backing_finalizer]
    # Deleting: the Application shows the deletion and no finalizer; it goes when the controller lets go.
    code, body = contract.api.request("DELETE", stack.path("ctrl"))
    assert code == 200 and body["metadata"].get("deletionTimestamp") and "finalizers" not in body["metadata"], body
    contract.api.request("PATCH", stack.backing_path("ctrl"), {"metadata": {"finalizers": None}},
                         content_type="application/merge-patch+json")
    assert contract.api.request("GET", stack.path("ctrl"))[0] == 404


def test_server_side_apply_merges_finalizers_as_a_set(pair: Pair) -> None:
    """Two appliers each own their finalizer and ownerReference; neither removes the other's."""
    first = {"metadata": {"finalizers": ["example.com/a"], "ownerReferences": [OWNER]}}
    second = {"metadata": {"finalizers": ["example.com/b"],
                           "ownerReferences": [{**OWNER, "name": "other", "uid": OWNER["uid"][:-1] + "2"}]}}
    for manager, part in (("first", first), ("second", second)):
        body = pair.manifest("merged") | {"metadata": {"name": "merged", **part["metadata"]}}
        pair.same("PATCH", f"/merged?fieldManager={manager}", body, "application/apply-patch+yaml")
    read = pair.same("GET", "/merged")
    assert read[1]["metadata"]["finalizers"] == ["example.com/a", "example.com/b"], read
    assert [o["name"] for o in read[1]["metadata"]["ownerReferences"]] == ["owner", "other"], read
    shrunk = {"metadata": {"name": "merged"}, "apiVersion": pair.stack.api_version, "kind": KIND}
    pair.same("PATCH", "/merged?fieldManager=first", shrunk, "application/apply-patch+yaml")
    read = pair.same("GET", "/merged")
    assert read[1]["metadata"]["finalizers"] == ["example.com/b"], read
    pair.merge("merged", {"metadata": {"finalizers": None}})
    pair.same("DELETE", "/merged")


# ------------------------------------------------------------------------- ownerReferences


def test_owner_references_are_stored_on_the_backing_object(pair: Pair, contract: Contract) -> None:
    created = pair.same("POST", "", pair.manifest("owned", ownerReferences=[{**OWNER, "controller": True,
                                                                             "blockOwnerDeletion": True}]))
    assert created[0] == 201 and created[1]["metadata"]["ownerReferences"][0]["controller"] is True, created
    # a cluster's garbage collector reads them here: the backing object is the Application
    backing = contract.backing("owned") or {}
    assert backing["metadata"]["ownerReferences"] == [{**OWNER, "controller": True, "blockOwnerDeletion": True}]
    pair.same("GET", "/owned")
    pair.same("GET", f"?fieldSelector={selector('metadata.name=owned')}")
    replaced = pair.merge("owned", {"metadata": {"ownerReferences": [OWNER]}})
    assert replaced[1]["metadata"]["ownerReferences"] == [OWNER]
    assert pair.merge("owned", {"metadata": {"ownerReferences": None}})[0] == 200
    assert "ownerReferences" not in (contract.backing("owned") or {})["metadata"]
    pair.same("DELETE", "/owned")


@pytest.mark.parametrize("owners", [
    pytest.param([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}], id="missing-uid"),
    pytest.param([{**OWNER, "controller": True}, {**OWNER, "name": "b", "uid": "b", "controller": True}],
                 id="two-controllers"),
    pytest.param([{**OWNER, "apiVersion": ""}], id="no-api-version"),
])
def test_invalid_owner_references_as_on_a_crd(pair: Pair, contract: Contract, owners: list[JSON]) -> None:
    with contract.nothing_changes():
        refused = pair.same("POST", "", pair.manifest("badowner", ownerReferences=owners))
        # with the spec wrong too, every cause at once
        both = pair.same("POST", "", pair.manifest("badowner", {"size": 0}, ownerReferences=owners))
    assert refused[0] == 422, refused
    assert len(both[1]["details"]["causes"]) == len(refused[1]["details"]["causes"]) + 1, both


# ------------------------------------------------------------------------- deletecollection


def test_deletecollection_with_label_and_field_selectors(pair: Pair, contract: Contract) -> None:
    for name, team in (("dc-a", "x"), ("dc-b", "x"), ("dc-c", "y")):
        pair.same("POST", "", pair.manifest(name, labels={"dc": "yes", "dc-team": team}))
    held = pair.same("POST", "", pair.manifest("dc-held", labels={"dc": "yes", "dc-team": "x"}, finalizers=[HOLD]))
    assert held[0] == 201
    dry = pair.same("DELETE", f"?labelSelector={selector('dc-team=x')}&dryRun=All")
    assert [i["metadata"]["name"] for i in dry[1]["items"]] == ["dc-a", "dc-b", "dc-held"], dry
    deleted = pair.same("DELETE", f"?labelSelector={selector('dc-team=x')}")
    assert deleted[0] == 200 and deleted[1]["kind"] == f"{KIND}List", deleted
    assert [i["metadata"]["name"] for i in deleted[1]["items"]] == ["dc-a", "dc-b", "dc-held"], deleted
    remaining = pair.same("GET", f"?labelSelector={selector('dc=yes')}")
    assert {i["metadata"]["name"]: "deletionTimestamp" in i["metadata"] for i in remaining[1]["items"]} == {
        "dc-c": False, "dc-held": True}
    assert contract.backing("dc-a") is None and contract.backing("dc-b") is None
    by_name = pair.same("DELETE", f"?fieldSelector={selector('metadata.name=dc-c')}")
    assert [i["metadata"]["name"] for i in by_name[1]["items"]] == ["dc-c"], by_name
    nothing = pair.same("DELETE", f"?labelSelector={selector('dc-team=nobody')}")
    assert nothing[0] == 200 and nothing[1]["items"] == [], nothing
    pair.merge("dc-held", {"metadata": {"finalizers": None}})
    assert pair.same("GET", "/dc-held")[0] == 404


def test_deletecollection_bad_selector_and_discovery(pair: Pair, contract: Contract) -> None:
    with contract.nothing_changes():
        bad = pair.same("DELETE", f"?fieldSelector={selector('spec.size=1')}")
    assert bad[0] == 400, bad
    oracle_verbs = _verbs(pair.api, f"/apis/{ORACLE_GROUP}/v1alpha1")
    assert _verbs(pair.api, f"/apis/{pair.stack.api_version}") == oracle_verbs
    assert "deletecollection" in oracle_verbs


# ------------------------------------------------------------------------- helpers


def _verbs(api: Api, root: str) -> set[str]:
    code, body = api.request("GET", root)
    assert code == 200, body
    return set(next(r["verbs"] for r in body["resources"] if r["name"] == PLURAL))


def _resource_versions(pair: Pair, name: str) -> dict[str, str]:
    """The object's current resourceVersion on each side, to watch from."""
    out = {}
    for side, root in (("stack", pair.stack.collection), ("oracle", pair.oracle)):
        code, body = pair.api.request("GET", f"{root}/{name}")
        assert code == 200, body
        out[side] = body["metadata"]["resourceVersion"]
    return out


def _watched(pair: Pair, name: str, since: dict[str, str]) -> dict[str, list[tuple[str, Any]]]:
    """Every event of ``name`` after ``since`` on each side, until the watch's timeoutSeconds ends it."""
    events: dict[str, list[tuple[str, Any]]] = {}
    for side, root, group, namespace in (
        ("stack", pair.stack.collection, pair.stack.group, pair.stack.namespace),
        ("oracle", pair.oracle, ORACLE_GROUP, pair.oracle_namespace),
    ):
        query = (f"?watch=1&fieldSelector={selector('metadata.name=' + name)}&resourceVersion={since[side]}"
                 "&timeoutSeconds=2")
        request = urllib.request.Request(f"{pair.api.cluster.server}{root}{query}",
                                         headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30, context=pair.api.ctx) as response:
            lines = response.read().decode().splitlines()
        events[side] = [(e["type"], _comparable(e["object"], group, namespace))
                        for e in map(json.loads, filter(str.strip, lines))]
    return events
