"""Sample data for the helm_agl unit tests: a definition stand-in, Applications and HelmReleases.

Flux statuses are the ones the real helm-controller v1.6.2 wrote, recorded in ``tests/data/status/``
(loaded, not copied), so the status projection is checked against what helm-controller really writes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from helm_agl.build import build
from helm_agl.definition import HelmDefinitionView
from helm_agl.names import GROUP, GROUP_LABEL, KIND_LABEL
from shared.admission import CompiledSchema, compile_schema
from shared.bodies import JSON
from tests.recorded import load_recorded

SCHEMA: JSON = {
    "type": "object",
    "required": ["version"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 1, "default": 2},
        "version": {"type": "string", "enum": ["v15", "v16"], "default": "v16"},
        "storage": {
            "type": "object",
            "default": {},
            "properties": {
                "size": {"type": "string", "default": "10Gi"},
                "class": {"type": "string"},
            },
        },
        "users": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"readonly": {"type": "boolean", "default": False}},
            },
        },
        "databases": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "owner": {"type": "string", "default": "admin"}},
            },
        },
        "external": {"type": "boolean", "default": False},
    },
}

HEALTH_CHECKS = [
    {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "current": "status.phase == 'Cluster in healthy state'",
        "failed": "status.phase == 'Failed'",
    }
]


@dataclass(frozen=True)
class FakeDefinition:
    """Stands in for helm_agl.definition's model; satisfies HelmDefinitionView."""

    kind: str = "Postgres"
    plural: str = "postgreses"
    singular: str = "postgres"
    prefix: str = "postgres-"
    release_labels: dict[str, str] = field(
        default_factory=lambda: {"cozystack.io/ui": "true", "internal.cozystack.io/tenantmodule": "false"}
    )
    chart_ref: dict[str, str] = field(
        default_factory=lambda: {
            "kind": "ExternalArtifact",
            "name": "cozystack-postgres",
            "namespace": "cozy-system",
        }
    )
    install_timeout: str | None = None
    upgrade_timeout: str | None = None
    disable_wait: bool = False
    wait_strategy: str | None = None
    health_check_exprs: list[dict[str, Any]] | None = None
    schema: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(SCHEMA))

    @property
    def rules(self) -> CompiledSchema:
        return compile_schema(self.schema)[0]


DEFN = FakeDefinition()


def _view(defn: HelmDefinitionView) -> HelmDefinitionView:
    """Type-level check that the fake satisfies the protocol."""
    return defn


_view(DEFN)


def make_app(
    name: str = "db1",
    namespace: str = "tenant-root",
    spec: Any = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resource_version: str | None = None,
    kind: str = "Postgres",
) -> JSON:
    meta: JSON = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    app: JSON = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": kind, "metadata": meta}
    if spec is not None:
        app["spec"] = spec
    return app


def load_status(phase: str) -> JSON:
    """The ``status`` helm-controller wrote at ``phase``: tests/data/status/helmrelease-<phase>.yaml."""
    status: JSON = load_recorded(f"helmrelease-{phase}")["status"]
    return status


def make_hr(
    defn: FakeDefinition = DEFN,
    name: str = "db1",
    namespace: str = "tenant-root",
    values: JSON | None = None,
    status: str | None = None,
    user_labels: dict[str, str] | None = None,
    user_annotations: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
    deleting: bool = False,
    generation: int | None = None,
) -> JSON:
    """A HelmRelease as it sits in the cluster: what we emit, plus server- and Flux-owned fields.

    Its ``generation`` is, unless given, the one the recorded ``status`` was written for
    (``lastAttemptedGeneration``), else 2."""
    hr = build(
        defn,
        make_app(
            name,
            namespace,
            spec=values if values is not None else {},
            labels=user_labels,
            annotations=user_annotations,
        ),
        group=GROUP,
    )
    meta = hr["metadata"]
    meta.update(
        {
            "uid": "5b0f8e0c-6a3e-4d0e-9f57-0f1f3c2a9b11",
            "resourceVersion": "48213",
            "generation": 2,
            "creationTimestamp": "2026-09-10T09:00:01Z",
            "finalizers": ["finalizers.fluxcd.io"],
            "managedFields": [{"manager": "helm-agl", "operation": "Update"}],
        }
    )
    meta["labels"].update(extra_labels or {})
    if extra_annotations:
        meta.setdefault("annotations", {}).update(extra_annotations)
    if deleting:
        meta["deletionTimestamp"] = "2026-09-10T11:00:00Z"
        meta["deletionGracePeriodSeconds"] = 0
    if status is not None:
        hr["status"] = load_status(status)
    if generation is not None:
        meta["generation"] = generation
    elif status is not None:
        meta["generation"] = hr["status"]["lastAttemptedGeneration"]
    return hr


#: HelmRelease label sets that do not make it an Application of DEFN's kind in GROUP.
FOREIGN_LABELS: list[dict[str, str]] = [
    {},
    {KIND_LABEL: "Postgres"},
    {GROUP_LABEL: "apps.cozystack.io"},
    {KIND_LABEL: "Redis", GROUP_LABEL: "apps.cozystack.io"},
    {KIND_LABEL: "Postgres", GROUP_LABEL: "tofu.apps.cozystack.io"},
]
