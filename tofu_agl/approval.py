"""Manual plan approval through the ``tofu.apps.cozystack.io/approve-plan`` annotation (SPEC §3).

Every decision about ``spec.approvePlan`` is made here and only here: whether a write's approval
is acceptable (:func:`check_approval`, called by validation), which plan it approves
(:func:`approved_plan`), what a rebuilt Terraform carries (:func:`approve_plan`, called by the
builder) and what a definition rollout keeps (:func:`kept_approval`).

The annotation is a *command*: setting it (or changing its value) asks the server to approve one
plan.  The server accepts only the pending plan's full id — tofu-controller would also apply a
plan whose id merely starts with ``approvePlan``, and we never approve a plan the user has not
named exactly.  Re-applying a manifest that still carries an earlier value is not a new command
and is ignored, so GitOps tools can keep the annotation without blocking updates.

Consequence worth documenting: tofu-controller derives plan ids from the source revision only, so
a later plan at the same revision usually has the *same* id.  That is why an approval is kept only
while the variables stay the same, and why approving and changing the spec in one request is
refused.  A later plan with an unchanged id cannot be approved by setting the annotation to the
value it already holds (that is no change, and cannot be told from a re-applied manifest), so the
AwaitingApproval status then prints a command that removes the annotation and sets it again
(:func:`tofu_agl.project.approval_command`): two real changes, the second a new command.  An
approval kept in git is therefore never reused for a plan nobody saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.api import errors, goformat
from shared.api.attributes import ResourceAttributes
from shared.api.rest import RequestContext, ResourceInfo
from shared.service.kindroles import APPROVE_VERB

from .definition import TofuDefinitionView
from .names import APPROVE_ANNOTATION, AUTO, user_selector_key
from .project import pending_plan

FIELD = f"metadata.annotations[{APPROVE_ANNOTATION}]"


async def require_approve_permission(
    ctx: RequestContext, info: ResourceInfo, namespace: str, app: Mapping[str, Any], live: Mapping[str, Any] | None
) -> None:
    """Raise kube-apiserver's 403 unless the user may ``approve`` the kind when ``app`` sets or changes approval.

    Approving lets real infrastructure change, so it is a permission of its own (as approving a
    CertificateSigningRequest is), checked with a SubjectAccessReview before anything else about
    the write: an editor learns which permission is missing and nothing is written.  Removing the
    annotation, or keeping the value already recorded (a re-applied manifest), approves nothing
    and needs only the write's own verb: that is the first half of the printed two-step command,
    and what an editor does to withdraw an approval it does not want to keep in git.
    """
    if _requested(app, live) is None:
        return
    name = str((app.get("metadata") or {}).get("name") or "") or None
    await ctx.require(ResourceAttributes(APPROVE_VERB, info.group, info.version, info.plural, namespace, name))


def check_approval(
    defn: TofuDefinitionView,
    app: Mapping[str, Any],
    live: Mapping[str, Any] | None,
    *,
    group: str,
    tf_vars: list[dict[str, Any]],
) -> None:
    """Raise a 422 unless the approval ``app`` requests, if any, may be written.

    ``live`` is the Terraform being updated (None on create: nothing can be pending on an object
    that does not exist yet) and ``tf_vars`` the variables the write would give it.  A new value
    must be exactly the pending plan's id (not abbreviated, not an applied plan); under manual
    approval it must also not come with changed variables, because the id names a plan computed
    for the old ones and the new ones would most likely get the same id, so the approval would
    apply a plan nobody saw.
    """
    value = _requested(app, live)
    if value is None:
        return
    name = str((app.get("metadata") or {}).get("name") or "")
    pending = pending_plan(live) if live is not None else ""
    if not value or value != pending:
        raise errors.invalid(group, defn.kind, name, [errors.field_cause(FIELD, _why(value, pending, live))])
    if defn.terraform.approve_plan != AUTO and live is not None and not vars_equal(live, tf_vars):
        message = (f'cannot approve plan "{value}" in the same request that changes spec: '
                   "change the spec first, then approve the plan made for it")
        raise errors.invalid(group, defn.kind, name, [errors.field_cause(FIELD, message, "FieldValueForbidden")])


def approved_plan(app: Mapping[str, Any], live: Mapping[str, Any] | None) -> str | None:
    """The plan id a write (accepted by :func:`check_approval`) approves, None when it approves none."""
    return _requested(app, live) or None


def approve_plan(
    defn: TofuDefinitionView, app: Mapping[str, Any], live: Mapping[str, Any] | None, tf_vars: list[dict[str, Any]]
) -> str:
    """``spec.approvePlan`` of the Terraform built for ``app``.

    ``auto`` under auto approval; otherwise the id this write approves, or the approval already
    on ``live`` while it still names the pending plan *and the variables did not change*, or
    ``""`` (nothing approved).
    """
    if defn.terraform.approve_plan == AUTO:
        return AUTO
    approved = approved_plan(app, live)
    if approved:
        return approved
    if live is not None and vars_equal(live, tf_vars):
        return kept_approval(defn, live)
    return ""


def kept_approval(defn: TofuDefinitionView, live: Mapping[str, Any]) -> str:
    """``spec.approvePlan`` a definition rollout leaves on an existing Terraform.

    Switching a definition to auto makes the pending plans apply: that is what "auto" means.
    Under manual approval only an approval of the plan pending right now is kept.
    """
    if defn.terraform.approve_plan == AUTO:
        return AUTO
    current = (live.get("spec") or {}).get("approvePlan") or ""
    return str(current) if current and current != AUTO and current == pending_plan(live) else ""


def vars_equal(live: Mapping[str, Any], tf_vars: list[dict[str, Any]]) -> bool:
    """Whether a live Terraform already carries ``tf_vars`` (an omitted value counts as null)."""

    def norm(items: Any) -> list[tuple[Any, Any]]:
        return [(i.get("name"), i.get("value")) for i in items or [] if isinstance(i, dict)]

    return norm((live.get("spec") or {}).get("vars")) == norm(tf_vars)


def _requested(app: Mapping[str, Any], live: Mapping[str, Any] | None) -> str | None:
    """The value of a *new* approve-plan command on ``app``, None when there is none.

    None when the annotation is absent, unchanged from the value recorded on the Terraform (a
    re-applied manifest), or already written to ``spec.approvePlan`` for the pending plan.
    """
    annotations = (app.get("metadata") or {}).get("annotations")
    value = annotations.get(APPROVE_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(value, str):
        return None
    live = live or {}
    recorded = ((live.get("metadata") or {}).get("annotations") or {}).get(user_selector_key(APPROVE_ANNOTATION))
    if value == recorded:
        return None
    current = (live.get("spec") or {}).get("approvePlan") or ""
    if value and value == current and value == pending_plan(live):
        return None
    return value


def _why(value: str, pending: str, live: Mapping[str, Any] | None) -> str:
    if not pending:
        return (
            f"Invalid value: {goformat.quote(value)}: no plan is waiting for approval, so there is nothing to approve; "
            "remove the annotation or wait until the status shows a pending plan"
        )
    last_applied = (((live or {}).get("status") or {}).get("plan") or {}).get("lastApplied")
    if value == last_applied:
        detail = f"plan {goformat.quote(value)} was already applied"
    elif value and pending.startswith(value):
        detail = "the full plan id is required"
    else:
        detail = f"plan {goformat.quote(value)} is not (or no longer) the pending plan"
    return f"Invalid value: {goformat.quote(value)}: {detail}; the pending plan is {goformat.quote(pending)}"
