"""CRUD, list and watch of one resource as plain JSON: the verbs every backing-object operation goes through."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client as kclient

from shared.api import errors
from shared.api.errors import ApiError
from shared.bodies import JSON, collector_paused

from .. import early, paging
from . import rawlist
from .resources import GVR
from .transport import (
    DEFAULT_TIMEOUT,
    DEFAULT_WATCH_SECONDS,
    WATCH_READ_SLACK,
    decode_answer,
    get_bytes,
    request_json,
    watch_events,
)

log = logging.getLogger(__name__)


def _flag(value: bool) -> str:
    return "true" if value else "false"


class ObjectClient:
    """CRUD, list and watch of one resource, returning plain JSON dicts.

    ``namespace=None`` (or "") addresses a cluster-scoped resource, or all namespaces for list and
    watch.  ``field_manager`` is sent on writes so managedFields name the service.
    """

    def __init__(
        self,
        api: kclient.ApiClient,
        gvr: GVR,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        field_manager: str | None = None,
        listed_ahead: early.Pages = early.PAGES,
    ) -> None:
        self.api = api
        self.gvr = gvr
        self.timeout = timeout
        self.field_manager = field_manager
        self.listed_ahead = listed_ahead

    async def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        return await request_json(
            self.api,
            method,
            path,
            query=query or [],
            body=body,
            content_type=content_type,
            request_timeout=self.timeout,
        )

    def _write_query(self, dry_run: bool, field_validation: str | None = None) -> list[tuple[str, str]]:
        query: list[tuple[str, str]] = []
        if dry_run:
            query.append(("dryRun", "All"))
        if self.field_manager:
            query.append(("fieldManager", self.field_manager))
        if field_validation:
            query.append(("fieldValidation", field_validation))
        return query

    async def get(self, namespace: str | None, name: str, *, subresource: str | None = None,
                  resource_version: str | None = None) -> JSON:
        """The object; with ``resource_version``, as kube-apiserver's watch cache answers a GET at that version
        (any state for ``"0"``, not older than it otherwise, 504 when it is ahead of the cache for 3 s)."""
        query = [("resourceVersion", resource_version)] if resource_version is not None else None
        return await self._call("GET", self.gvr.path(namespace, name, subresource), query)

    async def list(
        self,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str = "",
    ) -> JSON:
        """One page of the list, as kube-apiserver returned it (``metadata.continue`` included)."""
        query: list[tuple[str, str]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit is not None:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if resource_version_match:
            query.append(("resourceVersionMatch", resource_version_match))
        return await self._call("GET", self.gvr.path(namespace), query)

    async def list_all(
        self, namespace: str | None = None, label_selector: str = "", page_size: int = 500,
        keep: Callable[[JSON, JSON], Any] | None = None, raw_items: bool = False,
    ) -> JSON:
        """Every item, following ``continue`` tokens, as one list at one resourceVersion.

        Pages of one paginated list are a consistent snapshot; if the continue token expires
        (410) mid-way, the whole list starts over so the result is never a mix of two snapshots.
        ``keep(item, page)``, when given, turns each item into what the list holds as its page
        arrives: a caller that keeps less than whole objects (a cache) then never holds every
        object decoded at once, only one page of them.  The next page is asked for before this
        one is decoded (:mod:`.paging`).  With ``raw_items``, each item reaches ``keep`` with its top-level
        fields still encoded (:mod:`.rawlist`), for a caller that keeps it encoded.
        """
        for _attempt in range(3):
            items: list[Any] = []
            token: str | None = None
            ahead: asyncio.Task[bytes] | None = None
            try:
                raw = await self._page(namespace, label_selector, page_size, None)
                while True:
                    early = paging.continue_token(raw)
                    if isinstance(early, str):
                        ahead = asyncio.ensure_future(self._page(namespace, label_selector, page_size, early))
                        # The task runs up to its wait for the answer: on a kept-alive connection, nothing
                        # before that suspends, so the request is out before the decode below holds the loop.
                        await asyncio.sleep(0)
                    with collector_paused():
                        page = (rawlist.decode_page if raw_items else decode_answer)(raw, "GET",
                                                                                     self.gvr.path(namespace))
                        got = page.pop("items", None) or []
                        items.extend(got if keep is None else [keep(item, page) for item in got])
                        # Gone before the collector runs again, which would otherwise walk every decoded item.
                        del got
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        page["items"] = items
                        page["metadata"] = {"resourceVersion": meta.get("resourceVersion", "")}
                        return page
                    if ahead is None or token != early:
                        raw = await self._page(namespace, label_selector, page_size, token)
                    else:
                        raw, ahead = await ahead, None
            except ApiError as exc:
                if exc.code != 410 or token is None:
                    raise
                log.info("list of %s: continue token expired, listing again", self.gvr.plural)
            finally:
                if ahead is not None:
                    ahead.cancel()
                    if ahead.done() and not ahead.cancelled():
                        ahead.exception()  # retrieved: the failure that matters was raised above
        raise errors.unavailable(f"could not list {self.gvr.plural}: the list kept changing")

    async def _page(self, namespace: str | None, label_selector: str, limit: int, token: str | None) -> bytes:
        """One page of a paged list, undecoded: listed ahead during the start (:mod:`shared.client.early`), or now."""
        ahead = await self.listed_ahead.take(self.gvr.path(namespace), label_selector, token)
        if ahead is not None:
            return ahead
        query = [("labelSelector", label_selector)] if label_selector else []
        query.append(("limit", str(limit)))
        if token:
            query.append(("continue", token))
        return await get_bytes(self.api, self.gvr.path(namespace), query, self.timeout)

    async def create(
        self, namespace: str | None, body: JSON, dry_run: bool = False, field_validation: str = "Strict"
    ) -> JSON:
        query = self._write_query(dry_run, field_validation)
        return await self._call("POST", self.gvr.path(namespace), query, body)

    async def replace(
        self,
        namespace: str | None,
        name: str,
        body: JSON,
        dry_run: bool = False,
        *,
        field_validation: str = "Strict",
        subresource: str | None = None,
    ) -> JSON:
        """PUT; kube-apiserver answers 409 if ``metadata.resourceVersion`` is stale."""
        query = self._write_query(dry_run, field_validation)
        return await self._call("PUT", self.gvr.path(namespace, name, subresource), query, body)

    async def patch_merge(
        self,
        namespace: str | None,
        name: str,
        patch: JSON,
        dry_run: bool = False,
        *,
        subresource: str | None = None,
    ) -> JSON:
        """JSON merge patch (RFC 7386), sent explicitly as ``application/merge-patch+json``."""
        if not patch:
            # An empty merge patch changes nothing; the client library would also drop the body.
            return await self.get(namespace, name, subresource=subresource)
        query = self._write_query(dry_run)
        return await self._call(
            "PATCH",
            self.gvr.path(namespace, name, subresource),
            query,
            patch,
            content_type="application/merge-patch+json",
        )

    async def apply(self, namespace: str | None, name: str, body: JSON) -> JSON:
        """Server-side apply of ``body`` as this client's field manager (required), taking over conflicting fields.

        One request creates the object or brings it to ``body``; applying the same body again writes
        nothing, which is what makes a repeated write idempotent.  ``force``: the service is the only
        writer meant for these objects; a hand edit of a field it sets is undone, as a controller's
        reconcile would.
        """
        if not self.field_manager:
            raise ValueError("server-side apply needs a field manager")
        query = [("fieldManager", self.field_manager), ("force", "true")]
        return await self._call("PATCH", self.gvr.path(namespace, name), query, body,
                                content_type="application/apply-patch+yaml")

    async def delete(self, namespace: str | None, name: str, options: Mapping[str, object] | None = None) -> JSON:
        """Delete with these DeleteOptions fields (none: kube-apiserver's defaults for the kind); returns what
        kube-apiserver returned (the object, or a Status)."""
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions", **(options or {})}
        return await self._call("DELETE", self.gvr.path(namespace, name), None, body)

    def watch(
        self,
        namespace: str | None = None,
        label_selector: str = "",
        resource_version: str | None = None,
        timeout_seconds: int | None = DEFAULT_WATCH_SECONDS,
        allow_bookmarks: bool = True,
        field_selector: str = "",
    ) -> AsyncGenerator[JSON, None]:
        """Yield raw ``{"type", "object"}`` events until kube-apiserver ends the stream.

        ``ERROR`` events (e.g. 410 "too old resource version") are yielded like any other event,
        for the caller to act on.  The stream is always bounded: the server ends it after
        ``timeout_seconds`` and a silent connection is abandoned shortly after that.
        Failing to connect or losing the connection raises a 503 :class:`ApiError`.
        """
        seconds = timeout_seconds if timeout_seconds else DEFAULT_WATCH_SECONDS
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("timeoutSeconds", str(seconds)),
            ("allowWatchBookmarks", _flag(allow_bookmarks)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        return watch_events(self.api, self.gvr.path(namespace), query, connect_timeout=self.timeout,
                            read_timeout=seconds + WATCH_READ_SLACK)
