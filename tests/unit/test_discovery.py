"""Discovery documents have exactly the meta/v1 shapes kubectl decodes."""

from __future__ import annotations

from shared.api import discovery
from shared.api.rest import ResourceInfo


def info(group: str, version: str, kind: str, **kw: object) -> ResourceInfo:
    plural = kind.lower() + "s"
    return ResourceInfo(group, version, kind, plural, kind.lower(), {"type": "object"}, **kw)  # type: ignore[arg-type]


INFOS = [
    info("apps.example.io", "v1alpha1", "Postgres", short_names=("pg",), categories=("all", "apps")),
    info("apps.example.io", "v1alpha1", "Bucket"),
    info("tofu.example.io", "v1alpha1", "VPC"),
    info("apps.example.io", "v1", "Redis"),
]


def test_group_list() -> None:
    doc = discovery.api_group_list(INFOS)
    assert doc["kind"] == "APIGroupList"
    assert doc["apiVersion"] == "v1"
    assert doc["groups"] == [
        {
            "name": "apps.example.io",
            "versions": [
                {"groupVersion": "apps.example.io/v1", "version": "v1"},
                {"groupVersion": "apps.example.io/v1alpha1", "version": "v1alpha1"},
            ],
            "preferredVersion": {"groupVersion": "apps.example.io/v1", "version": "v1"},
        },
        {
            "name": "tofu.example.io",
            "versions": [{"groupVersion": "tofu.example.io/v1alpha1", "version": "v1alpha1"}],
            "preferredVersion": {"groupVersion": "tofu.example.io/v1alpha1", "version": "v1alpha1"},
        },
    ]


def test_group_list_with_declared_group_and_empty() -> None:
    assert discovery.api_group_list([])["groups"] == []
    doc = discovery.api_group_list([], [("x.io", "v1beta1")])
    assert [g["name"] for g in doc["groups"]] == ["x.io"]


def test_group() -> None:
    doc = discovery.api_group("tofu.example.io", INFOS)
    assert doc == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "tofu.example.io",
        "versions": [{"groupVersion": "tofu.example.io/v1alpha1", "version": "v1alpha1"}],
        "preferredVersion": {"groupVersion": "tofu.example.io/v1alpha1", "version": "v1alpha1"},
    }
    assert discovery.api_group("missing.io", INFOS) is None


def test_resource_list() -> None:
    doc = discovery.api_resource_list("apps.example.io", "v1alpha1", INFOS)
    assert doc["kind"] == "APIResourceList"
    assert doc["apiVersion"] == "v1"
    assert doc["groupVersion"] == "apps.example.io/v1alpha1"
    assert doc["resources"] == [
        {
            "name": "buckets",
            "singularName": "bucket",
            "namespaced": True,
            "kind": "Bucket",
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        },
        {
            "name": "postgress",
            "singularName": "postgres",
            "namespaced": True,
            "kind": "Postgres",
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": ["pg"],
            "categories": ["all", "apps"],
        },
    ]
    assert discovery.api_resource_list("apps.example.io", "v9", INFOS)["resources"] == []


def test_sort_versions() -> None:
    versions = ["v1alpha1", "v1beta1", "v1", "v2", "v1beta2", "v2alpha1", "foo", "v10"]
    assert discovery.sort_versions(versions) == [
        "v10",
        "v2",
        "v1",
        "v1beta2",
        "v1beta1",
        "v2alpha1",
        "v1alpha1",
        "foo",
    ]
