"""Request resolution is pure: method, path, query and headers in, one frozen RequestInfo out."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qsl

import pytest
from multidict import CIMultiDict, MultiDict

from shared.api import errors, table
from shared.api.patch import PatchType
from shared.api.rest import ListOptions, WriteOptions
from shared.server.options import WriteQuery, delete_write_options, query_delete_options
from shared.server.requestinfo import DiscoveryRequest, RequestInfo, Target, resolve

OBJECT = "apps.example.io/v1alpha1/namespaces/team/things/one"
COLLECTION = "apps.example.io/v1alpha1/namespaces/team/things"
CLUSTER_COLLECTION = "apps.example.io/v1alpha1/things"


def info_of(
    method: str, tail: str, query: str | list[tuple[str, str]] = "", headers: dict[str, str] | None = None
) -> RequestInfo:
    pairs = query if isinstance(query, list) else parse_qsl(query, keep_blank_values=True)
    resolved = resolve(method, tail, MultiDict(pairs), CIMultiDict(headers or {}))
    assert isinstance(resolved, RequestInfo)
    return resolved


def problem_of(info: RequestInfo) -> errors.ApiError:
    assert info.problem is not None
    with pytest.raises(errors.ApiError) as raised:
        info.raise_problem()
    assert raised.value is info.problem
    return info.problem


# --- paths and verbs -----------------------------------------------------------------------------


def test_object_url_resolves_to_its_target() -> None:
    info = info_of("GET", OBJECT)
    assert info.target == Target("apps.example.io", "v1alpha1", "things", "team", "one")
    assert (info.verb, info.authorized_name, info.problem) == ("get", "one", None)


def test_cluster_wide_collection_and_subresource() -> None:
    assert info_of("GET", CLUSTER_COLLECTION).target == Target("apps.example.io", "v1alpha1", "things", None, None)
    sub = info_of("GET", f"{OBJECT}/status/extra").target
    assert (sub.name, sub.subresource) == ("one", "status/extra")


def test_a_namespaces_own_status_names_the_namespace_not_a_resource_in_it() -> None:
    """As kube-apiserver's resolver reads it: ``namespaces/x/status`` is namespace x's status subresource."""
    own = info_of("GET", "apps.example.io/v1alpha1/namespaces/team/status").target
    assert (own.plural, own.namespace, own.name, own.subresource) == ("namespaces", None, "team", "status")
    inside = info_of("GET", "apps.example.io/v1alpha1/namespaces/team/things").target
    assert (inside.plural, inside.namespace, inside.name) == ("things", "team", None)


@pytest.mark.parametrize("tail", ["", "apps.example.io", "apps.example.io/v1alpha1", "apps.example.io/v1alpha1/"])
def test_short_paths_are_discovery(tail: str) -> None:
    resolved = resolve("POST", tail, MultiDict(), CIMultiDict())
    assert resolved == DiscoveryRequest(tuple(p for p in tail.split("/") if p), "POST")


def test_empty_path_segment_is_404() -> None:
    with pytest.raises(errors.ApiError) as raised:
        resolve("GET", "apps.example.io//things", MultiDict(), CIMultiDict())
    assert raised.value.code == 404


@pytest.mark.parametrize(
    ("method", "tail", "query", "verb"),
    [
        ("GET", OBJECT, "", "get"),
        ("GET", COLLECTION, "", "list"),
        ("GET", COLLECTION, "watch=true", "watch"),
        ("GET", OBJECT, "watch=1", "watch"),
        ("GET", COLLECTION, "watch=false", "list"),
        ("POST", COLLECTION, "", "create"),
        ("DELETE", COLLECTION, "", "deletecollection"),
        ("PUT", OBJECT, "", "update"),
        ("PATCH", OBJECT, "", "patch"),
        ("DELETE", OBJECT, "", "delete"),
    ],
)
def test_verbs(method: str, tail: str, query: str, verb: str) -> None:
    assert info_of(method, tail, query, {"Content-Type": "application/merge-patch+json"}).verb == verb


@pytest.mark.parametrize(("method", "tail", "query", "code"), [
    ("POST", OBJECT, "", 405),
    ("PUT", COLLECTION, "", 405),
    ("PATCH", COLLECTION, "", 405),
])
def test_what_authorization_needs_fails_at_once(method: str, tail: str, query: str, code: int) -> None:
    with pytest.raises(errors.ApiError) as raised:
        info_of(method, tail, query)
    assert raised.value.code == code


def test_info_is_frozen() -> None:
    info = info_of("GET", OBJECT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.verb = "delete"  # type: ignore[misc]


# --- reads ---------------------------------------------------------------------------------------


def test_list_options_belong_to_list_and_watch_only() -> None:
    query = "labelSelector=a%20in&limit=0&continue="
    assert problem_of(info_of("GET", COLLECTION, query)).code == 400
    get = info_of("GET", OBJECT, query)
    assert (get.problem, get.list_options) == (None, ListOptions())
    assert info_of("GET", COLLECTION, "limit=0&continue=&resourceVersion=").list_options == ListOptions()


@pytest.mark.parametrize(
    ("selector", "name"),
    [
        ("metadata.name=one", "one"),
        ("metadata.name==one", "one"),
        ("metadata.name!=one", None),
        ("metadata.name=one,metadata.name=two", None),
        ("metadata.namespace=team", None),
    ],
)
def test_a_field_selector_pinning_one_name_is_what_authorization_sees(selector: str, name: str | None) -> None:
    assert info_of("GET", COLLECTION, [("fieldSelector", selector)]).authorized_name == name
    assert info_of("GET", COLLECTION, [("fieldSelector", selector), ("watch", "1")]).authorized_name == name


def test_single_object_watch_is_a_collection_watch_on_its_name() -> None:
    info = info_of("GET", OBJECT, [("watch", "1"), ("fieldSelector", "metadata.namespace=team")])
    assert info.authorized_name == "one"
    assert info.list_options.field_selector == (("metadata.namespace", "=", "team"), ("metadata.name", "=", "one"))


def test_send_initial_events_is_a_watch_option() -> None:
    """With resourceVersionMatch=NotOlderThan, as client-go's watch-list asks; on a list, or a watch without it,
    kube-apiserver's 422 on ListOptions.  Any value but 0 and false is true, as in Go's conversion."""
    asked = "watch=1&resourceVersionMatch=NotOlderThan&sendInitialEvents="
    assert info_of("GET", COLLECTION, asked + "true").send_initial_events
    assert info_of("GET", COLLECTION, asked + "x").send_initial_events
    assert not info_of("GET", COLLECTION, asked + "FALSE").send_initial_events
    for query in ("sendInitialEvents=true", "watch=1&sendInitialEvents=true"):
        problem = problem_of(info_of("GET", COLLECTION, query))
        assert (problem.code, problem.details["kind"]) == (422, "ListOptions"), query


@pytest.mark.parametrize(("query", "message"), [
    ("limit=ten", 'strconv.ParseInt: parsing "ten": invalid syntax'),
    ("limit=", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("timeoutSeconds=99999999999999999999", 'strconv.ParseInt: parsing "99999999999999999999": value out of range'),
    # The numbers are read before the selectors, as kube-apiserver converts the query.
    ("labelSelector=!!x&limit=x", 'strconv.ParseInt: parsing "x": invalid syntax'),
])
def test_numbers_are_refused_in_gos_words(query: str, message: str) -> None:
    problem = problem_of(info_of("GET", COLLECTION, query))
    assert (problem.code, problem.message) == (400, message)


def test_a_negative_limit_is_no_limit_and_booleans_read_as_go_reads_them() -> None:
    options = info_of("GET", COLLECTION, "limit=-5&allowWatchBookmarks=maybe").list_options
    assert (options.limit, options.allow_bookmarks) == (None, True)
    assert info_of("GET", COLLECTION, "watch=perhaps").verb == "watch"
    assert info_of("GET", COLLECTION, "watch=False").verb == "list"


def test_resource_version_match_is_refused_as_kube_apiserver_refuses_it() -> None:
    problem = problem_of(info_of("GET", COLLECTION, "resourceVersionMatch=Bogus"))
    assert problem.message == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
        'unless resourceVersion is provided, resourceVersionMatch: Unsupported value: "Bogus": supported values: '
        '"Exact", "NotOlderThan", ""]')
    # The options are checked before the fields a selector names.
    problem = problem_of(info_of("GET", COLLECTION, "fieldSelector=spec.x%3D1&resourceVersionMatch=Exact"))
    assert problem.code == 422
    assert info_of("GET", COLLECTION, "resourceVersion=5&resourceVersionMatch=Exact").problem is None


def test_output_format_is_negotiated_once() -> None:
    accept = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    info = info_of("GET", OBJECT, "includeObject=Object", {"Accept": accept})
    assert info.output.rendering == table.Rendering(table.TABLE_MODE, "v1beta1")
    assert info.output.include == table.INCLUDE_OBJECT
    assert info_of("GET", OBJECT).output.rendering == table.Rendering()


@pytest.mark.parametrize(
    ("query", "headers", "code"),
    [
        ("labelSelector=a%20in", {}, 400),
        ("fieldSelector=spec.size%3D1", {}, 400),
        ("limit=x", {}, 400),
        ("resourceVersionMatch=Exact", {}, 422),
        ("includeObject=All", {}, 400),
        ("", {"Accept": "application/xml"}, 406),
    ],
)
def test_bad_read_options_wait_for_authorization(query: str, headers: dict[str, str], code: int) -> None:
    info = info_of("GET", COLLECTION, query, headers)
    assert problem_of(info).code == code
    assert info.authorized_name is None  # an unparsable selector pins no name


# --- writes --------------------------------------------------------------------------------------


def test_create_and_update_carry_validated_options_and_body_media() -> None:
    create = info_of("POST", COLLECTION, "dryRun=All&fieldManager=me", {"Content-Type": "application/yaml"})
    assert create.write_options == WriteOptions(dry_run=True, field_manager="me", manager="me")
    assert create.body_media == "application/yaml"
    update = info_of("PUT", OBJECT, "", {"Content-Type": "application/json; charset=utf-8"})
    assert (update.write_options, update.body_media) == (WriteOptions(), "application/json")


@pytest.mark.parametrize(
    ("method", "tail", "query", "headers", "code", "field"),
    [
        ("POST", COLLECTION, "dryRun=Some", {}, 422, "dryRun"),
        ("POST", COLLECTION, "fieldValidation=Loose", {}, 422, "fieldValidation"),
        ("PUT", OBJECT, "fieldManager=" + "m" * 129, {}, 422, "fieldManager"),
        ("POST", COLLECTION, "", {"Content-Type": "text/plain"}, 415, None),
        ("POST", CLUSTER_COLLECTION, "", {}, 405, None),
        ("DELETE", CLUSTER_COLLECTION, "", {}, 405, None),
        ("DELETE", COLLECTION, "labelSelector=a%20in", {}, 400, None),
        ("PATCH", OBJECT, "", {"Content-Type": "application/strategic-merge-patch+json"}, 415, None),
        ("PATCH", OBJECT, "", {"Content-Type": "application/apply-patch+yaml"}, 422, "fieldManager"),
        ("PATCH", OBJECT, "force=true", {"Content-Type": "application/merge-patch+json"}, 422, "force"),
    ],
)
def test_bad_write_options_wait_for_authorization(
    method: str, tail: str, query: str, headers: dict[str, str], code: int, field: str | None
) -> None:
    err = problem_of(info_of(method, tail, query, headers))
    assert err.code == code
    if field is not None:
        assert [c["field"] for c in err.details["causes"]] == [field]


def test_patch_type_comes_from_the_content_type() -> None:
    info = info_of("PATCH", OBJECT, "fieldManager=me&force=true", {"Content-Type": "application/apply-patch+yaml"})
    assert (info.patch_type, info.write_options.field_manager, info.problem) == (PatchType.APPLY, "me", None)
    assert info_of("PATCH", OBJECT, "", {"Content-Type": "application/json-patch+json"}).patch_type is PatchType.JSON


def test_delete_keeps_its_query_options_for_the_body_to_complete() -> None:
    info = info_of("DELETE", OBJECT, [("dryRun", "Some"), ("fieldManager", "me")])
    assert info.problem is None
    assert info.write_query == WriteQuery(dry_run=("Some",), field_manager="me", delete_pairs=(("dryRun", "Some"),))


def test_a_delete_passes_on_its_propagation_and_grace_period_and_reads_no_field_manager() -> None:
    """What the backing object's delete is sent is what the DELETE stated, from its query or its body."""
    query = [("propagationPolicy", "Orphan"), ("gracePeriodSeconds", "5"), ("dryRun", "All"), ("fieldManager", "m")]
    options = delete_write_options(query_delete_options(info_of("DELETE", OBJECT, query).write_query))
    assert options == WriteOptions(dry_run=True, deletion={"propagationPolicy": "Orphan", "gracePeriodSeconds": 5})
    assert options.delete_options() == {"propagationPolicy": "Orphan", "gracePeriodSeconds": 5, "dryRun": ["All"]}
    body = {"kind": "DeleteOptions", "orphanDependents": True, "preconditions": {"uid": "u"}, "dryRun": []}
    assert delete_write_options(body).delete_options() == {"orphanDependents": True}
    assert delete_write_options({}) == WriteOptions()


def test_a_get_or_watch_at_a_malformed_resource_version_keeps_the_storage_s_500_for_after_authorization() -> None:
    """kube-apiserver's storage refuses it (500, no reason); a list refuses it earlier, with kube's 400."""
    message = 'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax'
    for tail, query in ((OBJECT, "resourceVersion=abc"), (COLLECTION, "watch=1&resourceVersion=abc")):
        problem = problem_of(info_of("GET", tail, query))
        assert (problem.code, problem.reason, problem.message) == (500, "", message), tail
    for tail, query in ((OBJECT, "resourceVersion=0"), (COLLECTION, "watch=1&resourceVersion=12"),
                        (COLLECTION, "resourceVersion=abc")):
        assert info_of("GET", tail, query).problem is None, (tail, query)


def test_a_list_at_exactly_a_version_carries_its_match_for_the_storage() -> None:
    exact = info_of("GET", COLLECTION, "resourceVersion=12&resourceVersionMatch=Exact").list_options
    assert (exact.exact, exact.resource_version, exact.resource_version_match) == (True, "12", "Exact")
    assert not info_of("GET", COLLECTION, "resourceVersion=12&resourceVersionMatch=NotOlderThan").list_options.exact
