"""Regular expressions as kube-apiserver reads them, with a CRD of the same schema as the oracle.

kube-apiserver matches a CRD's ``pattern``, and checks names, label values and finalizers, with Go's regexp;
Python's ``re`` reads the same text otherwise (a final newline before ``$``, Unicode ``\\d`` and ``\\w``, POSIX
classes, lookarounds).  Each stack serves a ``Patterned`` kind; the same requests go to it and to the CRD, and a
refused one must be refused alike (the bad value printed as Go prints it: ``%q``, and ``%v`` for a number) and
leave no backing object.
"""

from __future__ import annotations

from typing import Any

import pytest
from localcluster.cluster import Cluster

from tests.contract.stack import served
from tests.kube import Api, kubectl
from tests.oracle_kinds import (
    Kind,
    Target,
    assert_same_refusal,
    both,
    crd,
    definition,
    ensure_namespace,
    fixtures,
    wait_refused,
)

pytestmark = pytest.mark.integration

JSON = dict[str, Any]

SCHEMA: JSON = {"type": "object", "properties": {
    "port": {"type": "string", "pattern": "^[0-9]+$"},
    "digits": {"type": "string", "pattern": "^\\d+$"},
    "word": {"type": "string", "pattern": "^\\w+$"},
    "letters": {"type": "string", "pattern": "^[[:alpha:]]+$"},
    "unicode": {"type": "string", "pattern": "^\\pL+\\z"},
    "replicas": {"type": "integer", "maximum": 9},
    "ratio": {"type": "number", "minimum": 0.001, "maximum": 1000},
    "level": {"type": "integer", "enum": [1, 2]},
}}

oracle, ours = fixtures(Kind("Patterned", "patterneds", "patterns.example", SCHEMA))

#: (field, value, kube-apiserver's answer to a create); each refused string is one Python's re would accept, or
#: the other way round.
CASES = [
    ("port", "8080", 201), ("port", "8080\n", 422),
    ("digits", "12", 201), ("digits", "\u0661\u0662", 422),
    ("word", "ab_1", 201), ("word", "\u00e9", 422),
    ("letters", "abc", 201), ("letters", "a:", 422),
    ("unicode", "\u00e9t\u00e9", 201), ("unicode", "\u00e9t\u00e9\n", 422),
    # Numbers in the message as Go's %v prints a float64 (10, 1.2345675e+06, 1e-05), not as Python does.
    ("replicas", 10.0, 422), ("ratio", 1234567.5, 422), ("ratio", 0.00001, 422), ("ratio", 2.5, 201),
    ("level", 3, 422),  # supported values quoted, numbers too: "1", "2"
]


def _namespace(api: Api, ours: Target) -> str:
    return ensure_namespace(api, f"patterns-{ours.group.split('.')[0]}")


@pytest.mark.parametrize(("field", "value", "code"), CASES)
def test_a_value_is_matched_as_kube_apiserver_matches_it(ours: Target, oracle: Target, api: Api, field: str,
                                                         value: Any, code: int) -> None:
    namespace, name = _namespace(api, ours), f"{field}-{CASES.index((field, value, code))}"
    mine, theirs = both(ours, oracle, lambda t: t.create(namespace, name, {field: value}))
    assert theirs[0] == code, theirs
    if code == 422:
        assert_same_refusal(mine, theirs, 422)
        assert ours.backing(namespace, name) is None
    else:
        assert mine[0] == 201, mine
        backing = ours.backing(namespace, name)
        assert backing is not None


@pytest.mark.parametrize("metadata", [
    {"labels": {"app": "x\n"}},
    {"labels": {"app\n": "x"}},
    {"finalizers": ["example.com/hold\n"]},
], ids=["label-value", "label-key", "finalizer"])
def test_metadata_ending_in_a_newline_is_refused_as_for_a_crd(ours: Target, oracle: Target, api: Api,
                                                              metadata: JSON) -> None:
    namespace, name = _namespace(api, ours), "meta-" + next(iter(metadata))

    def create(target: Target) -> tuple[int, Any]:
        body = target.manifest(namespace, name, {})
        body["metadata"].update(metadata)
        return target.api.request("POST", target.path(namespace), body)

    mine, theirs = both(ours, oracle, create)
    assert_same_refusal(mine, theirs, 422)
    assert ours.backing(namespace, name) is None


def test_a_name_ending_in_a_newline_is_refused(ours: Target, oracle: Target, api: Api) -> None:
    """Both refuse it on ``metadata.name``; the words differ, as for every name (Applications are DNS-1035
    labels, a custom resource's name a DNS-1123 subdomain)."""
    namespace = _namespace(api, ours)
    mine, theirs = both(ours, oracle, lambda t: t.create(namespace, "db\n", {}))
    assert mine[0] == theirs[0] == 422, (mine, theirs)
    for answer in (mine[1], theirs[1]):
        assert answer["reason"] == "Invalid"
        assert [c["field"] for c in answer["details"]["causes"]] == ["metadata.name"]
    assert ours.backing(namespace, "db") is None
    assert ours.kubectl("get", ours.resource, "-n", namespace, "-o", "name").stdout.count("/db") == 0


#: A lookahead: Python's re compiles it, Go's regexp does not.
LOOKAHEAD: JSON = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(?!tmp-)"}}}


def test_a_pattern_go_cannot_compile_rejects_its_definition(ours: Target, api: Api, control_plane: Cluster) -> None:
    assert ours.stack is not None
    refused = definition(ours.stack, "Lookahead", "lookaheads", LOOKAHEAD)
    try:
        accepted = wait_refused(control_plane, ours.stack, refused)
        assert accepted["reason"] == "InvalidSchema"
        assert "properties/name/pattern" in accepted["message"] and "(?!" in accepted["message"]
        status, answer = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                     crd("lookahead.example", "Lookahead", "lookaheads", LOOKAHEAD))
        assert status == 422, answer
        assert "properties[spec].properties[name].pattern" in answer["message"]
        assert "lookaheads" not in served(control_plane, ours.group)
    finally:
        kubectl(control_plane, "delete", ours.stack.definition_resource, refused["metadata"]["name"],
                "--ignore-not-found", check=False)
