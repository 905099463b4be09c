"""ApplicationDefinition: the model helm_agl reads, the view translation needs, and acceptance.

The model parses the cluster object as cozystack writes it; fields this service does not use
(``dashboard``, ``secrets``/``services``/``ingresses`` selectors, anything newer cozystack adds)
are kept, so writing an object back never loses what its author wrote.  The pure modules
(``names``, ``validate``, ``build``, ``project``, ``rollout``) see a definition only through
:class:`HelmDefinitionView`, so they do not depend on how the model parses, and tests can hand
them a plain dataclass.  Acceptance is a pure function of the definition and its peers, so the
reconciler, the registry and tests all agree on which kinds are served (SPEC §1).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.admission import CompiledSchema
from shared.api.durations import DURATION
from shared.api.names import dns1035_label_error
from shared.schema.validation import parse_schema
from shared.service.acceptance import (
    INVALID_SCHEMA,
    Claim,
    Verdict,
    decide,
    format_time,
    spec_rules,
    spec_schema_problem,
)

from .names import MAX_RELEASE_NAME

API_VERSION = "cozystack.io/v1alpha1"
KIND = "ApplicationDefinition"

INSTALL_TIMEOUT_ANNOTATION = "release.cozystack.io/helm-install-timeout"
UPGRADE_TIMEOUT_ANNOTATION = "release.cozystack.io/helm-upgrade-timeout"
DISABLE_WAIT_ANNOTATION = "release.cozystack.io/helm-install-disable-wait"

#: Release names are ``prefix + name``: the prefix leaves room for at least one character of the
#: Application's name.
MAX_PREFIX = MAX_RELEASE_NAME - 1

PREFIX = re.compile(r"^[a-z0-9-]*$")
KIND_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")

# Condition reasons specific to Helm definitions (Accepted/InvalidSchema/KindConflict are shared).
INVALID_NAMES = "InvalidNames"
INVALID_RELEASE = "InvalidRelease"


class HelmDefinitionView(Protocol):
    """What the pure modules need to know about one accepted ApplicationDefinition.

    Read-only properties so that frozen dataclasses, pydantic models and plain objects all fit.
    """

    @property
    def kind(self) -> str: ...

    @property
    def plural(self) -> str: ...

    @property
    def singular(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def release_labels(self) -> dict[str, str]: ...

    @property
    def chart_ref(self) -> dict[str, str]:
        """``kind``, ``name``, ``namespace`` and optionally ``apiVersion``."""
        ...

    @property
    def install_timeout(self) -> str | None: ...

    @property
    def upgrade_timeout(self) -> str | None: ...

    @property
    def disable_wait(self) -> bool: ...

    @property
    def wait_strategy(self) -> str | None: ...

    @property
    def health_check_exprs(self) -> list[dict[str, Any]] | None: ...

    @property
    def schema(self) -> dict[str, Any]:
        """The parsed openAPISchema of ``.spec``."""
        ...

    @property
    def rules(self) -> CompiledSchema:
        """The schema's compiled ``x-kubernetes-validations`` (CEL) rules."""
        ...


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)


class Metadata(_Model):
    name: str
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    creation_timestamp: str | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("creation_timestamp", "deletion_timestamp", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return format_time(value) if isinstance(value, datetime) else value

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class Application(_Model):
    kind: str
    plural: str
    singular: str
    open_api_schema: str = Field(alias="openAPISchema")


class ChartRef(_Model):
    kind: str
    name: str
    namespace: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")


class Release(_Model):
    prefix: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    chart_ref: ChartRef = Field(alias="chartRef")
    wait_strategy: str | None = Field(default=None, alias="waitStrategy")
    health_check_exprs: list[dict[str, Any]] = Field(default_factory=list, alias="healthCheckExprs")

    @field_validator("labels", "health_check_exprs", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any, info: Any) -> Any:
        if value is None:
            return {} if info.field_name == "labels" else []
        return value


class Spec(_Model):
    application: Application
    release: Release
    secrets: dict[str, Any] | None = None
    services: dict[str, Any] | None = None
    ingresses: dict[str, Any] | None = None
    dashboard: dict[str, Any] | None = None


class ApplicationDefinition(_Model):
    """An ``ApplicationDefinition`` object; immutable, build a new one from each event."""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    object_kind: str = Field(default=KIND, alias="kind")
    metadata: Metadata
    spec: Spec
    status: dict[str, Any] | None = None

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Self:
        """Parse a cluster object; raises ``pydantic.ValidationError`` (a ValueError) if malformed."""
        return cls.model_validate(obj)

    def to_object(self) -> dict[str, Any]:
        """The object as JSON, with every field it was parsed from (unknown ones included)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")

    # -- identity -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def generation(self) -> int | None:
        return self.metadata.generation

    @property
    def creation_timestamp(self) -> str | None:
        return self.metadata.creation_timestamp

    @property
    def kind(self) -> str:
        """The served kind (``spec.application.kind``), not this object's kind."""
        return self.spec.application.kind

    @property
    def plural(self) -> str:
        return self.spec.application.plural

    @property
    def singular(self) -> str:
        return self.spec.application.singular

    @property
    def names(self) -> tuple[str, str, str]:
        return (self.kind, self.plural, self.singular)

    # -- schema ---------------------------------------------------------------------------

    @property
    def open_api_schema(self) -> str:
        return self.spec.application.open_api_schema

    @functools.cached_property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        """The parsed schema of ``.spec``; ``{}`` unless it is acceptable (the kind is then not
        served anyway).  Cached, so validators keyed on the dict are reused across requests."""
        if spec_schema_problem(self.open_api_schema) is not None:
            return {}
        return parse_schema(self.open_api_schema)

    @property
    def rules(self) -> CompiledSchema:
        """The compiled CEL rules of the schema, compiled once per schema text."""
        return spec_rules(self.open_api_schema)

    # -- release --------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return self.spec.release.prefix

    @property
    def release_labels(self) -> dict[str, str]:
        return dict(self.spec.release.labels)

    @property
    def chart_ref(self) -> dict[str, str]:
        """``{kind, name[, namespace][, apiVersion]}`` for ``HelmRelease.spec.chartRef``."""
        ref = self.spec.release.chart_ref
        out = {"kind": ref.kind, "name": ref.name}
        if ref.namespace:
            out["namespace"] = ref.namespace
        if ref.api_version:
            out["apiVersion"] = ref.api_version
        return out

    @property
    def install_timeout(self) -> str | None:
        """The install-timeout annotation as written, or None when unset or empty."""
        return self.metadata.annotations.get(INSTALL_TIMEOUT_ANNOTATION) or None

    @property
    def upgrade_timeout(self) -> str | None:
        """The upgrade timeout: the upgrade annotation, else the install annotation (which
        covers both actions, as in cozystack), else None."""
        return self.metadata.annotations.get(UPGRADE_TIMEOUT_ANNOTATION) or self.install_timeout

    @property
    def disable_wait(self) -> bool:
        raw = self.metadata.annotations.get(DISABLE_WAIT_ANNOTATION, "")
        return raw.strip().lower() == "true"

    @property
    def wait_strategy(self) -> str | None:
        return self.spec.release.wait_strategy or None

    @property
    def health_check_exprs(self) -> list[dict[str, Any]]:
        return [dict(expr) for expr in self.spec.release.health_check_exprs]

    def claim(self) -> Claim:
        return Claim(name=self.name, names=self.names, created=self.creation_timestamp)


# --------------------------------------------------------------------------- acceptance


def _intrinsic(defn: ApplicationDefinition) -> Verdict:
    """Everything about ``defn`` that does not depend on other definitions."""
    problem = spec_schema_problem(defn.open_api_schema)
    if problem:
        return Verdict.reject(INVALID_SCHEMA, problem)
    names = []
    if not KIND_NAME.fullmatch(defn.kind):
        names.append(f"kind {defn.kind!r} must match {KIND_NAME.pattern}")
    for field, value in (("plural", defn.plural), ("singular", defn.singular)):
        error = dns1035_label_error(value)
        if error:
            names.append(f"{field} {value!r}: {error}")
    if names:
        return Verdict.reject(INVALID_NAMES, "; ".join(names))
    release = _release_problems(defn)
    if release:
        return Verdict.reject(INVALID_RELEASE, "; ".join(release))
    return Verdict.ok(f"{defn.kind} is served as {defn.plural}")


def _release_problems(defn: ApplicationDefinition) -> list[str]:
    problems = []
    prefix = defn.prefix
    if not PREFIX.fullmatch(prefix):
        problems.append(f"release prefix {prefix!r} must match {PREFIX.pattern}")
    if len(prefix) > MAX_PREFIX:
        problems.append(
            f"release prefix {prefix!r} is {len(prefix)} characters; at most {MAX_PREFIX} leave room "
            f"for a name within the {MAX_RELEASE_NAME}-character release limit"
        )
    annotations = defn.metadata.annotations
    for key in (INSTALL_TIMEOUT_ANNOTATION, UPGRADE_TIMEOUT_ANNOTATION):
        value = annotations.get(key)
        if value and not DURATION.fullmatch(value):
            problems.append(f"annotation {key}={value!r} must match {DURATION.pattern}")
    wait = annotations.get(DISABLE_WAIT_ANNOTATION)
    if wait is not None and wait.strip().lower() not in ("", "true", "false"):
        problems.append(f'annotation {DISABLE_WAIT_ANNOTATION}={wait!r} must be "true" or "false"')
    return problems


def acceptance(defn: ApplicationDefinition, others: Iterable[ApplicationDefinition]) -> Verdict:
    """Whether ``defn``'s kind is served, given the other live definitions.

    Reasons: ``Accepted``; ``InvalidSchema`` (openAPISchema not JSON, not an object, not a
    usable JSON schema, or not describing an object); ``InvalidNames``; ``InvalidRelease``
    (prefix pattern or length, malformed release annotations); ``KindConflict`` (kind, plural
    or singular already served by an older valid definition; ties broken by name).
    """
    peers = [(o.claim(), functools.partial(_intrinsic, o)) for o in others if o.name != defn.name]
    return decide(defn.claim(), _intrinsic(defn), peers)
