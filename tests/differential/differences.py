"""What the differential tier compares, and every difference it tolerates, each listed once with its reason.

Normalising keeps only what must differ between an Application and a custom resource: the values of
uids and resourceVersions (replaced by the order in which each side first showed them, so "this
write changed the resourceVersion" is still compared), timestamps (present or not), the group in
``apiVersion``, in Status details and in Status messages, and the rows of :data:`INTENTIONAL`.
Objects are compared with their finalizers, ownerReferences and deletion metadata; lists with their
metadata (``continue`` and ``remainingItemCount``; the list's resourceVersion as present or not,
see INTENTIONAL["list-resource-version"]); Statuses whole (code, reason, message, details, causes).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Difference:
    reason: str
    #: Where the tier applies it (a normalisation, or requests it does not generate).
    how: str


#: Every deliberate difference between an Application kind and a CRD with the same schema.
INTENTIONAL: dict[str, Difference] = {
    "status": Difference(
        "An Application's status is projected from the backing object (HelmRelease/Terraform conditions), "
        "not stored; the oracle's is whatever its clients write.",
        "status is dropped from both sides' objects"),
    "names": Difference(
        "Application names are DNS-1035 labels of at most 53 - len(prefix) characters (the backing object's "
        "name and, for Tofu, `<name>-tf-runner` must stay valid); a custom resource's are DNS-1123 subdomains "
        "of up to 253.",
        "sequences use short label-shaped names (strategies.NAMES); the invalid name tried is invalid on both, "
        "and the message of its refusal (which names the rule) is not compared"),
    "long-metadata-keys": Difference(
        "User labels and annotations are stored on the backing object under `apps.cozystack.io-<key>`, so a "
        "key whose name part is close to 63 characters is refused there (cozystack's scheme).",
        "label and annotation keys are short (strategies.LABEL_KEYS)"),
    "values-as-given": Difference(
        "helm_agl writes the spec onto the HelmRelease as given, without defaults (cozystack's behaviour: the "
        "chart has its own defaults, and a schema default changed later reaches every instance); a CRD stores "
        "the defaulted spec.  A write that only states or drops values equal to their defaults changes the "
        "HelmRelease (generation, resourceVersion, a MODIFIED event) and not the CRD.",
        "for Helm kinds (Kind.spec_as_given) generation and resourceVersion are not compared, and a MODIFIED "
        "event that repeats the object's previous state is dropped; test_a_no_op_update_writes_nothing[redis] checks "
        "the no-op update on a Helm kind directly"),
    "declared-underscore-keys": Difference(
        "Top-level spec keys starting with `_` are reserved for values the platform injects: a write that sets "
        "one the schema declares is refused (400).  Undeclared ones, `_` or not, are pruned or refused per "
        "fieldValidation exactly as a CRD does (compared: operations.UNDECLARED).",
        "no sample schema declares a `_` key"),
    "status-subresource": Difference(
        "An Application's status is projected from its backing object, which the backend controller writes: "
        "no client may write it, so the kinds serve no status subresource (`<plural>/status` is not in "
        "discovery), and a request to it is a 404 as for any subresource a resource lacks.  The oracle CRD has "
        "a status subresource (so its main resource ignores status in writes, as an Application does).",
        "a request to the status subresource is sent, on the oracle's side, to UNSERVED_SUBRESOURCE, a "
        "subresource the CRD does not have: kube-apiserver's own answer for it is the oracle"),
    "list-resource-version": Difference(
        "A list's resourceVersion is the revision the list was read at, not one an object of that side "
        "carries: an Application list may come from the service's watch cache, at a later revision than "
        "kube-apiserver would answer a CRD list with, and both are valid for a list without resourceVersion.",
        "a list's metadata.resourceVersion is compared as present or not; continue and remainingItemCount "
        "are compared"),
    "go-decoder-messages": Difference(
        "A body that is not JSON, or whose metadata is no object, is refused by kube-apiserver with its Go "
        "decoder's error text (Go type names, the offending bytes in hex); the services refuse it with the same "
        "code and reason in their own words.",
        "the message of the answer to those operations.Invalid requests is not compared (Invalid.OWN_WORDS); "
        "every other Status message is, with uids and the group made the same"),
    "invalid-cause-order": Difference(
        "A 422 with several causes lists them in its message in the order they were found: kube-apiserver "
        "finds a schema's property errors in Go map order (it varies from one request to the next), the "
        "services in field order.",
        "the causes are compared (sorted, each with its message); the message is compared up to its list"),
    "no-generate-name": Difference(
        "Applications have no generateName (the backing object's name is derived from the name), so a missing "
        "name is `Required value: name is required`, not kube's `name or generateName is required`.",
        "the message of the answer to Invalid('no-name') is not compared; code, reason and causes' fields are"),
    "selector-parse-messages": Difference(
        "A label selector that does not parse is a 400 on both, worded by each parser (kube-apiserver's lexer "
        "names the token it found).",
        "the message of the answer to Invalid('bad-label-selector') is not compared"),
    "null-spec": Difference(
        "An Application always has a spec (its backing object holds one, defaulted on read); a custom resource "
        "created with `spec: null` has none.",
        "specs are always objects in generated bodies (a non-object spec is refused the same way on both)"),
}


#: Where the oracle's side sends a request to the status subresource (INTENTIONAL["status-subresource"]):
#: a subresource its CRD does not have.
UNSERVED_SUBRESOURCE = "scale"


@dataclass
class Tokens:
    """Replaces each uid/resourceVersion value with the order in which one side first showed it."""

    seen: dict[str, str] = field(default_factory=dict)

    def __call__(self, kind: str, raw: Any) -> str:
        key = f"{kind}:{raw}"
        if key not in self.seen:
            self.seen[key] = f"<{kind}{sum(1 for k in self.seen if k.startswith(kind + ':')) + 1}>"
        return self.seen[key]


def normalise_object(obj: Any, tokens: Tokens, *, versions: bool = True) -> Any:
    """The comparable part of one object: identity, metadata that clients see, spec.  Without
    ``versions`` (INTENTIONAL["values-as-given"]) generation and resourceVersion are left out."""
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata") or {}
    out_meta: JSON = {k: meta[k] for k in ("name", "namespace") if k in meta}
    if versions and "generation" in meta:
        out_meta["generation"] = meta["generation"]
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if meta.get(key):
            out_meta[key] = meta[key]
    if "deletionGracePeriodSeconds" in meta:
        out_meta["deletionGracePeriodSeconds"] = meta["deletionGracePeriodSeconds"]
    if meta.get("uid"):
        out_meta["uid"] = tokens("uid", meta["uid"])
    if meta.get("resourceVersion") and versions:
        out_meta["resourceVersion"] = tokens("rv", meta["resourceVersion"])
    for key in ("creationTimestamp", "deletionTimestamp"):
        if meta.get(key):
            out_meta[key] = "<set>"
    if meta.get("managedFields"):
        out_meta["managedFields"] = [
            {k: m.get(k) for k in ("manager", "operation", "fieldsType", "fieldsV1", "subresource") if k in m}
            for m in meta["managedFields"]
        ]
    out: JSON = {"kind": obj.get("kind"), "metadata": out_meta}
    if "spec" in obj:
        out["spec"] = copy.deepcopy(obj["spec"])
    return out


def normalise_status(status: JSON, groups: tuple[str, str], *, messages: bool = True) -> JSON:
    """The comparable part of a Status: code, reason, message, and the causes (type, field, message);
    the name, kind and group in details; the group is ``<group>`` wherever it is written."""
    details = status.get("details") or {}
    causes = sorted(
        (str(c.get("reason", "")), str(c.get("field", "")),
         _ungrouped(str(c.get("message", "")), groups) if messages else "")
        for c in details.get("causes") or []
    )
    out: JSON = {"code": status.get("code"), "reason": status.get("reason"), "status": status.get("status")}
    if messages:
        out["message"] = _message(status, groups)
    if details.get("name"):
        out["name"] = details["name"]
    if details.get("kind"):
        out["kind"] = details["kind"]
    if details.get("group"):
        out["group"] = "<group>" if details["group"] in groups else details["group"]
    if causes:
        out["causes"] = causes
    return out


_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_RECORD_VERSION = re.compile(r"ResourceVersion in record \(\d+\)")
_INVALID = " is invalid: ["


def _ungrouped(text: str, groups: tuple[str, str]) -> str:
    """A message with the group, every uid and the record's resourceVersion made the same on both sides."""
    for group in sorted(groups, key=len, reverse=True):
        text = text.replace(group, "<group>")
    return _RECORD_VERSION.sub("ResourceVersion in record (<rv>)", _UID.sub("<uid>", text))


def _message(status: JSON, groups: tuple[str, str]) -> str:
    """The comparable message: for a 422 with several causes (INTENTIONAL["invalid-cause-order"]), only the
    part before the list, which the compared causes make up."""
    text = _ungrouped(str(status.get("message", "")), groups)
    head, sep, _ = text.partition(_INVALID)
    return f"{head}{sep}<causes>]" if sep and status.get("code") == 422 else text


def normalise_body(body: Any, tokens: Tokens, groups: tuple[str, str], *, versions: bool = True,
                   messages: bool = True) -> Any:
    if not isinstance(body, dict):
        return body if not isinstance(body, str) else "<text>"
    if body.get("kind") == "Status":
        return normalise_status(body, groups, messages=messages)
    if isinstance(body.get("items"), list):
        meta = body.get("metadata") or {}
        list_meta: JSON = {k: meta[k] for k in ("continue", "remainingItemCount") if meta.get(k)}
        if meta.get("resourceVersion"):
            list_meta["resourceVersion"] = "<set>"
        return {"kind": body.get("kind"), "metadata": list_meta,
                "items": [normalise_object(i, tokens, versions=versions) for i in body["items"]]}
    return normalise_object(body, tokens, versions=versions)


def without_repeats(events: list[JSON]) -> list[JSON]:
    """``events`` minus each MODIFIED event whose object equals the previous event's object of that name."""
    last: dict[Any, Any] = {}
    kept = []
    for event in events:
        name = (event["object"].get("metadata") or {}).get("name")
        if not (event["type"] == "MODIFIED" and last.get(name) == event["object"]):
            kept.append(event)
        last[name] = event["object"]
    return kept
