"""Discovery and OpenAPI documents of what is served, each built once per catalog generation.

kube-apiserver's aggregator and kubectl fetch these often (and OpenAPI with ``If-None-Match``),
while the served kinds change rarely; building them per request would repeat the same schema
work, so each document and its content hash are cached until a kind is registered or removed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from shared.api import discovery
from shared.bodies import JSON
from shared.schema import openapi
from shared.server.catalog import Catalog
from shared.server.responses import not_found


class Documents:
    """The documents of one :class:`Catalog`; ``title`` names the service in OpenAPI ``info``."""

    def __init__(self, catalog: Catalog, title: str) -> None:
        self._catalog = catalog
        self._title = title
        self._cache: dict[Hashable, tuple[int, JSON, str]] = {}

    def _cached(self, key: Hashable, build: Callable[[], JSON]) -> tuple[JSON, str]:
        generation = self._catalog.generation
        entry = self._cache.get(key)
        if entry is None or entry[0] != generation:
            doc = build()
            entry = (generation, doc, openapi.content_hash(doc))
            self._cache[key] = entry
        return entry[1], entry[2]

    def openapi_v2(self) -> tuple[JSON, str]:
        """The Swagger 2.0 document and its content hash (the ETag)."""
        return self._cached("v2", lambda: openapi.v2_document(self._catalog.resources(), self._title))

    def openapi_v3(self, group: str, version: str) -> tuple[JSON, str]:
        """The OpenAPI v3 document of one served group version and its content hash; 404 otherwise."""
        if (group, version) not in self._catalog.group_versions():
            raise not_found()
        return self._v3(group, version)

    def openapi_v3_index(self) -> JSON:
        """``/openapi/v3``: every served group version with the hash its document URL carries."""
        docs = {gv: self._v3(*gv)[0] for gv in self._catalog.group_versions()}
        return openapi.v3_index(docs)

    def _v3(self, group: str, version: str) -> tuple[JSON, str]:
        return self._cached(
            ("v3", group, version),
            lambda: openapi.v3_document(group, version, self._catalog.resources(), self._title),
        )

    def discovery(self, path: tuple[str, ...]) -> JSON:
        """``/apis``, ``/apis/<group>`` or ``/apis/<group>/<version>``; 404 for what is not served."""
        infos = self._catalog.resources()
        static = self._catalog.static_group_versions
        if not path:
            return discovery.api_group_list(infos, static)
        if len(path) == 1:
            group_doc = discovery.api_group(path[0], infos, static)
            if group_doc is None:
                raise not_found()
            return group_doc
        group, version = path
        if (group, version) not in self._catalog.group_versions():
            raise not_found()
        return discovery.api_resource_list(group, version, infos)
