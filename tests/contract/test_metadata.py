"""Labels, annotations, generation and resourceVersion: the Application's metadata as a user sees it and as the
backing object carries it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.contract.stack import (
    JSON,
    LAST_APPLIED,
    ORACLE_GROUP,
    USER_KEY_PREFIX,
    Contract,
    Stack,
    cause_fields,
    causes,
    user_annotations,
)

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
    annotations = dict(meta["annotations"])
    managed = json.loads(annotations.pop(stack.managed_fields_annotation))  # never a user annotation
    assert [(e["manager"], e["operation"]) for e in managed] == [("kubectl-client-side-apply", "Update")]
    assert {k: v for k, v in annotations.items() if not k.endswith(LAST_APPLIED)} == {
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


#: Entries kube-apiserver refuses on a custom resource for their length, which it counts in bytes (Go's ``len``).
LONG_METADATA: dict[str, tuple[str, dict[str, Any]]] = {
    "label value of 64 bytes": ("labels", {"team": "v" * 64}),
    "label value of 32 two-byte characters": ("labels", {"team": "\u00e9" * 32}),
    "label key of 64 bytes": ("labels", {"k" * 64: "v"}),
    "label key of 32 two-byte characters": ("labels", {"\u00e9" * 32: "v"}),
    "label key with a prefix of 254 bytes": ("labels", {".".join(["a" * 63] * 4)[:254] + "/k": "v"}),
    "annotation key of 64 bytes": ("annotations", {"k" * 64: "v"}),
}


@pytest.mark.parametrize("case", list(LONG_METADATA))
def test_too_long_metadata_is_refused_in_kube_apiservers_words(contract: Contract, stack: Stack, oracle: str,
                                                               case: str) -> None:
    """The causes are the oracle CRD's, word for word, and nothing is created on either side."""
    where, entries = LONG_METADATA[case]
    name = f"longmeta{list(LONG_METADATA).index(case)}"
    status = contract.refused("POST", stack.collection, stack.manifest(name, **{where: entries}), 422, "Invalid")
    code, want = contract.api.request("POST", oracle, {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "kind": "ContractThing",
        "metadata": {"name": name, where: entries}, "spec": {"size": 1}})
    assert code == 422, want
    assert causes(status) == causes(want), case
    assert contract.backing(name) is None
    assert contract.api.request("GET", f"{oracle}/{name}")[0] == 404


# ------------------------------------------------------------------------- generation


#: Merge patches applied in turn to an Application and to the same object of the oracle CRD.
WRITES: tuple[JSON, ...] = (
    {"spec": {"size": 2}},
    {"metadata": {"labels": {"team": "x"}}},
    {"metadata": {"annotations": {"note": "x"}}},
    {"spec": {"size": 2}},  # a no-op
    {"spec": {"tier": "large"}},
    {"metadata": {"labels": {"team": None}}},
)


def test_generation_and_resource_version_follow_crd_semantics(contract: Contract, stack: Stack, oracle: str) -> None:
    """metadata.generation counts spec changes (not label, annotation or no-op writes) and
    resourceVersion moves on every real write, exactly as kube-apiserver does for a custom resource
    with the same schema."""

    def observe(path: str, write: JSON | None) -> tuple[Any, ...]:
        if write is not None:
            code, body = contract.api.request("PATCH", path, write, content_type="application/merge-patch+json")
            assert code == 200, body
        code, body = contract.api.request("GET", path)
        assert code == 200, body
        return body["metadata"].get("generation"), body["metadata"]["resourceVersion"]

    oracle_path = f"{oracle}/counted-{stack.name}"
    code, body = contract.api.request("POST", oracle, stack.manifest(f"counted-{stack.name}", {"size": 1}) | {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "metadata": {"name": f"counted-{stack.name}"}})
    assert code == 201, body
    contract.create("counted", {"size": 1})
    steps: list[tuple[JSON | None, tuple[Any, ...], tuple[Any, ...]]] = [
        (None, observe(oracle_path, None), observe(stack.path("counted"), None))]
    for write in WRITES:
        steps.append((write, observe(oracle_path, write), observe(stack.path("counted"), write)))
    for (done, crd, app), (_, crd_before, app_before) in zip(steps[1:], steps, strict=False):
        assert app[0] == crd[0], f"generation after {done}: {app[0]}, a custom resource has {crd[0]}"
        assert (app[1] != app_before[1]) == (crd[1] != crd_before[1]), f"resourceVersion after {done}"
    assert steps[0][2][0] == steps[0][1][0] == 1


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
