"""What the server serves right now: one storage per group/version/plural, and group versions kept in discovery.

Kinds come and go while the server runs (definitions are created and deleted), so every request
looks its storage up here afresh, and the discovery/OpenAPI caches compare :attr:`Catalog.generation`
to know when to rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.api.rest import ResourceInfo, Storage

GroupVersion = tuple[str, str]


class Catalog:
    """The served storages; every change bumps :attr:`generation`."""

    def __init__(self, group_versions: Iterable[GroupVersion] = ()) -> None:
        self._storages: dict[tuple[str, str, str], Storage] = {}
        #: Group versions discovery keeps even with no resource (see ``ApiServer.serve_group_version``).
        self.static_group_versions: set[GroupVersion] = set(group_versions)
        self.generation = 0

    def register(self, storage: Storage) -> None:
        info = storage.info
        if not info.namespaced:
            raise ValueError(f"{info.plural}.{info.group}: only namespaced resources are supported")
        self._storages[(info.group, info.version, info.plural)] = storage
        self.generation += 1

    def unregister(self, group: str, version: str, plural: str) -> bool:
        removed = self._storages.pop((group, version, plural), None) is not None
        if removed:
            self.generation += 1
        return removed

    def keep_group_version(self, group: str, version: str) -> None:
        self.static_group_versions.add((group, version))
        self.generation += 1

    def storage(self, group: str, version: str, plural: str) -> Storage | None:
        return self._storages.get((group, version, plural))

    def resources(self) -> list[ResourceInfo]:
        return [s.info for s in self._storages.values()]

    def group_versions(self) -> set[GroupVersion]:
        """Every group version discovery and OpenAPI answer for."""
        return {(i.group, i.version) for i in self.resources()} | self.static_group_versions
