"""An Application's ``finalizers`` and ``ownerReferences``, kept as the backing object's own.

An Application is stored as its backing object, so the only way to make these two fields do what
they do on a custom resource is to put them on the backing object, where kube-apiserver and the
garbage collector act on them:

* the user's **finalizers** are real finalizers of the backing object, so kube-apiserver holds its
  deletion (``deletionTimestamp`` set, object kept) until the last one is removed.  The backend
  controller's own finalizer (helm-controller's, tofu-controller's) is on the same list; it is the
  controller's, so it is hidden from the Application and an update replaces only the user's part.
  A user who writes the controller's finalizer name does not get it shown back;
* the **ownerReferences** are the backing object's, all of them: no controller of this stack sets
  one, so every ownerReference there is the user's, and a cluster's garbage collector deletes the
  backing object (which *is* the Application) when its owner goes.

kube-apiserver validates the backing object's metadata as it validates the CRD oracle's (both are
custom resources), so its refusals only need the Application's name (:func:`shared.api.errors.renamed_invalid`);
the warnings it sends to this service are computed again here (:func:`finalizer_warnings`) so the
user gets them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from shared.api import goformat
from shared.api.errors import Cause, field_cause
from shared.api.names import byte_length, label_prefix_errors
from shared.bodies import JSON, clone

#: Finalizer names kube-apiserver knows without a domain (``standardFinalizers`` of the CRD registry).
STANDARD_FINALIZERS = frozenset({"orphan", "foregroundDeletion", "kubernetes"})


def to_application(backing_meta: Mapping[str, Any], app_meta: JSON, controller_finalizers: Collection[str]) -> None:
    """Copy the backing object's finalizers (less the controller's) and ownerReferences into ``app_meta``."""
    finalizers = [f for f in backing_meta.get("finalizers") or [] if f not in controller_finalizers]
    if finalizers:
        app_meta["finalizers"] = finalizers
    if backing_meta.get("ownerReferences"):
        app_meta["ownerReferences"] = clone(backing_meta["ownerReferences"])


def to_backing(app_meta: Mapping[str, Any], backing_meta: JSON, controller_finalizers: Collection[str],
               live_meta: Mapping[str, Any] | None = None) -> None:
    """Set ``backing_meta``'s finalizers and ownerReferences from the Application's.

    On an update (``live_meta`` given) the controller's finalizers the live object has are kept
    after the user's, so a PUT never strips them; kube-apiserver itself refuses a finalizer that
    is new on an object being deleted, as it does for the CRD.  Values that are not lists are
    passed on as they are, for kube-apiserver to refuse as it refuses them on a custom resource.
    """
    wanted = app_meta.get("finalizers")
    finalizers: Any = list(wanted) if isinstance(wanted, list) else wanted
    if live_meta is not None and (finalizers is None or isinstance(finalizers, list)):
        kept = [f for f in live_meta.get("finalizers") or [] if f in controller_finalizers]
        finalizers = [*(finalizers or []), *(f for f in kept if f not in (finalizers or []))]
    if finalizers:
        backing_meta["finalizers"] = finalizers
    else:
        backing_meta.pop("finalizers", None)
    owners = app_meta.get("ownerReferences")
    if owners:
        backing_meta["ownerReferences"] = clone(owners)
    else:
        backing_meta.pop("ownerReferences", None)


def metadata_causes(meta: Mapping[str, Any]) -> list[Cause]:
    """kube-apiserver's validation of ``ownerReferences`` and ``finalizers``, in its order, with its words.

    Run with the spec's validation so a request wrong in both gets every cause at once, as for a custom
    resource; kube-apiserver checks the backing object again (its answer is renamed, see the module).
    """
    causes: list[Cause] = []
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        causes += _owner_causes([o for o in owners if isinstance(o, dict)])
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list):
        path = "metadata.finalizers"
        for name in finalizers:
            causes += [field_cause(path, f"Invalid value: {goformat.bad_value(name)}: {why}")
                       for why in qualified_name_errors(str(name))]
        if "orphan" in finalizers and "foregroundDeletion" in finalizers:
            causes.append(field_cause(path, f"Invalid value: {goformat.bad_value(finalizers)}: finalizer orphan and "
                                            "foregroundDeletion cannot be both set"))
    return causes


def _owner_causes(owners: list[JSON]) -> list[Cause]:
    path = "metadata.ownerReferences"
    causes: list[Cause] = []
    controller = ""
    for ref in owners:
        api_version = str(ref.get("apiVersion") or "")
        for field, value, missing, why in (
            ("apiVersion", api_version, not api_version.rpartition("/")[2], "version must not be empty"),
            ("kind", ref.get("kind") or "", not ref.get("kind"), "must not be empty"),
            ("name", ref.get("name") or "", not ref.get("name"), "must not be empty"),
            ("uid", ref.get("uid") or "", not ref.get("uid"), "must not be empty"),
        ):
            if missing:
                causes.append(field_cause(f"{path}.{field}", f"Invalid value: {goformat.bad_value(value)}: {why}"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind') or ''}/{ref.get('name') or ''}"
            if controller:
                shown = goformat.marshal([_go_owner(o) for o in owners], sort_keys=False)
                causes.append(field_cause(path, f"Invalid value: {shown}: Only one reference can have Controller "
                                                f"set to true. Found \"true\" in references for {controller} and "
                                                f"{current}"))
            else:
                controller = current
    return causes


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUALIFIED_NAME_RULE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a qualified name (``[prefix/]name``), in kube-apiserver's words; empty if it is."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a valid label key {_QUALIFIED_NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')"]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        errors += [f"prefix part {why}" for why in (label_prefix_errors(prefix) if prefix else ["must be non-empty"])]
    if not name:
        errors.append("name part must be non-empty")
    elif byte_length(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _QUALIFIED_NAME.fullmatch(name):
        errors.append(f"name part {_QUALIFIED_NAME_RULE}")
    return errors


def _go_owner(ref: JSON) -> JSON:
    """An ownerReference with its fields in the Go type's order, as kube-apiserver prints it."""
    always = {k: ref.get(k, "") for k in ("apiVersion", "kind", "name", "uid")}
    return {**always, **{k: ref[k] for k in ("controller", "blockOwnerDeletion") if k in ref}}


def finalizer_warnings(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """The warnings kube-apiserver sends for a custom resource's added finalizers that lack a domain.

    Only finalizers ``new`` adds over ``old`` (an update) are named, in sorted order, as the CRD
    registry names them; names that are not qualified names are refused, not warned about.
    """
    added = set(_names(new)) - set(_names(old))
    path = "metadata.finalizers"
    warnings = []
    for name in sorted(added):
        if "/" in name or name in STANDARD_FINALIZERS:
            continue
        qualifier = "domain-qualified finalizer name including a path (/)" if "." in name else \
            "domain-qualified finalizer name"
        warnings.append(f'{path}: "{name}": prefer a {qualifier} to avoid accidental conflicts with other '
                        "finalizer writers")
    return warnings


def _names(meta: Mapping[str, Any] | None) -> list[str]:
    finalizers = (meta or {}).get("finalizers")
    return [f for f in finalizers if isinstance(f, str)] if isinstance(finalizers, list) else []
