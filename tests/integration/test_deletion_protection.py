"""The deletion-protection recipe (deploy/policies/deletion-protection.yaml, docs/operating.md) on a real
kube-apiserver, for both stacks, with a CRD of the same schema as the oracle.

The manifests are applied as shipped, with the oracle's group added to the policy's match (the only
change): a protected object's DELETE, and a deletecollection that matches one, must be refused with the
answer kube-apiserver gives for the CRD, and must delete what the CRD's deletes (nothing protected).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube import Api, wait_for
from tests.oracle_kinds import (
    Kind,
    Target,
    apply,
    assert_delete_refused,
    assert_same_refusal,
    both,
    ensure_namespace,
    fixtures,
)

pytestmark = pytest.mark.integration

JSON = dict[str, Any]
RECIPE = Path(__file__).parents[2] / "deploy" / "policies" / "deletion-protection.yaml"
LABEL = "cozystack.io/deletion-protection"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
COLLECTIONS = {"ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
               "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings"}
KEEPSAKE = Kind("Keepsake", "keepsakes", "protection.example",
                {"type": "object", "properties": {"size": {"type": "integer"}}})

oracle, ours = fixtures(KEEPSAKE)


@pytest.fixture(scope="module")
def recipe(api: Api) -> Iterator[list[JSON]]:
    documents: list[JSON] = [d for d in yaml.safe_load_all(RECIPE.read_text()) if d]
    applied = copy.deepcopy(documents)
    policy = next(d for d in applied if d["kind"] == "ValidatingAdmissionPolicy")
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        rule["apiGroups"].append(KEEPSAKE.oracle_group)
    for document in applied:
        apply(api, COLLECTIONS[document["kind"]], document)
    yield documents
    for document in reversed(applied):
        api.request("DELETE", f"{COLLECTIONS[document['kind']]}/{document['metadata']['name']}")


@pytest.fixture
def namespace(ours: Target, oracle: Target, api: Api, recipe: list[JSON]) -> str:
    """A namespace of this stack's run (the oracle's objects get the same names), the recipe enforced."""
    assert ours.stack is not None
    name = ensure_namespace(api, f"protection-{ours.stack.name}")
    probe = f"probe-{ours.stack.name}"
    for target in (ours, oracle):
        if target.create(name, probe, {}, labels={LABEL: "true"})[0] not in (201, 409):
            raise AssertionError(f"cannot create {probe}")
        wait_for(lambda t=target: t.api.request("DELETE", t.path(name, probe) + "?dryRun=All")[0] == 403,
                 f"the recipe to be enforced on {target.group}", timeout=60)
    return name


def test_the_recipe_covers_both_stacks_groups(recipe: list[JSON]) -> None:
    policy = next(d for d in recipe if d["kind"] == "ValidatingAdmissionPolicy")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert sorted(rule["apiGroups"]) == ["apps.cozystack.io", "tofu.apps.cozystack.io"]
    assert rule["operations"] == ["DELETE"] and rule["resources"] == ["*"]


def test_a_protected_application_is_not_deleted(ours: Target, oracle: Target, namespace: str) -> None:
    for target in (ours, oracle):
        assert target.create(namespace, "kept", {"size": 1}, labels={LABEL: "true"})[0] == 201
        assert target.create(namespace, "free", {"size": 1}, labels={LABEL: "false"})[0] == 201
    # dry-run, then real: the same 403 Status, and the backing object is as it was
    assert_delete_refused(ours, oracle, namespace, "kept", 403)
    mine, theirs = both(ours, oracle, lambda t: t.api.request("DELETE", t.path(namespace, "kept")))
    assert "is protected from deletion" in mine[1]["message"], mine
    assert ours.backing(namespace, "kept") is not None
    mine, theirs = both(ours, oracle, lambda t: t.api.request("DELETE", t.path(namespace, "free")))
    assert mine[0] == theirs[0] == 200, (mine, theirs)
    assert ours.backing(namespace, "free") is None
    # removing the label lifts the protection
    for target in (ours, oracle):
        assert target.patch(namespace, "kept", {"metadata": {"labels": {LABEL: None}}})[0] == 200
        assert target.api.request("DELETE", target.path(namespace, "kept"))[0] == 200
    assert ours.backing(namespace, "kept") is None


def test_a_deletecollection_matching_a_protected_application_deletes_nothing(
        ours: Target, oracle: Target, namespace: str) -> None:
    for target in (ours, oracle):
        assert target.create(namespace, "batch-a", {}, labels={"batch": "x", LABEL: "true"})[0] == 201
        assert target.create(namespace, "batch-b", {}, labels={"batch": "x"})[0] == 201
    for query in ("?labelSelector=batch%3Dx&dryRun=All", "?labelSelector=batch%3Dx"):
        mine, theirs = both(ours, oracle, lambda t, q=query: t.api.request("DELETE", t.path(namespace) + q))
        assert_same_refusal(mine, theirs, 403)
    survivors = {}
    for side, target in (("ours", ours), ("oracle", oracle)):
        code, listed = target.api.request("GET", target.path(namespace) + "?labelSelector=batch%3Dx")
        assert code == 200, listed
        survivors[side] = sorted(i["metadata"]["name"] for i in listed["items"]
                                 if "deletionTimestamp" not in i["metadata"])
    # kube-apiserver deletes a collection in name order and stops at the first refusal
    assert survivors["ours"] == survivors["oracle"] == ["batch-a", "batch-b"], survivors
    assert ours.backing(namespace, "batch-a") is not None and ours.backing(namespace, "batch-b") is not None
    for target in (ours, oracle):
        assert target.patch(namespace, "batch-a", {"metadata": {"labels": {LABEL: None}}})[0] == 200
        code, deleted = target.api.request("DELETE", target.path(namespace) + "?labelSelector=batch%3Dx")
        assert code == 200 and len(deleted["items"]) == 2, deleted
    assert ours.backing(namespace, "batch-a") is None and ours.backing(namespace, "batch-b") is None
