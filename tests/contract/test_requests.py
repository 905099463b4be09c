"""Bad requests (SPEC §5): each gets its 4xx Status and changes nothing; the good edge of each rule is accepted."""

from __future__ import annotations

import json

import pytest

from tests.contract.stack import ORACLE_GROUP, ORACLE_NAMESPACE, Contract, Stack, cause_fields
from tests.kube import kubectl

# ------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["UpperCase", "1starts-with-digit", "has.dot", "ends-with-dash-", "under_score"])
def test_name_that_is_not_a_dns1035_label_is_422(contract: Contract, stack: Stack, name: str) -> None:
    status = contract.refused("POST", stack.collection, stack.manifest(name), 422, "Invalid")
    assert cause_fields(status) == {"metadata.name"}, status


def test_name_one_over_the_prefix_budget_is_422(contract: Contract, stack: Stack) -> None:
    name = "n" * (stack.max_name + 1)
    status = contract.refused("POST", stack.collection, stack.manifest(name), 422, "Invalid")
    assert cause_fields(status) == {"metadata.name"}, status
    assert str(stack.max_name) in status["message"], status


def test_longest_name_is_accepted(contract: Contract, stack: Stack) -> None:
    name = "n" * stack.max_name
    contract.create(name)
    backing = contract.backing(name)
    assert backing is not None and len(backing["metadata"]["name"]) == 53


# ------------------------------------------------------------------------- spec


def test_underscore_keys_are_400(contract: Contract, stack: Stack) -> None:
    """A reserved ``_`` key the schema does not declare is an unknown field: refused under Strict (kubectl's
    default), and under Warn it is pruned as a CRD prunes it, so it never reaches the backing object."""
    status = contract.refused("POST", f"{stack.collection}?fieldValidation=Strict",
                              stack.manifest("underscore", {"_internal": 1}), 400, "BadRequest")
    assert "_internal" in status["message"], status
    contract.apply("underscored", {"size": 1})
    contract.refused("PATCH", f"{stack.path('underscored')}?fieldValidation=Strict", {"spec": {"_internal": 1}},
                     422, "Invalid", content_type="application/merge-patch+json")
    code, _ = contract.api.request("PATCH", stack.path("underscored"), {"spec": {"_internal": 1}},
                                   content_type="application/merge-patch+json")
    assert code == 200 and "_internal" not in stack.written_spec(contract.backing("underscored") or {})


def test_spec_that_is_not_an_object_is_422(contract: Contract, stack: Stack) -> None:
    # As kube-apiserver answers for a custom resource.
    status = contract.refused("POST", stack.collection, stack.manifest("notobject", "a string"), 422, "Invalid")
    assert cause_fields(status) == {"spec"}


def test_schema_violations_are_422_with_one_cause_per_field(contract: Contract, stack: Stack) -> None:
    status = contract.refused("POST", stack.collection,
                              stack.manifest("violating", {"size": 0, "tier": "huge", "note": 5}), 422, "Invalid")
    assert cause_fields(status) == {"spec.size", "spec.tier", "spec.note"}, status
    assert status["details"]["kind"] == "ContractThing" and status["details"]["name"] == "violating", status
    contract.apply("violated", {"size": 2})
    status = contract.refused("PATCH", stack.path("violated"), {"spec": {"size": -1}}, 422, "Invalid",
                              content_type="application/merge-patch+json")
    assert cause_fields(status) == {"spec.size"}, status


def test_unknown_top_level_spec_keys(contract: Contract, stack: Stack) -> None:
    """Undeclared keys are pruned as a CRD prunes them (fieldValidation Warn, the default), or refused (Strict)."""
    manifest = stack.manifest("unknownkey", {"size": 1, "extra": "x"})
    status = contract.refused("POST", f"{stack.collection}?fieldValidation=Strict", manifest, 400, "BadRequest")
    assert 'unknown field "spec.extra"' in status["message"], status
    contract.create("unknownkey", {"size": 1, "extra": "x"})
    assert "extra" not in stack.written_spec(contract.backing("unknownkey") or {})


def test_dry_run_creates_and_changes_nothing(contract: Contract, stack: Stack) -> None:
    with contract.nothing_changes():
        code, body = contract.api.request("POST", f"{stack.collection}?dryRun=All", stack.manifest("dry", {"size": 3}))
        assert code == 201 and body["metadata"]["name"] == "dry" and body["spec"]["size"] == 3, body
    assert contract.backing("dry") is None
    assert contract.kubectl("get", stack.resource, "dry", check=False).returncode != 0
    contract.apply("dryexisting", {"size": 1})
    with contract.nothing_changes():
        contract.patch("dryexisting", {"spec": {"size": 9}}, "--dry-run=server")
        contract.kubectl("label", stack.resource, "dryexisting", "team=x", "--dry-run=server")
        contract.kubectl("delete", stack.resource, "dryexisting", "--dry-run=server")
    assert contract.get("dryexisting")["spec"]["size"] == 1


def test_dry_run_of_an_invalid_object_is_still_refused(contract: Contract, stack: Stack) -> None:
    contract.refused("POST", f"{stack.collection}?dryRun=All", stack.manifest("drybad", {"size": 0}), 422, "Invalid")


# ------------------------------------------------------------------------- missing objects


def test_missing_application_is_404(contract: Contract, stack: Stack) -> None:
    status = contract.refused("GET", stack.path("nosuch"), None, 404, "NotFound")
    assert status["details"] == {"name": "nosuch", "group": stack.group, "kind": "contractthings"}, status
    contract.refused("DELETE", stack.path("nosuch"), None, 404, "NotFound")
    contract.refused("PATCH", stack.path("nosuch"), {"spec": {}}, 404, "NotFound",
                     content_type="application/merge-patch+json")


def test_a_namespace_that_does_not_exist_answers_as_for_a_custom_resource(contract: Contract, stack: Stack,
                                                                          oracle: str) -> None:
    """Each verb on a namespace nobody created gets kube-apiserver's own answer for a custom resource with the
    same schema: a create names the namespace (not the object), reads and writes of an object name the object,
    a list is empty; and nothing is created."""
    missing = f"never-created-{stack.name}"
    app_root = stack.collection.replace(f"/namespaces/{stack.namespace}/", f"/namespaces/{missing}/")
    crd_root = oracle.replace(f"/namespaces/{ORACLE_NAMESPACE}/", f"/namespaces/{missing}/")

    def manifest(api_version: str) -> dict[str, object]:
        body = stack.manifest("ghost", {"size": 1}) | {"apiVersion": api_version}
        body["metadata"] = {"name": "ghost", "namespace": missing}
        return body

    requests = (
        ("POST", "", lambda v: manifest(v), "application/json"),
        ("GET", "/ghost", lambda v: None, "application/json"),
        ("PUT", "/ghost", lambda v: manifest(v), "application/json"),
        ("PATCH", "/ghost", lambda v: {"spec": {"size": 2}}, "application/merge-patch+json"),
        ("DELETE", "/ghost", lambda v: None, "application/json"),
    )
    for method, suffix, body, content_type in requests:
        with contract.nothing_changes():
            got = contract.api.request(method, app_root + suffix, body(stack.api_version), content_type=content_type)
        want = contract.api.request(method, crd_root + suffix, body(f"{ORACLE_GROUP}/v1alpha1"),
                                    content_type=content_type)
        assert (got[0], json.loads(json.dumps(got[1]).replace(stack.group, ORACLE_GROUP))) == want, (method, got, want)
    code, listed = contract.api.request("GET", app_root)
    assert (code, listed["items"]) == (200, []), listed
    assert kubectl(contract.cluster, "get", "namespace", missing, check=False).returncode != 0


# ------------------------------------------------------------------------- bodies and content types


def test_generic_bad_bodies(contract: Contract, stack: Stack) -> None:
    post = stack.collection
    contract.refused("POST", post, '{"apiVersion": "x", "kind": ', 400, "BadRequest")
    contract.refused("POST", post, stack.manifest("wrongversion") | {"apiVersion": f"{stack.group}/v2"}, 400)
    contract.refused("POST", post, stack.manifest("wrongkind") | {"kind": "Other"}, 422, "Invalid")
    other = stack.manifest("otherns")
    other["metadata"]["namespace"] = "elsewhere"
    contract.refused("POST", post, other, 400, "BadRequest")
    contract.refused("POST", post, json.dumps(stack.manifest("big", {"note": "x" * (3 * 1024 * 1024 + 10)})), 413)
    contract.refused("POST", post, json.dumps(stack.manifest("plain")), 415, content_type="text/plain")
    contract.apply("strategic", {"size": 1})
    contract.refused("PATCH", stack.path("strategic"), {"spec": {"size": 2}}, 415,
                     content_type="application/strategic-merge-patch+json")
