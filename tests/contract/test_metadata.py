"""Labels, annotations, generation and resourceVersion: the Application's metadata as a user sees it and as the
backing object carries it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.contract.stack import LAST_APPLIED, USER_KEY_PREFIX, Contract, Stack, cause_fields, user_annotations

# ------------------------------------------------------------------------- prefixing and de-prefixing


def test_labels_and_annotations_are_prefixed_onto_the_backing_object(contract: Contract, stack: Stack) -> None:
    contract.apply("labelled", {"size": 2}, labels={"team": "payments", "example.com/tier": "gold"},
                   annotations={"note": "hello", "example.com/owner": "ops"})
    meta = (contract.backing("labelled") or {})["metadata"]
    assert meta["labels"] == {
        f"{USER_KEY_PREFIX}team": "payments",
        f"{USER_KEY_PREFIX}example.com/tier": "gold",
        "apps.cozystack.io/application.kind": "ContractThing",
        "apps.cozystack.io/application.group": stack.group,
        "apps.cozystack.io/application.name": "labelled",
        "contract.example/origin": "definition",
    }
    assert {k: v for k, v in meta["annotations"].items() if not k.endswith(LAST_APPLIED)} == {
        f"{USER_KEY_PREFIX}note": "hello", f"{USER_KEY_PREFIX}example.com/owner": "ops"}


def test_read_back_is_de_prefixed(contract: Contract) -> None:
    contract.apply("readback", labels={"team": "payments"}, annotations={"note": "hello"})
    app = contract.get("readback")
    # Only the user's own keys come back, without the prefix: not the kind/group/name labels, not the
    # definition's release labels.
    assert app["metadata"]["labels"] == {"team": "payments"}
    assert user_annotations(app) == {"note": "hello"}


def test_label_and_annotate_through_kubectl(contract: Contract, stack: Stack) -> None:
    contract.apply("relabelled", labels={"team": "a"})
    contract.kubectl("label", stack.resource, "relabelled", "team=b", "--overwrite")
    contract.kubectl("annotate", stack.resource, "relabelled", "owner=ops")
    meta = (contract.backing("relabelled") or {})["metadata"]
    assert meta["labels"][f"{USER_KEY_PREFIX}team"] == "b"
    assert meta["annotations"][f"{USER_KEY_PREFIX}owner"] == "ops"
    contract.kubectl("label", stack.resource, "relabelled", "team-")
    assert f"{USER_KEY_PREFIX}team" not in (contract.backing("relabelled") or {})["metadata"]["labels"]
    assert "team" not in (contract.get("relabelled")["metadata"].get("labels") or {})


# ------------------------------------------------------------------------- validation of user keys and values

BAD_METADATA: dict[str, tuple[str, dict[str, Any]]] = {
    # A key is valid only if its *stored* form (prefix + key) is: 18 + 50 characters is over 63.
    "label key too long once prefixed": ("labels", {"k" * 50: "v"}),
    "label key with a space": ("labels", {"bad key": "v"}),
    "label value with a space": ("labels", {"team": "not valid"}),
    "label value too long": ("labels", {"team": "v" * 64}),
    "label value not a string": ("labels", {"team": 7}),
    "annotation key with a space": ("annotations", {"bad key": "v"}),
    "annotation key too long once prefixed": ("annotations", {"k" * 50: "v"}),
    "annotation value not a string": ("annotations", {"note": 7}),
}


@pytest.mark.parametrize("case", list(BAD_METADATA))
def test_bad_user_metadata_is_422_on_create(contract: Contract, stack: Stack, case: str) -> None:
    where, entries = BAD_METADATA[case]
    # A name per case, so that a case the service wrongly accepts cannot turn the next one into a 409.
    name = f"badmeta{list(BAD_METADATA).index(case)}"
    status = contract.refused("POST", stack.collection, stack.manifest(name, **{where: entries}), 422, "Invalid")
    # The service names its own kind and field, not the backing object's (a user cannot see that one).
    assert status["details"]["kind"] == "ContractThing" and status["details"]["group"] == stack.group, status
    assert cause_fields(status) == {f"metadata.{where}"}, status
    assert contract.backing(name) is None


@pytest.mark.parametrize("case", list(BAD_METADATA))
def test_bad_user_metadata_is_422_on_patch(contract: Contract, stack: Stack, case: str) -> None:
    where, entries = BAD_METADATA[case]
    contract.apply("victim", {"size": 2})
    status = contract.refused("PATCH", stack.path("victim"), {"metadata": {where: entries}}, 422, "Invalid",
                              content_type="application/merge-patch+json")
    assert status["details"]["kind"] == "ContractThing", status
    assert cause_fields(status) == {f"metadata.{where}"}, status


# ------------------------------------------------------------------------- generation


def test_generation_counts_spec_changes_like_a_crd(contract: Contract) -> None:
    """As for a custom resource: 1 on create, +1 per spec change, unchanged by label, annotation or
    no-op writes."""
    contract.apply("counted", {"size": 1})
    assert contract.get("counted")["metadata"]["generation"] == 1
    contract.patch("counted", {"spec": {"size": 2}})
    assert contract.get("counted")["metadata"]["generation"] == 2
    contract.patch("counted", {"metadata": {"labels": {"team": "x"}}})
    contract.patch("counted", {"metadata": {"annotations": {"note": "x"}}})
    contract.patch("counted", {"spec": {"size": 2}})
    assert contract.get("counted")["metadata"]["generation"] == 2
    contract.patch("counted", {"spec": {"tier": "large"}})
    assert contract.get("counted")["metadata"]["generation"] == 3


# ------------------------------------------------------------------------- resourceVersion


def test_resource_version_moves_with_every_write(contract: Contract) -> None:
    contract.apply("versioned", {"size": 1})
    first = contract.get("versioned")["metadata"]["resourceVersion"]
    assert first == (contract.backing("versioned") or {})["metadata"]["resourceVersion"]
    contract.patch("versioned", {"metadata": {"labels": {"team": "x"}}})
    second = contract.get("versioned")["metadata"]["resourceVersion"]
    assert second != first
    assert second == (contract.backing("versioned") or {})["metadata"]["resourceVersion"]


def test_stale_resource_version_is_409(contract: Contract, stack: Stack) -> None:
    contract.apply("stale", {"size": 1})
    old = contract.get("stale")
    contract.patch("stale", {"spec": {"size": 2}})
    old["spec"]["size"] = 5  # an edit made on the old copy
    status = contract.refused("PUT", stack.path("stale"), old, 409, "Conflict")
    assert "the object has been modified" in status["message"], status
    assert stack.written_spec(contract.backing("stale") or {})["size"] == 2


def test_stale_resource_version_on_merge_patch_is_409(contract: Contract, stack: Stack) -> None:
    contract.apply("stalepatch", {"size": 1})
    old_rv = contract.get("stalepatch")["metadata"]["resourceVersion"]
    contract.patch("stalepatch", {"spec": {"size": 2}})
    contract.refused("PATCH", stack.path("stalepatch"),
                     {"metadata": {"resourceVersion": old_rv}, "spec": {"size": 9}}, 409, "Conflict",
                     content_type="application/merge-patch+json")


def test_kubectl_replace_with_stale_copy_fails(contract: Contract, stack: Stack) -> None:
    contract.apply("replaced", {"size": 1})
    old = contract.get("replaced")
    contract.patch("replaced", {"spec": {"size": 2}})
    old["spec"]["size"] = 5
    with contract.nothing_changes():
        result = contract.kubectl_input("replace", "-f", "-", body=json.dumps(old))
    assert result.returncode != 0 and "the object has been modified" in result.stderr, result.stderr


def test_create_existing_is_409_already_exists(contract: Contract, stack: Stack) -> None:
    contract.apply("twice", {"size": 1})
    status = contract.refused("POST", stack.collection, stack.manifest("twice", {"size": 3}), 409, "AlreadyExists")
    assert status["details"]["name"] == "twice" and status["details"]["kind"] == "contractthings", status
    assert stack.written_spec(contract.backing("twice") or {})["size"] == 1
