"""``metadata.managedFields`` as kube-apiserver's field manager keeps them for a custom resource.

The layers of ``k8s.io/apiserver``'s field manager, on plain data: managers are identified by
manager name, operation and (for Update) API version, entries of one identity are merged when
decoded; an Update is recorded as a pseudo-manager that is then folded into the writer's entry
(so only a write that changed something gets an entry or a new ``time``); an object that was never
tracked stays untracked by updates, and its first apply first credits everything it holds to
``before-first-apply``; identity and server-owned fields (apiVersion, kind, name, namespace, uid,
resourceVersion, generation, creationTimestamp, managedFields, the ``metadata`` node itself) are
stripped from every set, ``status`` is owned by nobody (it is a reset field of the main resource);
at most ten Update entries are kept, older ones merged into ``ancient-changes``; entries are
written sorted as kube sorts them; kubectl's server-side apply (manager ``kubectl``) keeps an existing
client-side apply annotation in step with what it applied, and may take over the fields that annotation
still describes unchanged (the client-side to server-side upgrade).  Conflicts become the 409 Status
kube-apiserver answers.
"""

from __future__ import annotations

import functools
import json
import time as clock
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from shared.api import errors
from shared.api.fieldmanager.fieldpath import EMPTY, FieldSet, Path, field, from_fields_v1, iterate, path_string
from shared.api.fieldmanager.fieldpath import to_fields_v1 as _to_fields_v1
from shared.api.fieldmanager.shapes import MAX_SHAPES, shape_key
from shared.api.fieldmanager.typed import MISSING, Schema, compare, field_set
from shared.api.fieldmanager.updater import Conflicts, Managers, Owned, Updater
from shared.bodies import JSON
from shared.kept import KeptPerObject

APPLY = "Apply"
UPDATE = "Update"
BEFORE_FIRST_APPLY = "before-first-apply"
ANCIENT_CHANGES = "ancient-changes"
MAX_UPDATE_MANAGERS = 10
_CURRENT_OPERATION = "current-operation"
#: kubectl's server-side apply manager, and the client-side apply annotation it keeps in step.
KUBECTL = "kubectl"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

#: Paths no manager ever owns (kube's stripMetaManager).
STRIPPED: FieldSet = frozenset(
    {(field("apiVersion"),), (field("kind"),), (field("metadata"),)}
    | {(field("metadata"), field(name)) for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
        "managedFields", "resourceVersion")}
)
#: Reset fields of the main resource: a write there never changes them, nobody owns them.
RESET: tuple[Path, ...] = ((field("status"),),)

_STRING_MAP: JSON = {"type": "object", "additionalProperties": {"type": "string"}}
#: ``ObjectMeta`` as the field manager sees it (labels and annotations are granular maps, finalizers
#: a set, owner references a map list keyed by uid whose items are atomic: kube's OwnerReference is a
#: ``structType=atomic``, so a manager owns a reference whole, ``k:{"uid":...}`` with no fields under it).
OBJECT_META: JSON = {
    "type": "object",
    "properties": {
        **{name: {"type": "string"} for name in (
            "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp")},
        "generation": {"type": "integer"},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ownerReferences": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
            "items": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                **{name: {"type": "string"} for name in ("apiVersion", "kind", "name", "uid")},
                "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}},
        },
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}


def object_type(object_schema: Mapping[str, Any]) -> JSON:
    """The type the field manager walks: the kind's schema with kube's ``ObjectMeta``."""
    props = dict(object_schema.get("properties") or {})
    props["metadata"] = OBJECT_META
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    return {**object_schema, "type": "object", "properties": props}


def manager_from_user_agent(user_agent: str) -> str:
    """The manager of a write that names none: the User-Agent up to its first ``/`` (as kube)."""
    return user_agent.split("/", 1)[0]


#: The last second :func:`now` formatted, and how.
_formatted: tuple[int, str] = (-1, "")


def now() -> str:
    """The time of a write as managedFields record it.  kube's are whole seconds, so each second is formatted
    once (``strftime`` was a seventh of the field management of a create, in a profile of the service)."""
    global _formatted
    second = int(clock.time())
    if _formatted[0] != second:
        _formatted = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _formatted[1]


# ---------------------------------------------------------------------------------------- identities


@functools.lru_cache(maxsize=1024)
def identifier(manager: str, operation: str, api_version: str) -> str:
    """kube's manager identifier: the entry without fields and time (and, for Apply, without version).
    Kept per manager: a service sees few, and every write encodes and parses its own."""
    entry: JSON = {"manager": manager, "operation": operation}
    if operation != APPLY and api_version:
        entry["apiVersion"] = api_version
    return json.dumps(entry, separators=(",", ":"))


def _parse_identifier(ident: str) -> JSON:
    return dict(_parsed_identifier(ident))  # a copy: the kept one is shared


@functools.lru_cache(maxsize=1024)
def _parsed_identifier(ident: str) -> JSON:
    parsed: JSON = json.loads(ident)
    return parsed


def print_manager(ident: str) -> str:
    """How a conflict names a manager: ``"alice"``, or ``"kubectl-edit" using v1`` for an Update."""
    entry = _parse_identifier(ident)
    name = json.dumps(entry.get("manager", ""))
    if entry.get("operation") == UPDATE:
        return f"{name} using {entry.get('apiVersion', '')}"
    return name


# ---------------------------------------------------------------------------------------- decode/encode


@dataclass
class Managed:
    """Decoded ``managedFields``: owners by identifier and the time of each entry."""

    fields: Managers
    times: dict[str, str]

    @classmethod
    def empty(cls) -> Managed:
        return cls({}, {})


def decode(entries: Any) -> Managed:
    """Decode ``managedFields``; entries of the same identity are merged (``ValueError`` if malformed)."""
    managed = Managed.empty()
    if entries is None:
        return managed
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("managedFields entries must be objects")
        operation = entry.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ValueError(f"unknown operation {operation!r}")
        if entry.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise ValueError(f"unknown fieldsType {entry.get('fieldsType')!r}")
        version = str(entry.get("apiVersion") or "")
        ident = identifier(str(entry.get("manager") or ""), operation, version)
        fields = from_fields_v1(entry.get("fieldsV1") or {})
        previous = managed.fields.get(ident)
        if previous is not None:
            fields |= previous.fields
        managed.fields[ident] = Owned(fields, version, operation == APPLY)
        if entry.get("time"):
            managed.times[ident] = max(str(entry["time"]), managed.times.get(ident, ""))
    return managed


def encode(managed: Managed) -> list[JSON]:
    """``managedFields`` entries, sorted as kube sorts them (operation, time, manager, apiVersion)."""
    entries: list[JSON] = []
    for ident, owned in managed.fields.items():
        if not owned.fields:
            continue
        parsed = _parse_identifier(ident)
        entry: JSON = {"manager": parsed["manager"], "operation": parsed["operation"],
                       "apiVersion": owned.api_version}
        if ident in managed.times:
            entry["time"] = managed.times[ident]
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = _to_fields_v1(owned.fields)
        entries.append(entry)
    entries.sort(key=lambda e: (e["operation"], e.get("time", ""), e["manager"], e["apiVersion"]))
    return entries


def is_reset(entries: Any) -> bool:
    """``managedFields: []`` or ``[{}]`` in a written object clears every entry (as kube)."""
    return isinstance(entries, list) and (entries == [] or entries == [{}])


# ---------------------------------------------------------------------------------------- the manager


def conflict_error(conflicts: Conflicts) -> errors.ApiError:
    """The 409 kube-apiserver answers for apply conflicts: message and one cause per conflicting field."""
    ordered = sorted(conflicts.conflicts, key=lambda c: c.manager)
    by_manager: dict[str, list[Path]] = {}
    for conflict in ordered:
        by_manager.setdefault(conflict.manager, []).append(conflict.path)
    flat: list[tuple[str, Path]] = []
    for manager in sorted(by_manager):
        flat.extend((manager, p) for p in iterate(frozenset(by_manager[manager])))
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {print_manager(m)}",
               "field": path_string(p)} for m, p in flat]
    if len(flat) == 1:
        manager, path = flat[0]
        message = f"Apply failed with 1 conflict: conflict with {print_manager(manager)}: {path_string(path)}"
    else:
        lines: list[str] = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {print_manager(manager)}:")
            lines.extend(f"- {path_string(p)}" for p in iterate(frozenset(by_manager[manager])))
        message = f"Apply failed with {len(flat)} conflicts: " + "\n".join(lines)
    return errors.ApiError(409, "Conflict", message, details={"causes": causes})


def _strip(fields: FieldSet) -> FieldSet:
    return fields - STRIPPED


def _bare(obj: Mapping[str, Any] | None) -> Any:
    """The object as the field manager compares it: without managedFields (and {} for none)."""
    if obj is None:
        return {}
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


#: What creates recorded, per schema, writer and shape of the object.
_CREATED: KeptPerObject[tuple[str, str, bytes], bytes] = KeptPerObject(MAX_SHAPES)


class FieldManager:
    """kube-apiserver's field manager for one kind at one API version (a custom resource's layers)."""

    def __init__(self, object_schema: Mapping[str, Any], api_version: str) -> None:
        self._source = object_schema
        self.schema: Schema = object_type(object_schema)
        self.api_version = api_version
        self._updater = Updater(self.schema, RESET)

    # -------------------------------------------------------------- Update
    def update(self, live: Mapping[str, Any] | None, new: Mapping[str, Any], manager: str,
               time: str | None = None) -> list[JSON] | None:
        """The managedFields of ``new`` written over ``live`` by ``manager`` (create: ``live`` None).

        ``new``'s own managedFields, when it states any, replace the live ones (a reset when empty);
        None means the object is not tracked (it had no managedFields before this update).
        """
        live_meta = (live or {}).get("metadata") or {}
        stated = (new.get("metadata") or {}).get("managedFields")
        if live is None and stated is None:
            return self._created(_bare(new), manager, time or now())
        if is_reset(stated):
            managed = Managed.empty()
        else:
            managed = _decode_or_empty(stated)
            if not managed.fields:
                managed = _decode_or_empty(live_meta.get("managedFields"))
        if not managed.fields and live is not None and live_meta.get("uid"):
            return None  # an object never tracked stays untracked by updates
        managed = self._update(_bare(live), _bare(new), managed, manager, time or now())
        return encode(managed)

    def _created(self, new: Any, manager: str, time: str) -> list[JSON]:
        """A create's entries; kept per shape of the object (:mod:`.shapes`), its time the write's own."""
        shape = shape_key(new)
        key = None if shape is None else (self.api_version, manager, shape)
        kept = None if key is None else _CREATED.get(self._source, key)
        if kept is not None:
            entries: list[JSON] = orjson.loads(kept)
            for entry in entries:
                entry["time"] = time
            return entries
        entries = encode(self._update({}, new, Managed.empty(), manager, time))
        if key is not None and all(entry.get("time") == time for entry in entries):
            _CREATED.put(self._source, key, orjson.dumps(entries))
        return entries

    def _update(self, live: Any, new: Any, managed: Managed, manager: str, time: str) -> Managed:
        ident = identifier(manager, UPDATE, self.api_version)
        fields = self._updater.update(live, new, self.api_version, dict(managed.fields), _CURRENT_OPERATION)
        current = fields.pop(_CURRENT_OPERATION, None)
        times = dict(managed.times)
        if current is not None:
            own = _strip(current.fields)
            if own:
                previous = fields.get(ident)
                merged = own | (previous.fields if previous else EMPTY)
                fields[ident] = Owned(merged, self.api_version, False)
                times[ident] = time
        fields = {m: o for m, o in fields.items() if o.fields}
        return _cap(Managed(fields, {m: t for m, t in times.items() if m in fields}), self.api_version, time)

    def _not_allowed_by_last_applied(self, conflicts: Conflicts, live: Any) -> Conflicts:
        """kube's lastAppliedManager: kubectl's first server-side apply of an object made with client-side
        apply may take the fields the client-side apply annotation still describes as they are."""
        last = _last_applied(live)
        if not isinstance(last, dict):
            return conflicts
        allowed = field_set(last, self.schema) - compare(last, live, self.schema).modified
        return Conflicts([c for c in conflicts.conflicts if c.path not in allowed])

    # -------------------------------------------------------------- Apply
    def apply(self, live: Mapping[str, Any] | None, config: Mapping[str, Any], manager: str, force: bool,
              time: str | None = None) -> tuple[JSON, list[JSON], bool]:
        """Apply ``config`` as ``manager`` onto ``live`` (None: the object does not exist yet).

        Returns the new object (without managedFields), its managedFields, and whether the object
        itself changed.  Raises the 409 Status on conflicts unless ``force``.
        """
        time = time or now()
        live_meta = (live or {}).get("metadata") or {}
        managed = _decode_or_empty(live_meta.get("managedFields"))
        base = _bare(live)
        if not managed.fields and live is not None:
            # Credit what the object holds to before-first-apply, so the first applier cannot drop it.
            managed = self._update({}, base, managed, BEFORE_FIRST_APPLY, time)
        ident = identifier(manager, APPLY, self.api_version)
        try:
            new, fields = self._updater.apply(base, _bare(config), self.api_version, dict(managed.fields), ident,
                                              force)
        except Conflicts as conflicts:
            remaining = self._not_allowed_by_last_applied(conflicts, base) if manager == KUBECTL else conflicts
            if remaining.conflicts:
                raise conflict_error(remaining) from None
            new, fields = self._updater.apply(base, _bare(config), self.api_version, dict(managed.fields), ident,
                                              True)
        times = dict(managed.times)
        if ident in fields:
            fields[ident] = Owned(_strip(fields[ident].fields), self.api_version, True)
            if not fields[ident].fields:
                del fields[ident]
        changed = new is not MISSING
        if changed:
            times[ident] = time  # a no-op apply keeps the entry's time (kube sets it only when the object changes)
        result: JSON = new if changed else base
        if manager == KUBECTL:
            synced = _sync_last_applied(result, config)
            changed = changed or synced != result
            result = synced
        out = Managed(fields, {m: t for m, t in times.items() if m in fields})
        return result, encode(out), changed


def _last_applied(obj: Mapping[str, Any]) -> Any:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _sync_last_applied(obj: JSON, config: Mapping[str, Any]) -> JSON:
    """kube's lastAppliedUpdater: kubectl's server-side apply keeps an existing client-side apply
    annotation equal to what it applied (the configuration without that annotation, as Go encodes it)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if not annotations.get(LAST_APPLIED):
        return obj
    applied = dict(_bare(config))
    meta = dict(applied.get("metadata") or {})
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if kept:
        meta["annotations"] = kept
    else:
        meta.pop("annotations", None)
    applied["metadata"] = meta
    text = json.dumps(applied, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    return {**obj, "metadata": {**obj["metadata"], "annotations": {**annotations, LAST_APPLIED: text}}}


def _decode_or_empty(entries: Any) -> Managed:
    try:
        return decode(entries)
    except (ValueError, TypeError):
        return Managed.empty()


def _cap(managed: Managed, api_version: str, time: str) -> Managed:
    """At most :data:`MAX_UPDATE_MANAGERS` Update entries; the oldest merge into ``ancient-changes``."""
    updates = [m for m, o in managed.fields.items() if not o.applied]
    if len(updates) <= MAX_UPDATE_MANAGERS:
        return managed
    updates.sort(key=lambda m: managed.times.get(m, ""))
    ancient = identifier(ANCIENT_CHANGES, UPDATE, api_version)
    fields = dict(managed.fields)
    times = dict(managed.times)
    merged = fields.get(ancient, Owned(EMPTY, api_version, False)).fields
    for manager in updates[: len(updates) - MAX_UPDATE_MANAGERS + (0 if ancient in fields else 1)]:
        if manager == ancient:
            continue
        merged |= fields.pop(manager).fields
        times.pop(manager, None)
    fields[ancient] = Owned(merged, api_version, False)
    times.setdefault(ancient, time)
    return Managed(fields, times)


# ---------------------------------------------------------------------------------------- storage form


def to_annotation(entries: Any) -> str | None:
    """``managedFields`` as one compact JSON annotation value on a backing object (None: keep none)."""
    if not isinstance(entries, list) or not entries:
        return None
    return orjson.dumps(entries).decode()


def from_annotation(text: Any) -> list[JSON] | None:
    """The ``managedFields`` an annotation value holds; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        entries = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return entries if isinstance(entries, list) else None
