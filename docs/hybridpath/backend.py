"""Draft 2's ``Backend`` interface as a ``typing.Protocol``, with both Draft 1 stacks bound to it.

The proposal (seed 000, "Draft 2 — The interface") names six methods.  This module writes them down as
a Protocol together with what the two working stacks show the interface also needs, and binds each
stack's *real* functions to it: :class:`HelmBackend` and :class:`TofuBackend` hold references only, no
logic.  ``mypy --strict`` (run by ``nox -s tests``) then checks structurally that each stack satisfies
the Protocol; a change to a stack's function that the interface cannot express fails type checking.
Neither stack imports this module, so the two packages stay independent (the Draft 1 shape), and
``docs/design/hybrid-path.md`` is generated from these classes (section c).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import helm_agl.build
import helm_agl.definition
import helm_agl.names
import helm_agl.project
import helm_agl.rollout
import helm_agl.validate
import tofu_agl.build
import tofu_agl.definition
import tofu_agl.names
import tofu_agl.project
import tofu_agl.rollout
import tofu_agl.validate
from shared.api.rest import Column
from shared.bodies import JSON
from shared.service.acceptance import Verdict

Definition = TypeVar("Definition", contravariant=True)


@dataclass(frozen=True)
class Target:
    """What ``TargetGVK()`` returns, plus the plural: both stacks' clients address a resource."""

    group: str
    version: str
    plural: str
    kind: str


class Backend(Protocol[Definition]):
    """One backend of the Application Generation Layer, as the two Draft 1 stacks need it.

    The first six members are Draft 2's methods (:data:`DRAFT2` maps them); the rest are what the
    real code needs beyond them (section c of the hybrid-path document explains each).
    """

    @property
    def type(self) -> str:
        """The backend's name in ``spec.backend.type``."""

    @property
    def target(self) -> Target:
        """The backing object's group, version, plural and kind."""

    def target_name(self, defn: Definition, name: str, /) -> str:
        """The backing object's name for Application ``name``."""

    def build(
        self, defn: Definition, app: Mapping[str, Any], /, *, group: str, live: Mapping[str, Any] | None = None
    ) -> JSON:
        """The backing object for ``app``; on update ``live`` keeps what the controller owns."""

    def project(self, defn: Definition, target: Mapping[str, Any], /, *, group: str) -> JSON | None:
        """The whole Application (metadata, spec read back, status) for a backing object."""

    def rollout_patch(self, defn: Definition, target: Mapping[str, Any], /, *,
                      group: str) -> tuple[JSON | None, list[str]]:
        """The merge patch that rolls a definition change out to one backing object, and the fields kept."""

    def application_name(self, defn: Definition, target_name: str, /) -> str | None:
        """The inverse of :meth:`target_name`: reads start from the backing object."""

    def selector(self, defn: Definition, group: str, /) -> str:
        """The label selector of one kind's backing objects (direct lists, rollout, reconciler)."""

    def watched_selector(self, defn: Definition, group: str, /) -> str:
        """What the kind's watch cache watches: its backing objects and its read fence."""

    def fence(self, defn: Definition, /, *, group: str) -> JSON:
        """The kind's read fence: a target object its controller ignores, written to prove the cache current."""

    def owns(self, obj: Mapping[str, Any], kind: str, group: str, /) -> bool:
        """Whether a backing object is an Application of ``kind`` in ``group``."""

    def validate(
        self, defn: Definition, app: Mapping[str, Any], /, *, group: str, live: Mapping[str, Any] | None = None
    ) -> None:
        """Reject (400/422 ``Status``) an Application that must not be written, before any write."""

    def accept(self, defn: Definition, others: Iterable[Definition], /) -> Verdict:
        """Whether a definition's kind can be served, given the other definitions of the backend."""

    @property
    def columns(self) -> tuple[Column, ...]:
        """The kind's ``kubectl get`` columns."""

    def table_cells(self, app: Mapping[str, Any], /) -> list[Any]:
        """One Table row's cells for an Application."""


#: Draft 2's six methods (Go signatures as the proposal states them) and the Protocol member for each.
DRAFT2: dict[str, tuple[str, str]] = {
    "Type": ("type", 'Type() Type  // "Helm" | "Terraform"'),
    "TargetGVK": ("target", "TargetGVK() schema.GroupVersionKind"),
    "TargetName": ("target_name", "TargetName(appName string, def *ApplicationDefinition) string"),
    "Build": ("build", "Build(ctx, app *Application, def *ApplicationDefinition) (client.Object, error)"),
    "ProjectStatus": ("project", "ProjectStatus(target client.Object) (ApplicationStatus, error)"),
    "Reconcile": ("rollout_patch",
                  "Reconcile(ctx, c client.Client, target client.Object, def *ApplicationDefinition) "
                  "(updated bool, err error)"),
}


class HelmBackend:
    """helm_agl's functions under the Protocol's names (references only)."""

    type = "Helm"
    target = Target(helm_agl.names.HR_GROUP, helm_agl.names.HR_VERSION, helm_agl.names.HR_PLURAL,
                    helm_agl.names.HR_KIND)
    columns = helm_agl.project.COLUMNS
    target_name = staticmethod(helm_agl.names.backing_name)
    application_name = staticmethod(helm_agl.names.application_name)
    selector = staticmethod(helm_agl.names.backing_selector)
    watched_selector = staticmethod(helm_agl.names.watched_selector)
    fence = staticmethod(helm_agl.build.fence)
    owns = staticmethod(helm_agl.names.is_application)
    validate = staticmethod(helm_agl.validate.validate_application)
    build = staticmethod(helm_agl.build.build)
    project = staticmethod(helm_agl.project.to_application)
    table_cells = staticmethod(helm_agl.project.table_cells)
    rollout_patch = staticmethod(helm_agl.rollout.rollout_patch)
    accept = staticmethod(helm_agl.definition.acceptance)


class TofuBackend:
    """tofu_agl's functions under the Protocol's names (references only)."""

    type = "Terraform"
    target = Target(tofu_agl.names.TF_GROUP, tofu_agl.names.TF_VERSION, tofu_agl.names.TF_PLURAL,
                    tofu_agl.names.TF_KIND)
    columns = tofu_agl.project.COLUMNS
    target_name = staticmethod(tofu_agl.names.backing_name)
    application_name = staticmethod(tofu_agl.names.application_name)
    selector = staticmethod(tofu_agl.names.backing_selector)
    watched_selector = staticmethod(tofu_agl.names.watched_selector)
    fence = staticmethod(tofu_agl.build.fence)
    owns = staticmethod(tofu_agl.names.is_application)
    validate = staticmethod(tofu_agl.validate.validate_application)
    build = staticmethod(tofu_agl.build.build)
    project = staticmethod(tofu_agl.project.to_application)
    table_cells = staticmethod(tofu_agl.project.table_cells)
    rollout_patch = staticmethod(tofu_agl.rollout.rollout_patch)
    accept = staticmethod(tofu_agl.definition.acceptance)


# The structural checks: mypy --strict fails here when a stack stops satisfying the interface.
HELM: Backend[helm_agl.definition.ApplicationDefinition] = HelmBackend()
TOFU: Backend[tofu_agl.definition.TofuApplicationDefinition] = TofuBackend()
