"""Plan preview: a pending plan as tofu-controller keeps it, read back as a summary and a redacted readable plan.

A tenant asked to approve a plan must be able to read it.  tofu-controller (v0.16.5) keeps a
readable copy when the Terraform sets ``spec.storeReadablePlan`` (runner/server_save_tfplan.go,
``SaveTFPlan``; the objects are built by api/plan/plan.go, ``ToConfigMap`` and ``ToSecret``):

- ``human``: a ConfigMap ``tfplan-<workspace>-<name>`` in the Terraform's namespace whose
  ``data.tfplan`` is the text of ``tofu show -no-color <plan>`` (OpenTofu already prints
  ``(sensitive value)`` for sensitive values);
- ``json``: a Secret ``tfplan-<workspace>-<name>.json`` whose ``data.tfplan`` is the gzip of
  ``tofu show -json <plan>`` (which does carry sensitive values, marked, so they are redacted here).

Both carry the labels ``infra.contrib.fluxcd.io/plan-name`` (``<name>`` or ``<name>.json``, made a
safe label value) and ``infra.contrib.fluxcd.io/plan-workspace``, and the annotation ``savedPlan``
with the plan id; a plan above 1 MiB is split into objects named ``<that name>-<i>`` (``i`` from 0)
with the annotation ``infra.contrib.fluxcd.io/plan-chunk`` (api/plan/plan.go builds the names as
``fmt.Sprintf("tfplan-%s-%s", workspace, name+suffix)``).  The names being known, the service reads
them with ``get`` by exact name (:mod:`tofu_agl.plan_read`): it holds no ``list`` on Secrets or
ConfigMaps.  The binary plan tofu-controller always stores (Secret
``tfplan-<workspace>-<name>``) is not readable without OpenTofu and is never read here.

The summary comes from what the controller wrote: the JSON plan's ``resource_changes`` when it
keeps JSON, else the human plan's own ``Plan: N to add, ...`` line and its ``# <address> will be
...`` headings.  Everything here is pure: the storage does the reading.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.bodies import JSON

from .variables import SENSITIVE

#: The read-only subresource of every Tofu kind that serves the readable plan.
SUBRESOURCE = "plan"
HUMAN = "human"
JSON_PLAN = "json"
PLAN_NAME_LABEL = "infra.contrib.fluxcd.io/plan-name"
PLAN_WORKSPACE_LABEL = "infra.contrib.fluxcd.io/plan-workspace"
SAVED_PLAN_ANNOTATION = "savedPlan"
CHUNK_ANNOTATION = "infra.contrib.fluxcd.io/plan-chunk"
DATA_KEY = "tfplan"
#: tofu-controller's workspace when the Terraform names none (``WorkspaceName()``).
DEFAULT_WORKSPACE = "default"
#: What stands in for a sensitive value, in OpenTofu's own words.
REDACTED = "(sensitive value)"

_MAX_LABEL = 63


@dataclass(frozen=True)
class PlanLocation:
    """Where tofu-controller keeps the readable plan of one Terraform: which objects, selected how."""

    format: str
    #: ``configmaps`` for a human plan, ``secrets`` for a JSON plan.
    resource: str
    #: The object's name, ``tfplan-<workspace>-<name>`` (``.json`` added for a JSON plan); chunks add ``-<i>``.
    name: str


def safe_label_value(value: str) -> str:
    """tofu-controller's label value for a name: as is up to 63 characters, else cut and suffixed by a hash."""
    if len(value) <= _MAX_LABEL:
        return value
    suffix = "-" + hashlib.sha256(value.encode()).hexdigest()[:16]
    return value[: _MAX_LABEL - len(suffix)] + suffix


def plan_location(tf: Mapping[str, Any]) -> PlanLocation | None:
    """Where the readable plan of Terraform ``tf`` is kept, or None when it keeps none."""
    spec = tf.get("spec") or {}
    fmt = spec.get("storeReadablePlan")
    if fmt not in (HUMAN, JSON_PLAN):
        return None
    name = str((tf.get("metadata") or {}).get("name") or "")
    workspace = spec.get("workspace") or DEFAULT_WORKSPACE
    plan_name = name + (".json" if fmt == JSON_PLAN else "")
    return PlanLocation(fmt, "configmaps" if fmt == HUMAN else "secrets", f"tfplan-{workspace}-{plan_name}")


def chunk_name(location: PlanLocation, index: int) -> str:
    """The name of chunk ``index`` of a plan too large for one object."""
    return f"{location.name}-{index}"


def assemble(objects: Iterable[Mapping[str, Any]], plan_id: str, fmt: str) -> str | None:
    """The readable plan ``plan_id`` from the objects tofu-controller wrote, or None when they hold another plan.

    Chunks are joined in their ``plan-chunk`` order; a JSON plan is base64 (Secret data), then gzip.
    Objects of another plan id (a stale copy from an earlier plan) are ignored.
    """
    chunks: dict[int, str] = {}
    for obj in objects:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        data = (obj.get("data") or {}).get(DATA_KEY)
        if annotations.get(SAVED_PLAN_ANNOTATION) != plan_id or not isinstance(data, str):
            continue
        index = str(annotations.get(CHUNK_ANNOTATION) or "0")
        if index.isdigit():
            chunks[int(index)] = data
    if not chunks or sorted(chunks) != list(range(len(chunks))):
        return None
    if fmt == HUMAN:
        return "".join(chunks[i] for i in range(len(chunks)))
    encoded = b"".join(base64.b64decode(chunks[i]) for i in range(len(chunks)))
    return gzip.decompress(encoded).decode()


# ------------------------------------------------------------------------------------------- summary

_PLAN_LINE = re.compile(r"^Plan: .*?(\d+) to add, (\d+) to change, (\d+) to destroy\.", re.MULTILINE)
#: OpenTofu's heading of each resource change in a human plan, and the action it announces.
_HEADING = re.compile(
    r"^\s*# (?P<address>\S.*?) (?P<what>will be created|will be updated in-place|will be destroyed"
    r"|must be replaced|will be replaced, as requested|is tainted, so must be replaced)$",
    re.MULTILINE,
)
_HEADING_ACTIONS = {
    "will be created": "create",
    "will be updated in-place": "update",
    "will be destroyed": "delete",
    "must be replaced": "replace",
    "will be replaced, as requested": "replace",
    "is tainted, so must be replaced": "replace",
}


def summary(text: str, fmt: str, secrets: Iterable[str] = ()) -> JSON:
    """``status.plan.summary`` of a readable plan: counts to add / change / destroy and each resource change.

    Addresses cannot hold sensitive values (OpenTofu refuses them as ``for_each`` keys); ``secrets``
    are masked in them all the same, so nothing a status shows depends on that rule.
    """
    result = summary_from_json(json.loads(text)) if fmt == JSON_PLAN else summary_from_human(text)
    known = list(secrets)
    for change in result["resources"]:
        change["address"] = mask_text(change["address"], known)
    return result


def summary_from_human(text: str) -> JSON:
    """The summary of ``tofu show -no-color``: its own counts line and its ``# <address> will be ...`` headings."""
    counts = _PLAN_LINE.search(text)
    add, change, destroy = (int(n) for n in counts.groups()) if counts else (0, 0, 0)
    resources = [{"address": m["address"], "action": _HEADING_ACTIONS[m["what"]]} for m in _HEADING.finditer(text)]
    return {"add": add, "change": change, "destroy": destroy, "resources": resources}


def _action(actions: list[str]) -> str | None:
    """One word for a change's ``actions`` (OpenTofu's JSON plan); None for no-op and read."""
    if set(actions) == {"create", "delete"}:
        return "replace"
    if actions in (["create"], ["update"], ["delete"]):
        return actions[0]
    return None


def summary_from_json(plan: Mapping[str, Any]) -> JSON:
    """The summary of ``tofu show -json``, counted as OpenTofu counts: a replacement adds one and destroys one."""
    add = change = destroy = 0
    resources: list[JSON] = []
    for rc in plan.get("resource_changes") or []:
        action = _action(list((rc.get("change") or {}).get("actions") or []))
        if action is None:
            continue
        add += action in ("create", "replace")
        change += action == "update"
        destroy += action in ("delete", "replace")
        resources.append({"address": rc.get("address", ""), "action": action})
    return {"add": add, "change": change, "destroy": destroy, "resources": resources}


# ----------------------------------------------------------------------------------------- redaction


def redact(value: Any, sensitive: Any) -> Any:
    """``value`` with every part the matching ``*_sensitive`` structure marks ``true`` replaced by :data:`REDACTED`."""
    if sensitive is True:
        return REDACTED
    if isinstance(value, dict) and isinstance(sensitive, dict):
        return {k: redact(v, sensitive.get(k)) for k, v in value.items()}
    if isinstance(value, list) and isinstance(sensitive, list):
        return [redact(v, sensitive[i] if i < len(sensitive) else None) for i, v in enumerate(value)]
    return value


def _redact_change(change: Mapping[str, Any]) -> JSON:
    out = dict(change)
    for side in ("before", "after"):
        if side in out:
            out[side] = redact(out[side], change.get(f"{side}_sensitive"))
    return out


def redact_json_plan(plan: Mapping[str, Any]) -> JSON:
    """What a reviewer reads of a JSON plan: the changes, with sensitive values redacted.

    Kept: the versions, ``variables`` (values of variables the module declares sensitive
    redacted), ``resource_changes``, ``resource_drift`` and ``output_changes`` (redacted through
    their ``before_sensitive`` / ``after_sensitive``).  Left out: ``planned_values``,
    ``prior_state`` and ``configuration``, which repeat values in other shapes and add nothing a
    reviewer needs to decide.
    """
    declared = ((plan.get("configuration") or {}).get("root_module") or {}).get("variables") or {}
    out: JSON = {k: plan[k] for k in ("format_version", "terraform_version") if k in plan}
    if "variables" in plan:
        out["variables"] = {
            name: ({**var, "value": REDACTED} if (declared.get(name) or {}).get("sensitive") else var)
            for name, var in (plan.get("variables") or {}).items()
        }
    for key in ("resource_drift", "resource_changes"):
        if key in plan:
            out[key] = [{**rc, "change": _redact_change(rc.get("change") or {})} for rc in plan.get(key) or []]
    if "output_changes" in plan:
        out["output_changes"] = {name: _redact_change(ch) for name, ch in (plan.get("output_changes") or {}).items()}
    return out


def sensitive_values(schema: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """The strings inside the values of the spec's sensitive properties (``x-cozystack-sensitive``), longest first.

    Only strings: a number or a boolean cannot be told apart from the same literal elsewhere in a
    plan, so those rely on OpenTofu's own marking.

    OpenTofu marks what flows from a sensitive variable, but not everywhere: a value copied into an
    attribute the provider does not mark (``terraform_data``'s ``output`` read back from state, for
    one) is shown in clear in both the human and the JSON plan.  Masking the values themselves is
    the second line that keeps them out of the preview.
    """
    found: set[str] = set()

    def collect(value: Any) -> None:
        if isinstance(value, str) and value:
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for key, prop in (schema.get("properties") or {}).items():
        if isinstance(prop, dict) and prop.get(SENSITIVE) is True and key in spec:
            collect(spec[key])
    return sorted(found, key=len, reverse=True)


#: Secrets shorter than this are masked only where quoted as a whole string: bare, they match too much text.
MIN_BARE_SECRET = 4


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret, as OpenTofu quotes it (``"..."``) and bare, replaced by :data:`REDACTED`."""
    for secret in secrets:
        text = text.replace(json.dumps(secret), REDACTED)
        if len(secret) >= MIN_BARE_SECRET:
            text = text.replace(secret, REDACTED)
    return text


def _mask_values(value: Any, secrets: frozenset[str]) -> Any:
    if isinstance(value, str):
        return REDACTED if value in secrets else mask_text(value, secrets)
    if isinstance(value, dict):
        return {k: _mask_values(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_values(v, secrets) for v in value]
    return value


def readable(text: str, fmt: str, secrets: Iterable[str] = ()) -> tuple[bytes, str]:
    """The body and content type the ``plan`` subresource answers with, every sensitive value redacted."""
    known = list(secrets)
    if fmt == JSON_PLAN:
        redacted = _mask_values(redact_json_plan(json.loads(text)), frozenset(known))
        return json.dumps(redacted, indent=2).encode() + b"\n", "application/json"
    return mask_text(text, known).encode(), "text/plain; charset=utf-8"
