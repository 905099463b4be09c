"""Apply and Update of one object, structured-merge-diff's ``merge.Updater`` on plain data.

``Managers`` maps a manager identifier to the fields it owns (:class:`Owned`).  ``update`` records
a non-apply write (every field it changed becomes the writer's and leaves its previous owners);
``apply`` merges an applied configuration onto the live object, makes the configuration's field
set the applier's, removes what the applier stopped applying unless someone else owns it, and
refuses (:class:`Conflicts`) to change a field another manager owns unless forced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from shared.api.fieldmanager.fieldpath import EMPTY, FieldSet, Path
from shared.api.fieldmanager.typed import (
    MISSING,
    Comparison,
    Schema,
    compare,
    drop_nulls,
    ensure_named_fields_are_members,
    field_set,
    merge,
    not_under,
    remove_items,
    same,
)


@dataclass(frozen=True)
class Owned:
    """The fields one manager owns, at an API version, and whether it owns them by applying."""

    fields: FieldSet
    api_version: str
    applied: bool


Managers = dict[str, Owned]


@dataclass(frozen=True)
class Conflict:
    manager: str
    path: Path


class Conflicts(Exception):
    """An apply would change fields other managers own."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        super().__init__(f"{len(conflicts)} conflicts")
        self.conflicts = conflicts


@dataclass(frozen=True)
class Updater:
    """The merge machinery for one object type: its schema and the paths no manager owns
    (reset fields such as ``status``, which a main-resource write never changes)."""

    schema: Schema
    ignored: tuple[Path, ...] = ()

    def _filter(self, fields: FieldSet) -> FieldSet:
        return not_under(fields, self.ignored)

    def _step(self, live: Any, new: Any, version: str, managers: Managers, workflow: str,
              force: bool) -> tuple[Managers, Comparison]:
        """Take the changed fields from every other manager (or refuse, unless forced)."""
        comparison = compare(live, new, self.schema).exclude(self.ignored)
        changed = comparison.changed()
        conflicts: dict[str, FieldSet] = {}
        out = dict(managers)
        for manager, owned in managers.items():
            if manager == workflow:
                continue
            taken = owned.fields & changed
            if taken:
                conflicts[manager] = taken
        if conflicts and not force:
            raise Conflicts([Conflict(m, p) for m, taken in conflicts.items() for p in taken])
        for manager, owned in managers.items():
            if manager == workflow:
                continue
            remaining = owned.fields - conflicts.get(manager, EMPTY) - comparison.removed
            out[manager] = replace(owned, fields=remaining)
        return {m: o for m, o in out.items() if o.fields}, comparison

    def update(self, live: Any, new: Any, version: str, managers: Managers, manager: str) -> Managers:
        """Record that ``manager`` wrote ``new`` over ``live`` (an Update operation)."""
        managers, comparison = self._step(live, new, version, managers, manager, force=True)
        previous = managers.get(manager, Owned(EMPTY, version, False)).fields
        fields = self._filter((previous - comparison.removed) | comparison.modified | comparison.added)
        managers = dict(managers)
        managers.pop(manager, None)
        if fields:
            managers[manager] = Owned(fields, version, False)
        return managers

    def apply(self, live: Any, config: Any, version: str, managers: Managers, manager: str,
              force: bool) -> tuple[Any, Managers]:
        """Apply ``config`` as ``manager``: the new object (``MISSING`` when nothing changes) and owners."""
        merged = merge(live, config, self.schema)
        last = managers.get(manager)
        managers = dict(managers)
        managers[manager] = Owned(self._filter(field_set(config, self.schema)), version, True)
        applied = self._prune(merged, managers, last)
        # Conflicts are found before nulls are dropped: applying null to a field another manager set
        # changes it (kube-apiserver prunes the null, and defaults the field again, only afterwards).
        managers, _ = self._step(live, applied, version, managers, manager, force)
        new = drop_nulls(applied, self.schema)
        if same(live, new):
            return MISSING, managers
        return new, managers

    def _prune(self, merged: Any, managers: Managers, last: Owned | None) -> Any:
        """Remove what the applier owned before and no longer applies, unless another manager owns it."""
        if last is None or not last.fields:
            return merged
        ensure = self._ensure
        owned_by_anyone: set[Path] = set()
        for owned in managers.values():
            owned_by_anyone |= owned.fields
        merged_set = ensure(field_set(merged, self.schema))
        dropped = ensure(last.fields)
        pruned = remove_items(merged, dropped, self.schema)
        pruned = MISSING if pruned is None else pruned
        # Add back what someone still owns.
        kept = ensure(field_set(pruned, self.schema) if pruned is not MISSING else EMPTY) | ensure(
            frozenset(owned_by_anyone))
        pruned = remove_items(merged, merged_set - kept, self.schema)
        # Only what the applier owned before may go.
        pruned_set = ensure(field_set(pruned, self.schema) if pruned is not None else EMPTY)
        result = remove_items(merged, (merged_set - pruned_set) & dropped, self.schema)
        return result if result is not None else {}

    def _ensure(self, fields: Iterable[Path]) -> FieldSet:
        return ensure_named_fields_are_members(frozenset(fields), self.schema)
