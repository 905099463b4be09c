"""Legacy (unaggregated) discovery documents: ``/apis``, ``/apis/<g>``, ``/apis/<g>/<v>``.

kube-apiserver's aggregator and kubectl both fall back to these documents when a server does not
answer aggregated discovery, and kubectl builds its REST mapper (kind <-> resource, short names,
categories, verbs) from them, so their shape has to be exactly the ``meta/v1`` one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from shared.api.rest import ResourceInfo
from shared.bodies import JSON

#: Everything our REST handlers serve; sorted, as kube-apiserver lists them.
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

_KUBE_VERSION = re.compile(r"^v([0-9]+)(?:(alpha|beta)([0-9]+))?$")


def _version_key(version: str) -> tuple[int, int, int, str]:
    # kube's version priority: GA > beta > alpha, higher numbers first; other strings last.
    m = _KUBE_VERSION.fullmatch(version)
    if m is None:
        return (3, 0, 0, version)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, version)


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Versions by Kubernetes priority (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > others)."""
    return sorted(set(versions), key=_version_key)


def _group_versions(infos: Iterable[ResourceInfo], extra: Iterable[tuple[str, str]] = ()) -> dict[str, list[str]]:
    by_group: dict[str, set[str]] = {}
    for info in infos:
        by_group.setdefault(info.group, set()).add(info.version)
    for group, version in extra:
        by_group.setdefault(group, set()).add(version)
    return {g: sort_versions(vs) for g, vs in sorted(by_group.items())}


def _group_doc(group: str, versions: list[str]) -> JSON:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(infos: Iterable[ResourceInfo], extra: Iterable[tuple[str, str]] = ()) -> JSON:
    """``/apis``: every group with at least one served resource (or explicitly kept in ``extra``)."""
    groups = [_group_doc(g, vs) for g, vs in _group_versions(infos, extra).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str, infos: Iterable[ResourceInfo], extra: Iterable[tuple[str, str]] = ()) -> JSON | None:
    """``/apis/<group>``, or None when the group is not served (the caller answers 404)."""
    versions = _group_versions([i for i in infos if i.group == group], [e for e in extra if e[0] == group])
    if group not in versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions[group])}


def api_resource(info: ResourceInfo) -> JSON:
    """One ``APIResource`` entry; empty short names/categories are omitted as Go's omitempty does."""
    entry: JSON = {
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": list(VERBS),
    }
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    return entry


def subresource_entries(info: ResourceInfo) -> list[JSON]:
    """The ``APIResource`` entries of a resource's read-only subresources (``<plural>/<sub>``, verb get)."""
    return [
        {"name": f"{info.plural}/{sub}", "singularName": "", "namespaced": info.namespaced, "kind": info.kind,
         "verbs": ["get"]}
        for sub in info.read_only_subresources
    ]


def api_resource_list(group: str, version: str, infos: Iterable[ResourceInfo]) -> JSON:
    """``/apis/<group>/<version>``: the resources of that group version (each followed by its subresources)."""
    selected = sorted((i for i in infos if i.group == group and i.version == version), key=lambda i: i.plural)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [entry for i in selected for entry in (api_resource(i), *subresource_entries(i))],
    }
