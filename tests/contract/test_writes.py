"""The spec round trip and the write verbs kubectl uses: apply (client- and server-side), merge and JSON patch."""

from __future__ import annotations

import pytest

from tests.contract.stack import KIND, ORACLE_GROUP, Contract, Stack
from tests.kube import wait_for

DEFAULTS = {"size": 1, "tier": "small"}


def test_read_back_applies_schema_defaults(contract: Contract, stack: Stack) -> None:
    contract.apply("defaulted", {"note": "given"})
    assert contract.get("defaulted")["spec"] == {**DEFAULTS, "note": "given"}
    written = stack.written_spec(contract.backing("defaulted") or {})
    assert written == ({**DEFAULTS, "note": "given"} if stack.writes_defaults else {"note": "given"})


def test_merge_and_json_patch(contract: Contract, stack: Stack) -> None:
    contract.apply("patched", {"size": 2})
    contract.patch("patched", {"spec": {"note": "merged"}})
    assert stack.written_spec(contract.backing("patched") or {})["note"] == "merged"
    contract.kubectl("patch", stack.resource, "patched", "--type=json",
                     "-p", '[{"op":"replace","path":"/spec/size","value":7},{"op":"remove","path":"/spec/note"}]')
    written = stack.written_spec(contract.backing("patched") or {})
    assert written["size"] == 7 and "note" not in written
    # Not asserted here: that a patch writes no defaults of its own (SPEC §4). Both services patch the
    # defaulted read-back today; issue #10 fixes that with its differential suite against a CRD.


def test_server_side_apply_creates_and_updates(contract: Contract, stack: Stack) -> None:
    """Create and update through ``kubectl apply --server-side`` (field ownership and managedFields
    are issue #10's, not yet the contract's)."""
    contract.apply("applied", {"size": 2}, "--server-side")
    assert stack.written_spec(contract.backing("applied") or {})["size"] == 2
    contract.apply("applied", {"size": 3, "note": "x"}, "--server-side")
    written = stack.written_spec(contract.backing("applied") or {})
    assert written["size"] == 3 and written["note"] == "x"
    assert contract.get("applied")["spec"]["size"] == 3


def test_explain_shows_the_definition_schema(contract: Contract, stack: Stack) -> None:
    out = wait_for(lambda: (r := contract.kubectl("explain", f"{stack.resource}.spec", check=False)).returncode == 0
                   and r.stdout, "kubectl explain of the spec", timeout=90, interval=2)
    assert all(key in out for key in ("size", "tier", "note")), out


#: DELETE requests kube-apiserver refuses before it deletes anything, or reads in its own way: options in the body
#: (as JSON text: a number's digits are quoted in the error as written), or in the query when there is no body.
DELETES: list[tuple[str, str | None]] = [
    ("", '{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Bogus"}'),
    ("", '{"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": true, "propagationPolicy": "Foreground"}'),
    ("", '{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Sideways", "dryRun": ["Some"]}'),
    ("", '{"kind": "Pod", "apiVersion": "v1"}'),
    # Go's decoding errors: the first field of a wrong type in the document, a body that is no object, a kind
    # that is no string (before any field), a kind that is not DeleteOptions (before any field too)
    ("", '{"gracePeriodSeconds": "30"}'),
    ("", '{"gracePeriodSeconds": 1.50}'),
    ("", '{"gracePeriodSeconds": 9223372036854775808}'),
    ("", '{"propagationPolicy": 5, "gracePeriodSeconds": "x"}'),
    ("", '{"orphanDependents": "yes"}'),
    ("", '{"dryRun": "All"}'),
    ("", '{"dryRun": ["All", 5]}'),
    ("", '{"preconditions": {"resourceVersion": "1", "uid": 5}}'),
    ("", '{"preconditions": "x"}'),
    ("", "[1]"),
    ("", '"x"'),
    ("", '{"gracePeriodSeconds": "x", "kind": 5}'),
    ("", '{"apiVersion": true}'),
    ("", '{"gracePeriodSeconds": "x", "kind": "Pod"}'),
    # no JSON at all: Go's syntax errors, the first one in the document, before anything is decoded
    ("", "abc"),
    ("", '{"gracePeriodSeconds": 1'),
    ("", '{"gracePeriodSeconds" 1}'),
    ("", '{"gracePeriodSeconds": 1,}'),
    ("", '{"kind": "Pod", "dryRun": [tru]}'),
    ("", '{"gracePeriodSeconds": 1}x'),
    ("", '{"propagationPolicy": "Orph\\qan"}'),
    ("", '{"propagationPolicy": "\\u00"}'),
    ("", '{"propagationPolicy": "a\tb"}'),
    ("", "{'kind': 'DeleteOptions'}"),
    ("", "\ufeff{}"),
    ("", "  "),
    ("?propagationPolicy=Bogus", None),
    ("?gracePeriodSeconds=abc", None),
    ("?orphanDependents=yes&propagationPolicy=Orphan", None),
    ("?dryRun=All&dryRun=Some", None),
]


def test_bad_delete_options_are_refused_as_for_a_custom_resource_and_delete_nothing(contract: Contract,
                                                                                    stack: Stack,
                                                                                    oracle: str) -> None:
    """Each bad DELETE gets the oracle CRD's code and Status word for word, and both objects are still there."""
    contract.apply("doomed", {"size": 1})
    code, body = contract.api.request("POST", oracle, {"apiVersion": f"{ORACLE_GROUP}/v1alpha1", "kind": KIND,
                                                       "metadata": {"name": "doomed"}, "spec": {"size": 1}})
    assert code in (201, 409), body
    for query, options in DELETES:
        with contract.nothing_changes():
            got = contract.api.request("DELETE", stack.path("doomed") + query, options)
        want = contract.api.request("DELETE", f"{oracle}/doomed{query}", options)
        assert want[0] in (400, 422), (query, options, want)
        assert got == want, (query, options)
        assert contract.api.request("GET", f"{oracle}/doomed")[0] == 200
    assert contract.get("doomed")["metadata"]["name"] == "doomed"


#: Bodies kube-apiserver cannot read the apiVersion and kind of: Go's first syntax error, a body that is no object,
#: an apiVersion or kind that is no string; its message then shows the body's start (an object's text, else hex).
UNREADABLE = ["abc", "", "{", '{"apiVersion": "v1" "kind": "X"}', "[1, 2]", '"' + "x" * 40 + '"',
              '{"metadata": {"name": "unreadable", "labels": {"a": 1,}}}', '{"kind": 5, "apiVersion": true}',
              '{"apiVersion": null, "kind": ["K"]}', "nul", '{"spec": {"size": 1}} {}']


@pytest.mark.parametrize("verb", ["POST", "PUT"])
def test_an_unreadable_body_is_refused_as_for_a_custom_resource(contract: Contract, stack: Stack, oracle: str,
                                                                verb: str) -> None:
    """A create's or an update's body that kube-apiserver cannot read the apiVersion and kind of: the oracle CRD's
    400 word for word, and nothing changes."""
    contract.apply("unreadable", {"size": 1})
    code, body = contract.api.request("POST", oracle, {"apiVersion": f"{ORACLE_GROUP}/v1alpha1", "kind": KIND,
                                                       "metadata": {"name": "unreadable"}, "spec": {"size": 1}})
    assert code in (201, 409), body
    for raw in UNREADABLE:
        with contract.nothing_changes():
            got = contract.api.request(verb, stack.path("unreadable") if verb == "PUT" else stack.collection, raw)
        want = contract.api.request(verb, f"{oracle}/unreadable" if verb == "PUT" else oracle, raw)
        assert want[0] == 400, (raw, want)
        assert got == want, raw


@pytest.mark.parametrize("query", [
    "fieldManager=" + "m" * 129, "fieldManager=a%07b", "fieldValidation=bogus", "dryRun=All&dryRun=Some",
    "fieldManager=" + "m" * 129 + "&dryRun=x&fieldValidation=y",
])
def test_bad_create_options_are_refused_as_for_a_custom_resource(contract: Contract, stack: Stack, oracle: str,
                                                                 query: str) -> None:
    """The oracle CRD's 422 on CreateOptions word for word, every cause in its order; nothing is created."""
    with contract.nothing_changes():
        got = contract.api.request("POST", f"{stack.collection}?{query}", stack.manifest("opts", {"size": 1}))
    want = contract.api.request("POST", f"{oracle}?{query}", {"apiVersion": f"{ORACLE_GROUP}/v1alpha1", "kind": KIND,
                                                              "metadata": {"name": "opts"}, "spec": {"size": 1}})
    assert want[0] == 422, want
    assert got == want
