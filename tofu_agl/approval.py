"""Manual plan approval through the ``tofu.apps.cozystack.io/approve-plan`` annotation (SPEC §3).

The annotation is a *command*: setting it (or changing its value) asks the server to approve one
plan.  The server accepts only the pending plan's full id — tofu-controller would also apply a
plan whose id merely starts with ``approvePlan``, and we never approve a plan the user has not
named exactly.  Re-applying a manifest that still carries an earlier value is not a new command
and is ignored, so GitOps tools can keep the annotation without blocking updates.

Consequence worth documenting: tofu-controller derives plan ids from the source revision only, so
a later plan at the same revision can have the *same* id.  To approve it, remove the annotation
and set it again (``kubectl annotate ... approve-plan-`` then the command shown in the status);
re-setting an unchanged value is a no-op in Kubernetes and cannot be told from a re-apply.
"""

from __future__ import annotations

from typing import Any

from shared.api import errors
from shared.bodies import JSON
from tofu_agl.status import pending_plan
from tofu_agl.translate import (
    APPROVE_ANNOTATION,
    DEFAULT_GROUP,
    LABEL_GROUP,
    LABEL_KIND,
    LABEL_NAME,
    USER_PREFIX,
)

FIELD = f"metadata.annotations[{APPROVE_ANNOTATION}]"


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def check_approval(
    app_annotations: dict[str, str] | None,
    tf: JSON | None,
    *,
    group: str | None = None,
    kind: str | None = None,
    name: str | None = None,
) -> str | None:
    """The plan id to write into ``spec.approvePlan``, or None when there is nothing to approve.

    ``app_annotations`` are the annotations of the Application being written; ``tf`` the live
    Terraform (None on create).  Returns None when the annotation is absent, unchanged from the
    value recorded on the Terraform, or already written to ``spec.approvePlan``.  Raises a 422
    naming the pending plan when a new value is not exactly its id (wrong, abbreviated, already
    applied, or nothing pending).  ``group``/``kind``/``name`` label the error; by default they
    come from the Terraform's application labels.
    """
    value = (app_annotations or {}).get(APPROVE_ANNOTATION)
    if value is None:
        return None
    meta = _dict((tf or {}).get("metadata"))
    recorded = _dict(meta.get("annotations")).get(USER_PREFIX + APPROVE_ANNOTATION)
    if value == recorded:
        return None
    current = _dict((tf or {}).get("spec")).get("approvePlan") or ""
    pending = pending_plan(tf) if tf is not None else ""
    if value and value == current and value == pending:
        return None
    if value and value == pending:
        return value

    labels = _dict(meta.get("labels"))
    group = group or labels.get(LABEL_GROUP) or DEFAULT_GROUP
    kind = kind or labels.get(LABEL_KIND) or "Application"
    name = name or labels.get(LABEL_NAME) or ""
    raise errors.invalid(group, kind, name, [errors.field_cause(FIELD, _why(value, pending, tf))])


def _why(value: str, pending: str, tf: JSON | None) -> str:
    if not pending:
        return (
            f'Invalid value: "{value}": no plan is waiting for approval, so there is nothing to approve; '
            "remove the annotation or wait until the status shows a pending plan"
        )
    last_applied = _dict(_dict((tf or {}).get("status")).get("plan")).get("lastApplied")
    if value == last_applied:
        detail = f'plan "{value}" was already applied'
    elif value and pending.startswith(value):
        detail = "the full plan id is required"
    else:
        detail = f'plan "{value}" is not (or no longer) the pending plan'
    return f'Invalid value: "{value}": {detail}; the pending plan is "{pending}"'
