"""TofuApplicationDefinition: the model tofu_agl reads, the view the pure modules need, and acceptance.

Shaped like helm_agl's on purpose (Draft 1 duplicates so Draft 2 can extract the common
interface from real code).  Beyond the Helm rules, a Tofu kind is only served when every
schema property maps to a usable, unique OpenTofu name and the outputs Secret template uses only
known placeholders: both would otherwise fail per instance, long after the author moved on.  Nor
is it served when its ``backendConfig`` would put every instance in one state (SPEC §3: state is
per instance, always): see :func:`state_suffix_problem`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.admission import CompiledSchema
from shared.api.names import dns1035_label_error, dns1123_subdomain_error
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
from tofu_agl.names import MAX_TERRAFORM_NAME
from tofu_agl.variables import naming_problems

API_VERSION = "cozystack.io/v1alpha1"
KIND = "TofuApplicationDefinition"

#: Terraform names are ``prefix + name``: the prefix must leave room for at least one character
#: of the Application's name.
MAX_PREFIX = MAX_TERRAFORM_NAME - 1

PREFIX = re.compile(r"^[a-z0-9-]*$")
KIND_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
PLACEHOLDERS = ("name", "namespace", "kind")
_PLACEHOLDER = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ANY_ACTION = re.compile(r"\{\{.*?\}\}", re.DOTALL)

INVALID_NAMES = "InvalidNames"
INVALID_RELEASE = "InvalidRelease"
INVALID_PLACEHOLDER = "InvalidPlaceholder"
INVALID_VARIABLE_NAME = "InvalidVariableName"
SHARED_STATE_SUFFIX = "SharedStateSuffix"

#: ``backendConfig`` keys that decide where tofu-controller keeps an instance's state: with a
#: (non-empty) custom configuration it writes that verbatim and ignores the suffix; otherwise it
#: writes a kubernetes backend whose state Secret, in the Terraform's namespace, is
#: ``tfstate-<workspace>-<secretSuffix>``.
SECRET_SUFFIX = "secretSuffix"
CUSTOM_CONFIGURATION = "customConfiguration"


class TofuDefinitionView(Protocol):
    """What the pure modules need from a TofuApplicationDefinition (read-only view).

    ``names``, ``validate``, ``build``, ``project`` and ``rollout`` see a definition only through
    this protocol, so they do not depend on how the model parses and tests can hand them a plain
    dataclass.
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
    def schema(self) -> dict[str, Any]: ...
    @property
    def rules(self) -> CompiledSchema:
        """The schema's compiled ``x-kubernetes-validations`` (CEL) rules."""
    @property
    def terraform(self) -> Terraform:
        """``spec.terraform``, each field declared once, on the model (:class:`Terraform`)."""

    def render_outputs_secret_name(self, name: str, namespace: str, kind: str) -> str: ...


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


class Release(_Model):
    prefix: str = ""
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class SourceRef(_Model):
    kind: str
    name: str
    namespace: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")

    def as_ref(self) -> dict[str, str]:
        """``{kind, name[, namespace][, apiVersion]}`` for ``Terraform.spec.sourceRef``."""
        out = {"kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.api_version:
            out["apiVersion"] = self.api_version
        return out


class OutputsSecret(_Model):
    name: str
    outputs: list[str] = Field(default_factory=list)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Terraform(_Model):
    """``spec.terraform``: snake_case attributes, camelCase JSON."""

    source_ref: SourceRef = Field(alias="sourceRef")
    path: str | None = None
    interval: str = "10m"
    retry_interval: str | None = Field(default=None, alias="retryInterval")
    approve_plan: Literal["auto", "manual"] = Field(default="auto", alias="approvePlan")
    destroy_resources_on_deletion: bool = Field(default=False, alias="destroyResourcesOnDeletion")
    write_outputs_to_secret: OutputsSecret | None = Field(default=None, alias="writeOutputsToSecret")
    variable_naming: Literal["snake_case", "verbatim"] = Field(default="snake_case", alias="variableNaming")
    service_account_name: str | None = Field(default=None, alias="serviceAccountName")
    allow_service_account_override: bool = Field(default=False, alias="allowServiceAccountOverride")
    runner_pod_template: dict[str, Any] | None = Field(default=None, alias="runnerPodTemplate")
    backend_config: dict[str, Any] | None = Field(default=None, alias="backendConfig")
    workspace: str | None = None
    store_readable_plan: Literal["none", "json", "human"] | None = Field(
        default=None, alias="storeReadablePlan"
    )
    vars_from: list[dict[str, Any]] | None = Field(default=None, alias="varsFrom")


class Spec(_Model):
    application: Application
    release: Release = Field(default_factory=Release)
    terraform: Terraform
    dashboard: dict[str, Any] | None = None


class TofuApplicationDefinition(_Model):
    """A ``TofuApplicationDefinition`` object; immutable, build a new one from each event."""

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

    # -- terraform ------------------------------------------------------------------------

    @property
    def terraform(self) -> Terraform:
        return self.spec.terraform

    def render_outputs_secret_name(self, name: str, namespace: str, kind: str) -> str:
        """The outputs Secret name for one Application.

        ``{{ .name }}`` and ``{{ .namespace }}`` render as given; ``{{ .kind }}`` renders
        lowercased (as in cozystack's resourceNames templates) so the result can be a Secret
        name.  Raises ``ValueError`` when the definition writes no outputs Secret or the
        template has an unknown placeholder (acceptance rejects such definitions).
        """
        spec = self.terraform.write_outputs_to_secret
        if spec is None:
            raise ValueError(f"{self.name}: spec.terraform.writeOutputsToSecret is not set")
        return render_template(spec.name, placeholder_values(name, namespace, kind))

    def claim(self) -> Claim:
        return Claim(name=self.name, names=self.names, created=self.creation_timestamp)


# --------------------------------------------------------------------------- templates


def template_problem(template: str) -> str | None:
    """Why ``template`` is not a name template with only known placeholders, or None."""
    unknown = []
    rest = template
    for action in _ANY_ACTION.findall(template):
        match = _PLACEHOLDER.fullmatch(action)
        if match is None or match.group(1) not in PLACEHOLDERS:
            unknown.append(action)
        rest = rest.replace(action, "", 1)
    if unknown:
        known = ", ".join("{{ ." + p + " }}" for p in PLACEHOLDERS)
        return f"unknown placeholder(s) {', '.join(unknown)} in {template!r}; known: {known}"
    if "{{" in rest or "}}" in rest:
        return f"unbalanced braces in {template!r}"
    return None


def render_template(template: str, values: dict[str, str]) -> str:
    """Substitute ``{{ .key }}`` placeholders; raises ``ValueError`` on an unknown one."""
    problem = template_problem(template)
    if problem:
        raise ValueError(problem)
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def placeholder_values(name: str, namespace: str, kind: str) -> dict[str, str]:
    """What the placeholders of a definition's templates stand for, for one Application; ``.kind`` is
    lowercased (as in cozystack's resourceNames templates) so the result can be part of a name."""
    return {"name": name, "namespace": namespace, "kind": kind.lower()}


def state_suffix_template(backend_config: dict[str, Any] | None) -> str | None:
    """The definition's ``backendConfig.secretSuffix`` when tofu-controller would use it, else None.

    None without a backendConfig (tofu-controller then names the state after the Terraform itself),
    with a ``customConfiguration`` (written verbatim, the suffix is ignored: the platform engineer owns
    where state goes) and with no or an empty suffix (tofu_agl sets the Terraform's name, see
    :func:`tofu_agl.build.state_backend_config`).
    """
    if not backend_config or backend_config.get(CUSTOM_CONFIGURATION):
        return None
    suffix = backend_config.get(SECRET_SUFFIX)
    return str(suffix) if suffix else None


# --------------------------------------------------------------------------- acceptance


def _intrinsic(defn: TofuApplicationDefinition) -> Verdict:
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
    outputs = defn.terraform.write_outputs_to_secret
    if outputs is not None:
        problem = _outputs_problem(defn, outputs.name)
        if problem:
            return Verdict.reject(INVALID_PLACEHOLDER, problem)
    suffix = state_suffix_template(defn.terraform.backend_config)
    if suffix is not None:
        refused = _state_suffix_verdict(defn, suffix)
        if refused is not None:
            return refused
    variables = naming_problems(defn.schema, defn.terraform.variable_naming)
    if variables:
        return Verdict.reject(INVALID_VARIABLE_NAME, "; ".join(variables))
    return Verdict.ok(f"{defn.kind} is served as {defn.plural}")


def _release_problems(defn: TofuApplicationDefinition) -> list[str]:
    problems = []
    prefix = defn.prefix
    if not PREFIX.fullmatch(prefix):
        problems.append(f"release prefix {prefix!r} must match {PREFIX.pattern}")
    if len(prefix) > MAX_PREFIX:
        problems.append(
            f"release prefix {prefix!r} is {len(prefix)} characters; at most {MAX_PREFIX} leave room "
            f"for a name within the {MAX_TERRAFORM_NAME}-character Terraform name limit"
        )
    return problems


def _outputs_problem(defn: TofuApplicationDefinition, template: str) -> str | None:
    problem = template_problem(template)
    if problem:
        return f"spec.terraform.writeOutputsToSecret.name: {problem}"
    # Render with a one-letter name and namespace: if even that is not a Secret name, no
    # Application could ever get its outputs.
    sample = render_template(template, placeholder_values("a", "a", defn.kind))
    error = dns1123_subdomain_error(sample)
    if error:
        return (
            f"spec.terraform.writeOutputsToSecret.name {template!r} cannot render to a Secret name: {error}"
        )
    return None


def state_suffix_problem(template: str) -> str | None:
    """Why a ``backendConfig.secretSuffix`` would put several instances in one state, or None.

    The state Secret lives in the Terraform's namespace, so a suffix is per instance exactly when it
    renders differently for every Application name: when it contains ``{{ .name }}``.  A literal
    suffix, or one made of ``{{ .namespace }}``/``{{ .kind }}`` only, is the same for many
    instances: they would plan against one state, and deleting one would destroy the others'
    infrastructure.
    """
    if "name" in _PLACEHOLDER.findall(template):
        return None
    return (
        f"spec.terraform.backendConfig.secretSuffix {template!r} is the same for every instance of the kind "
        "in a namespace, so they would all share one OpenTofu state (and deleting one would destroy the "
        "others' infrastructure); remove secretSuffix to get one state per instance (tofu_agl then uses "
        "the Terraform's name), or make it per instance with {{ .name }}"
    )


def _state_suffix_verdict(defn: TofuApplicationDefinition, template: str) -> Verdict | None:
    """The refusal of a ``backendConfig.secretSuffix`` template tofu-controller would use, or None."""
    problem = template_problem(template)
    if problem:
        return Verdict.reject(INVALID_PLACEHOLDER, f"spec.terraform.backendConfig.secretSuffix: {problem}")
    problem = state_suffix_problem(template)
    if problem:
        return Verdict.reject(SHARED_STATE_SUFFIX, problem)
    # As for the outputs Secret: if a one-letter name cannot make a state Secret name, none can.
    sample = render_template(template, placeholder_values("a", "a", defn.kind))
    secret = f"tfstate-{defn.terraform.workspace or 'default'}-{sample}"
    error = dns1123_subdomain_error(secret)
    if error:
        return Verdict.reject(INVALID_PLACEHOLDER, (
            f"spec.terraform.backendConfig.secretSuffix {template!r} cannot make a state Secret name "
            f"(tfstate-<workspace>-<suffix>, here {secret!r}): {error}"))
    return None


def acceptance(defn: TofuApplicationDefinition, others: Iterable[TofuApplicationDefinition]) -> Verdict:
    """Whether ``defn``'s kind is served, given the other live definitions.

    Reasons: ``Accepted``; ``InvalidSchema``; ``InvalidNames``; ``InvalidRelease`` (prefix);
    ``InvalidPlaceholder`` (outputs Secret template, or ``backendConfig.secretSuffix`` template);
    ``SharedStateSuffix`` (a ``backendConfig.secretSuffix`` without ``{{ .name }}``: every
    instance would share one state); ``InvalidVariableName`` (a property name
    that is not a valid, unique, non-reserved OpenTofu name after ``variableNaming``; the
    message names the keys); ``KindConflict`` (names already served by an older valid
    definition; ties broken by name).
    """
    peers = [(o.claim(), functools.partial(_intrinsic, o)) for o in others if o.name != defn.name]
    return decide(defn.claim(), _intrinsic(defn), peers)
