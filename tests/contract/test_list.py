"""List: label selectors on the user's keys, field selectors, pagination, and the Table kubectl prints."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest

from shared.bodies import JSON
from shared.server.responses import LIST_CHUNK_BYTES
from tests.contract.stack import KIND, ORACLE_GROUP, ORACLE_NAMESPACE, Contract, Stack, selector

#: Applications of the list tests: name -> labels.
LISTED = {"list-a": {"batch": "list", "team": "red"},
          "list-b": {"batch": "list", "team": "blue"},
          "list-c": {"batch": "list"}}


@pytest.fixture
def listed(contract: Contract) -> Contract:
    for name, labels in LISTED.items():
        contract.apply(name, {"size": 1}, labels=labels)
    return contract


def names(body: Any) -> set[str]:
    return {i["metadata"]["name"] for i in body["items"]}


@pytest.mark.parametrize(("query", "expected"), [
    ("batch=list,team=red", {"list-a"}),
    ("batch=list,team!=red", {"list-b", "list-c"}),
    ("batch=list,team in (red,blue)", {"list-a", "list-b"}),
    ("batch=list,team", {"list-a", "list-b"}),
    ("batch=list,!team", {"list-c"}),
])
def test_label_selector_on_user_keys(listed: Contract, query: str, expected: set[str]) -> None:
    code, body = listed.list_apps(f"labelSelector={selector(query)}")
    assert code == 200, body
    assert names(body) == expected
    assert all(i["kind"] == KIND for i in body["items"])
    out = listed.kubectl("get", listed.stack.resource, "-l", query, "-o", "name").stdout.split()
    assert {line.rsplit("/", 1)[1] for line in out} == expected


#: Label selectors sent to the oracle CRD's list and to the service's: malformed ones in every way kube-apiserver's
#: parser tells apart, and well-formed ones it reads in ways a simpler reading would refuse.
LABEL_SELECTORS = [
    "a in (b", "a in (b c)", "a in x", "a notin b", "a in (,)", "a in (b,-c,-d)", "a in ()", "in in (in)",
    "x in (foo,,baz),y,z notin ()", "!!x", "!a=b", "=x", "(a)", "a=(", "a=b)", "a=b=c", "a==b", "a b", "a gt 1",
    "a,", "a,,b", "a=b,", " ", "-bad-=x", "Foo.com/x=y", "a/b/c", "/a", "k" * 64, "a=" + "x" * 64, "a=-bad",
    "a>1", "a<b", "a>-1", "a>99999999999999999999", "a>x_1", "a<01",
]


def test_label_selectors_are_read_as_for_a_custom_resource(listed: Contract, oracle: str) -> None:
    """Each selector is accepted where kube-apiserver accepts it on a CRD, and refused with its Status word for
    word where it refuses it."""
    refused = refused_as_by_the_oracle(listed, oracle, "labelSelector", LABEL_SELECTORS)
    assert "a in ()" not in refused and "a>1" not in refused and len(refused) > 25, refused


def refused_as_by_the_oracle(listed: Contract, oracle: str, parameter: str, texts: list[str]) -> list[str]:
    """Lists the Applications and the oracle CRD's objects with ``parameter`` set to each text: where the oracle
    answers 200 so does the service, where it refuses the service gives its Status word for word.  Returns the
    texts the oracle refused."""
    refused = []
    for text in texts:
        got = listed.list_apps(f"{parameter}={selector(text)}")
        want = listed.api.request("GET", f"{oracle}?{parameter}={selector(text)}")
        if want[0] == 200:
            assert got[0] == 200, (text, got)
        else:
            refused.append(text)
            assert got == want, text
    return refused


#: Field selectors sent to the oracle CRD's list and to the service's: the two fields a custom resource answers
#: for, in each form kube-apiserver reads, and the ways it refuses one.
FIELD_SELECTORS = [
    "metadata.name=x", "metadata.name==x", "metadata.name!=x", "metadata.namespace=y,metadata.name=x",
    "metadata.name=a\\,b", "metadata.name=a\\=b", " metadata.name = x ", "metadata.name=", "metadata.name",
    "metadata.name=a,", ",metadata.name=a", "metadata.name=a\\", "metadata.name=a\\x", "spec.size=1",
    "status.phase!=x", "metadata.labels=x", "metadata.uid=u", "=x", "metadata.name=a=b", "metadata.name!=a!=b", " ",
    "spec.size=1,metadata.name=a\\q", "metadata.name= x", "metadata.name=a,,metadata.namespace=b",
]


def test_field_selectors_are_read_as_for_a_custom_resource(listed: Contract, oracle: str) -> None:
    """Each field selector is accepted where kube-apiserver accepts it on a CRD, and refused with its Status word
    for word where it refuses it."""
    refused = refused_as_by_the_oracle(listed, oracle, "fieldSelector", FIELD_SELECTORS)
    assert " metadata.name = x " in refused and len(refused) >= 5, refused


#: List and watch queries whose numbers, booleans and resourceVersionMatch kube-apiserver reads its own way: each
#: sent to the oracle CRD's collection and to the service's.  Watches end after a second.
LIST_QUERIES = [
    "limit=-1", "limit=", "limit=abc", "limit=+3", "limit=99999999999999999999", "timeoutSeconds=-1",
    "timeoutSeconds=abc", "allowWatchBookmarks=abc", "resourceVersionMatch=Exact", "resourceVersionMatch=Bogus",
    "resourceVersionMatch=NotOlderThan&resourceVersion=1&continue=x", "resourceVersion=0&resourceVersionMatch=Exact",
    "sendInitialEvents=false", "sendInitialEvents=abc", "labelSelector=a%3Db&limit=-5",
    "labelSelector=!!x&limit=abc", "fieldSelector=spec.x%3D1&resourceVersionMatch=Exact",
    "fieldSelector=spec.x%3D1&labelSelector=a%3Db", "watch=1&timeoutSeconds=1&resourceVersionMatch=NotOlderThan",
    "watch=1&timeoutSeconds=1&sendInitialEvents=true",
    "watch=1&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=Exact",
    "watch=1&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&continue=x",
    "watch=1&timeoutSeconds=abc", "watch=1&timeoutSeconds=1&allowWatchBookmarks=abc", "watch=yes&timeoutSeconds=1",
]


def answer(contract: Contract, path: str) -> tuple[int, Any]:
    """The code and, for a refusal, the Status of a GET: a watch's stream is not one JSON document."""
    request = urllib.request.Request(f"{contract.api.cluster.server}{path}", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=contract.api.ctx) as response:
            response.read()
            return response.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_list_and_watch_options_are_read_as_for_a_custom_resource(listed: Contract, oracle: str) -> None:
    """Each query is answered with the oracle's code, and refused with its Status word for word: Go's integers
    and booleans, and kube-apiserver's rules for resourceVersionMatch and sendInitialEvents, in its order."""
    codes = []
    for query in LIST_QUERIES:
        got = answer(listed, f"{listed.stack.collection}?{query}")
        want = answer(listed, f"{oracle}?{query}")
        assert got == want, query
        codes.append(want[0])
    assert codes.count(200) >= 5 and codes.count(400) >= 5 and codes.count(422) >= 8, codes


def test_greater_than_and_less_than_select_as_for_a_custom_resource(contract: Contract, stack: Stack,
                                                                    oracle: str) -> None:
    """``rank>5`` selects the objects whose label is an integer above 5, on the service as on a CRD: a label that
    is no integer is neither above nor below."""
    batch = f"ranked-{uuid.uuid4().hex[:6]}"
    ranks = {"r-3": "3", "r-10": "10", "r-007": "007", "r-x": "x"}
    for name, rank in ranks.items():
        contract.apply(f"{batch}-{name}", {"size": 1}, labels={"batch": batch, "rank": rank})
        body = {"apiVersion": f"{ORACLE_GROUP}/v1alpha1", "kind": KIND,
                "metadata": {"name": f"{batch}-{name}", "labels": {"batch": batch, "rank": rank}}, "spec": {}}
        code, created = contract.api.request("POST", oracle, body)
        assert code == 201, created
    for query in ("rank>5", "rank<8", "rank>0,rank<4", "rank<0"):
        text = selector(f"batch={batch},{query}")
        code, ours = contract.list_apps(f"labelSelector={text}")
        assert code == 200, ours
        code, theirs = contract.api.request("GET", f"{oracle}?labelSelector={text}")
        assert code == 200, theirs
        assert names(ours) == names(theirs), query
    code, body = contract.list_apps(f"labelSelector={selector(f'batch={batch},rank>5')}")
    assert names(body) == {f"{batch}-r-10", f"{batch}-r-007"}, body


def test_label_selector_does_not_see_the_backing_keys(listed: Contract) -> None:
    """Selecting on the definition's release labels or the prefixed key finds nothing: a user selects
    on the labels they see."""
    for query in ("contract.example/origin=definition", "apps.cozystack.io-team=red"):
        code, body = listed.list_apps(f"labelSelector={selector(query)}")
        assert code == 200 and body["items"] == [], (query, body)


def test_field_selectors_on_name_and_namespace(listed: Contract, stack: Stack) -> None:
    code, body = listed.list_apps(f"fieldSelector={selector('metadata.name=list-b')}", all_namespaces=True)
    assert code == 200 and names(body) == {"list-b"}, body
    code, body = listed.list_apps(f"fieldSelector={selector('metadata.name!=list-b')}&labelSelector=batch%3Dlist")
    assert code == 200 and names(body) == {"list-a", "list-c"}, body
    code, body = listed.list_apps(f"fieldSelector={selector('metadata.namespace=' + stack.namespace)}"
                             "&labelSelector=batch%3Dlist", all_namespaces=True)
    assert code == 200 and names(body) == set(LISTED), body
    code, body = listed.list_apps(f"fieldSelector={selector('metadata.namespace=elsewhere')}", all_namespaces=True)
    assert code == 200 and body["items"] == [], body


@pytest.mark.parametrize("field", ["spec.size", "status.phase", "metadata.labels"])
def test_other_field_selectors_are_400(listed: Contract, stack: Stack, field: str) -> None:
    listed.refused("GET", f"{stack.collection}?fieldSelector={selector(field + '=1')}", None, 400, "BadRequest")


def test_limit_and_continue(listed: Contract) -> None:
    code, first = listed.list_apps("labelSelector=batch%3Dlist&limit=2")
    assert code == 200 and len(first["items"]) == 2 and first["metadata"].get("continue"), first
    token = selector(first["metadata"]["continue"])
    code, rest = listed.list_apps(f"labelSelector=batch%3Dlist&limit=2&continue={token}")
    assert code == 200 and len(rest["items"]) == 1 and not rest["metadata"].get("continue"), rest
    assert names(first) | names(rest) == set(LISTED)


def test_list_is_a_typed_list(listed: Contract, stack: Stack) -> None:
    code, body = listed.list_apps("labelSelector=batch%3Dlist")
    assert code == 200, body
    assert body["kind"] == f"{KIND}List" and body["apiVersion"] == stack.api_version, body
    assert body["metadata"].get("resourceVersion"), body


def test_metadata_only_list(listed: Contract, stack: Stack) -> None:
    """What garbage collectors and ``kubectl get -o name``-style clients ask for: each item's metadata only."""
    code, body = listed.api.request("GET", f"{stack.collection}?labelSelector=batch%3Dlist",
                                    accept="application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io")
    assert code == 200 and body["kind"] == "PartialObjectMetadataList", body
    assert {i["kind"] for i in body["items"]} == {"PartialObjectMetadata"}, body
    assert {i["metadata"]["name"] for i in body["items"]} == set(LISTED)
    assert all(i["metadata"]["labels"]["batch"] == "list" and "spec" not in i for i in body["items"]), body


# ------------------------------------------------------------------------- Table


def test_kubectl_get_prints_the_stacks_columns(listed: Contract, stack: Stack) -> None:
    lines = listed.kubectl("get", stack.resource, "-l", "batch=list").stdout.splitlines()
    assert tuple(lines[0].split()) == stack.columns
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(LISTED)
    ready = stack.columns.index("READY")
    assert all(line.split()[ready] == "Unknown" for line in lines[1:]), lines
    everywhere = listed.kubectl("get", stack.resource, "-A", "-l", "batch=list").stdout.splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]


def test_table_response(listed: Contract, stack: Stack) -> None:
    code, table = listed.api.request("GET", f"{stack.path('list-a')}",
                                     accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert code == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1", table
    assert tuple(c["name"] for c in table["columnDefinitions"]) == stack.columns
    (row,) = table["rows"]
    assert row["cells"][0] == "list-a" and len(row["cells"]) == len(stack.columns)
    assert row["object"]["metadata"]["name"] == "list-a"
    code, plain = listed.api.request("GET", stack.path("list-a"))
    assert code == 200 and plain["kind"] == KIND, plain


#: Applications of the large list: enough, with a padded annotation, for an answer of several chunks.
LARGE = 160
PAD = "x" * 2000


def test_a_list_of_several_chunks_is_every_object_as_got(contract: Contract, stack: Stack) -> None:
    """A list from the cache larger than a chunk (shared.server.responses.EncodedItems) arrives through
    kube-apiserver whole: its Content-Length is its size, it is valid JSON, and its items are the objects, in
    kube-apiserver's order, each exactly as a get of it answers."""
    names = [f"large-{i:03d}" for i in range(LARGE)]
    for name in names:
        contract.create(name, {"size": 1}, labels={"batch": "large"}, annotations={"pad": PAD})
    try:
        request = urllib.request.Request(
            f"{contract.api.cluster.server}{stack.collection}?labelSelector={selector('batch=large')}",
            headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=60, context=contract.api.ctx) as response:
            raw = response.read()
            length = response.headers.get("Content-Length")
        assert len(raw) > 2 * LIST_CHUNK_BYTES, len(raw)
        assert length == str(len(raw)), (length, len(raw))
        body = json.loads(raw)
        assert body["kind"] == f"{KIND}List" and body["metadata"]["resourceVersion"], body["metadata"]
        assert [item["metadata"]["name"] for item in body["items"]] == names
        for item in body["items"]:
            code, got = contract.api.request("GET", stack.path(item["metadata"]["name"]))
            assert code == 200 and got == item, (code, item["metadata"]["name"])
        out = contract.kubectl("get", stack.resource, "-l", "batch=large", "-o", "name").stdout.split()
        assert [line.rsplit("/", 1)[1] for line in out] == names
    finally:
        code, _ = contract.api.request("DELETE", f"{stack.collection}?labelSelector={selector('batch=large')}")
        assert code == 200


# ------------------------------------------------------------------------- watch


def watch_events(contract: Contract, query: str) -> list[tuple[str, str]]:
    """(type, name) of every event a watch with ``query`` streams until its timeoutSeconds ends it."""
    request = urllib.request.Request(f"{contract.api.cluster.server}{contract.stack.collection}?watch=1&{query}",
                                     headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30, context=contract.api.ctx) as response:
        lines = response.read().decode().splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return [(e["type"], e["object"]["metadata"].get("name", "") or e["object"].get("message", "")) for e in events]


def test_watch_from_a_resource_version_sees_each_change(contract: Contract, stack: Stack) -> None:
    # The resourceVersion of the create itself: one the service's watch window surely holds (an older
    # one may rightly get 410 Gone from a freshly started service).
    created = contract.create("watched", {"size": 1}, labels={"batch": "watched"})
    contract.patch("watched", {"spec": {"size": 2}})
    contract.patch("watched", {"metadata": {"labels": {"batch": "unwatched"}}})
    contract.kubectl("delete", stack.resource, "watched")
    query = f"labelSelector=batch%3Dwatched&timeoutSeconds=2&resourceVersion={created['metadata']['resourceVersion']}"
    # Leaving the selector is a DELETED to this watcher; the real delete after it is none of its business.
    assert watch_events(contract, query) == [("MODIFIED", "watched"), ("DELETED", "watched")]


def watched(contract: Contract, collection: str, query: str) -> list[JSON]:
    """Every event of a watch of ``collection`` with ``query``, until its timeoutSeconds ends it."""
    request = urllib.request.Request(f"{contract.api.cluster.server}{collection}?watch=1&{query}",
                                     headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30, context=contract.api.ctx) as response:
        return [json.loads(line) for line in response.read().decode().splitlines() if line.strip()]


def test_a_label_selected_watch_sees_what_the_oracle_sees(contract: Contract, stack: Stack, oracle: str) -> None:
    """kube-apiserver decides each event on the object and the object before it: a change into the selector is
    ADDED, out of it DELETED (the object as it was, at the change's resourceVersion), within it MODIFIED, what
    the watcher saw before or not. The same writes to an Application and to the oracle CRD's object, then the
    same watches from two points of that history, compared event by event."""
    name = f"sel-{uuid.uuid4().hex[:6]}"

    def history(collection: str, api_version: str, namespace: str) -> tuple[list[str], list[list[Any]]]:
        manifest = stack.manifest(name, {"size": 1}, labels={"batch": "sel-out"}) | {
            "apiVersion": api_version, "metadata": {"name": name, "namespace": namespace,
                                                    "labels": {"batch": "sel-out"}}}
        code, body = contract.api.request("POST", collection, manifest)
        assert code == 201, body
        rvs = [body["metadata"]["resourceVersion"]]
        for patch in ({"metadata": {"labels": {"batch": "sel-in"}}}, {"spec": {"size": 2}},
                      {"metadata": {"labels": {"batch": "sel-out"}}}, {"metadata": {"labels": {"batch": "sel-in"}}}):
            code, body = contract.api.request("PATCH", f"{collection}/{name}", patch,
                                              content_type="application/merge-patch+json")
            assert code == 200, body
            rvs.append(body["metadata"]["resourceVersion"])
        code, body = contract.api.request("DELETE", f"{collection}/{name}")
        assert code == 200, body
        seen = []
        for start in (rvs[0], rvs[2]):
            events = watched(contract, collection, f"labelSelector=batch%3Dsel-in&timeoutSeconds=1"
                                                   f"&resourceVersion={start}")
            seen.append([(e["type"], e["object"]["metadata"]["labels"]["batch"], e["object"]["spec"]["size"],
                          rvs.index(rv) if (rv := e["object"]["metadata"]["resourceVersion"]) in rvs else "later")
                         for e in events])
        return rvs, seen

    _rvs, ours = history(stack.collection, stack.api_version, stack.namespace)
    _oracle_rvs, theirs = history(oracle, f"{ORACLE_GROUP}/v1alpha1", ORACLE_NAMESPACE)
    assert ours == theirs, f"{stack.name}: {ours}\n  oracle: {theirs}"
    # The oracle's answer, so that a change in kube-apiserver's rule shows here too.
    assert theirs[1] == [("DELETED", "sel-in", 2, 3), ("ADDED", "sel-in", 2, 4), ("DELETED", "sel-in", 2, "later")]


@pytest.mark.parametrize(("accept", "include"), [("application/json", ""),
                                               ("application/json;as=Table;v=v1;g=meta.k8s.io", ""),
                                               ("application/json;as=Table;v=v1;g=meta.k8s.io", "None")])
def test_watch_list_starts_with_every_object_whole(listed: Contract, stack: Stack, accept: str, include: str) -> None:
    """``sendInitialEvents=true`` (client-go's watch-list): an ADDED event per current object, as a list
    would show it (the list's items may come encoded from the service's cache), then the bookmark, which
    carries its metadata even in a Table without objects (as kube-apiserver's does)."""
    query = ("watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
             "&labelSelector=batch%3Dlist&timeoutSeconds=2" + (f"&includeObject={include}" if include else ""))
    request = urllib.request.Request(f"{listed.api.cluster.server}{stack.collection}?{query}",
                                     headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30, context=listed.api.ctx) as response:
        events = [json.loads(line) for line in response.read().decode().splitlines() if line.strip()]
    added = [e["object"] for e in events if e["type"] == "ADDED"]
    bookmarks = [e["object"] for e in events if e["type"] == "BOOKMARK"]
    assert [e["type"] for e in events[:len(LISTED)]] == ["ADDED"] * len(LISTED), events
    if accept == "application/json":
        assert {o["metadata"]["name"] for o in added} == set(LISTED)
        assert all(o["kind"] == KIND and o["spec"]["size"] == 1 for o in added), added
        ends = [b["metadata"] for b in bookmarks]
    else:
        assert all(o["kind"] == "Table" for o in added), added
        assert {row["cells"][0] for o in added for row in o["rows"]} == set(LISTED)
        # kube-apiserver's Table of a bookmark (asked of a CRD): no columns, one row of empty cells whose
        # object carries the bookmark's metadata.
        assert all(b["columnDefinitions"] is None and len(b["rows"]) == 1 for b in bookmarks), bookmarks
        assert all(b["rows"][0]["cells"] == [""] + [None] * (len(stack.columns) - 1) for b in bookmarks), bookmarks
        ends = [b["rows"][0]["object"]["metadata"] for b in bookmarks]
    assert any((m.get("annotations") or {}).get("k8s.io/initial-events-end") == "true" for m in ends), events


def test_watch_list_without_bookmarks_sends_no_bookmark_as_the_oracle(contract: Contract, stack: Stack,
                                                                     oracle: str) -> None:
    """The initial-events-end bookmark is a bookmark: kube-apiserver sends it only to a watch that allows them."""
    token = f"nobm-{uuid.uuid4().hex[:6]}"
    types = {}
    for root, api_version in ((stack.collection, stack.api_version), (oracle, f"{ORACLE_GROUP}/v1alpha1")):
        for name in (f"{token}-a", f"{token}-b"):
            manifest = stack.manifest(name, {"size": 1}) | {"apiVersion": api_version,
                                                           "metadata": {"name": name, "labels": {"batch": token}}}
            assert contract.api.request("POST", root, manifest)[0] == 201
        query = ("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2"
                 f"&labelSelector=batch%3D{token}")
        request = urllib.request.Request(f"{contract.api.cluster.server}{root}?{query}")
        with urllib.request.urlopen(request, timeout=30, context=contract.api.ctx) as response:
            types[root] = [json.loads(line)["type"] for line in response.read().decode().splitlines() if line.strip()]
    assert types[stack.collection] == types[oracle] == ["ADDED", "ADDED"], types
