"""The REST layer of one Helm-backed kind: Application requests become HelmRelease operations.

Only I/O lives here: every write goes mutating admission (the cluster's mutating webhooks) -> validate -> build
-> validating admission (ValidatingAdmissionPolicies, validating webhooks) -> kube-apiserver, every read goes
kube-apiserver (or the informer) -> project. Consistent gets go to kube-apiserver (one get is already the
cheapest consistent read), gets at a resourceVersion to the informer, as kube-apiserver answers them (to
kube-apiserver at that resourceVersion when the informer has not reached it: its watch cache then waits, or
answers 504, as for a custom resource); lists are answered from the informer whenever that is as consistent as
kube-apiserver would be (:meth:`Informer.entries`, each object's projection kept per revision by
:class:`shared.client.projections.Projections`), else from kube-apiserver; watches are served from one
:class:`shared.client.informer.Informer` per kind, so any number of ``kubectl get -w`` share one upstream watch
and survive a kube-apiserver restart.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from shared.admission import AdmissionRequest, Admit, Mutate, admit_all, mutate_nothing, mutate_with_defaults
from shared.admission.cluster import warn_of_new_finalizers
from shared.api import errors, selectors
from shared.api.errors import ApiError
from shared.api.rest import ListOptions, RequestContext, ResourceInfo, WriteOptions
from shared.api.watchview import WatchView, backing_field_selector
from shared.bodies import JSON, Encoded
from shared.client.events import EventRecorder
from shared.client.fence import ReadFence
from shared.client.informer import Cached, Informer, Packed, without_managed_fields
from shared.client.kube import ObjectClient
from shared.client.projections import Projections
from shared.client.unchanged import unchanged

from .build import build, fence
from .definition import ApplicationDefinition
from .names import (
    HR_KIND,
    backing_name,
    backing_selector,
    fence_name,
    is_application,
    user_selector_key,
    watched_selector,
)
from .project import table_cells, to_application
from .validate import validate_application

log = logging.getLogger(__name__)

#: What the cache keeps of a HelmRelease: all but managedFields (its readers use the rest).
CACHE_TRANSFORM = without_managed_fields


class ApplicationStorage:
    """:class:`shared.api.rest.Storage` for the kind one ApplicationDefinition publishes."""

    def __init__(
        self,
        definition: ApplicationDefinition,
        info: ResourceInfo,
        releases: ObjectClient,
        events: EventRecorder,
        admit: Admit = admit_all,
        mutate: Mutate = mutate_nothing,
        informer: Informer | None = None,
        fence_namespace: str | None = None,
    ) -> None:
        self.definition = definition
        self.info = info
        self._releases = releases
        self._events = events
        self._admit = admit
        self._mutate = mutate
        # A cache handed over by the storage this one replaces (same objects, changed definition).
        self._informer = informer or Informer(
            releases, label_selector=watched_selector(definition, info.group), name=f"helmreleases/{info.kind}",
            transform=CACHE_TRANSFORM,
            fence=None if fence_namespace is None else ReadFence.on(
                releases, fence_namespace, fence_name(definition), fence(definition, group=info.group)),
        )
        self._projections = Projections(self._informer, self._to_app)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._informer.start()

    async def stop(self) -> None:
        await self._informer.stop()

    async def kept_backing(self, keep: Callable[[JSON], Any]) -> builtins.list[Any] | None:
        """What ``keep`` makes of each of the kind's HelmReleases in the cache (not its read fence), as current as a
        consistent list of them; None when the cache cannot answer so (the caller lists them instead)."""
        kind, group = self.definition.kind, self.info.group
        return await self._informer.kept(keep, lambda backing: is_application(backing, kind, group))

    async def wait_synced(self) -> None:
        """Until the kind's cache has listed its backing objects once."""
        await self._informer.wait_synced()

    def hand_over(self) -> Informer:
        """Stop serving and give the cache, still running, to the storage that replaces this one.

        Watches of this storage end (their clients watch again and get the new definition's
        projection); the objects are not listed again, which a definition rollout would otherwise
        pay for on top of its own list.
        """
        self._informer.end_subscriptions()
        return self._informer

    # ------------------------------------------------------------------ helpers
    def _not_found(self, name: str) -> ApiError:
        return errors.not_found(self.info.group, self.info.plural, name)

    def _to_app(self, hr: JSON) -> JSON | None:
        return to_application(self.definition, hr, group=self.info.group)

    def _created_app(self, hr: JSON, admitted: JSON | None, created: JSON) -> JSON:
        """The Application ``created`` represents, its spec taken from ``admitted`` (``hr``'s projection)
        when kube-apiserver stored the values as sent: the spec is a function of the values alone."""
        same_values = (created.get("spec") or {}).get("values") == (hr.get("spec") or {}).get("values")
        spec = admitted["spec"] if admitted is not None and same_values else None
        return to_application(self.definition, created, group=self.info.group, spec=spec) or {}

    def _backing_selector(self, options: ListOptions) -> str:
        user = selectors.translate_keys(options.label_selector, user_selector_key)
        own = backing_selector(self.definition, self.info.group)
        return ",".join(s for s in (own, selectors.render(user)) if s)

    def _backing_fields(self, options: ListOptions) -> str:
        return selectors.render_field_selector(
            backing_field_selector(options.field_selector, lambda name: backing_name(self.definition, name)))

    def _rename(self, exc: ApiError, name: str) -> ApiError:
        """Speak of the Application, not the HelmRelease, for errors a user can act on."""
        if exc.code == 404:
            return exc if errors.names_other_resource(exc, self._releases.gvr.plural) else self._not_found(name)
        if exc.reason == "AlreadyExists":
            return errors.already_exists(self.info.group, self.info.plural, name)
        if exc.code == 422:
            return errors.renamed_invalid(exc, self.info.group, self.info.kind, name)
        if exc.code == 409:
            return errors.conflict(
                self.info.group, self.info.plural, name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        return exc

    async def _live(self, namespace: str, name: str, resource_version: str | None = None) -> JSON:
        try:
            hr = await self._releases.get(namespace, backing_name(self.definition, name),
                                          resource_version=resource_version)
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        if not is_application(hr, self.definition.kind, self.info.group):
            raise self._not_found(name)
        return hr

    async def _mutated(self, operation: str, ctx: RequestContext, namespace: str, name: str, obj: JSON,
                       options: WriteOptions, old: JSON | None = None) -> tuple[JSON, JSON | None]:
        """``obj`` after the cluster's mutating admission (as it was sent when nothing changed it), and
        its spec with the schema's defaults when nothing changed it, for validation to go on with."""
        placed = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        request = AdmissionRequest.for_write(operation, self.info, ctx, namespace, name, options, placed, old)
        mutated, defaulted = await mutate_with_defaults(self._mutate, self.definition.schema, request)
        return mutated or obj, defaulted

    def _event(self, app: JSON, reason: str, message: str) -> None:
        """Queued, not awaited: the answer never waits for the Event's own kube write."""
        self._events.emit(app, "Normal", reason, message)

    # ------------------------------------------------------------------ reads
    async def get(self, ctx: RequestContext, namespace: str, name: str,
                  resource_version: str | None = None) -> JSON | Encoded:
        """The Application, encoded: its projection is kept per revision of the HelmRelease and shared with
        lists (:class:`Projections`), so an unchanged HelmRelease is not projected again."""
        key = (namespace, backing_name(self.definition, name))
        found = await self._informer.lookup(key, resource_version) if resource_version else None
        if found is None:  # kube-apiserver answers at the same version, so its wait and its 504 are the oracle's
            app = self._projections.current(key, await self._live(namespace, name, resource_version))
        else:  # answered from the cache, as kube-apiserver answers from its watch cache (404: none there)
            app = None if found.packed is None else self._projections.encoded(Cached(key, found.rv, found.packed))
        if app is None:
            raise self._not_found(name)
        return app

    async def stored(self, ctx: RequestContext, namespace: str, name: str) -> JSON:
        """The Application as stored: the values as given (no defaults) and its managedFields."""
        app = to_application(self.definition, await self._live(namespace, name), group=self.info.group,
                             defaulted=False)
        if app is None:
            raise self._not_found(name)
        return app

    async def list(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> JSON:
        cached = await self._cached_list(namespace, options)
        if cached is not None:
            return cached
        page = await self._releases.list(
            namespace,
            label_selector=self._backing_selector(options),
            field_selector=self._backing_fields(options),
            limit=options.limit, continue_token=options.continue_token,
            resource_version=options.resource_version, resource_version_match=options.resource_version_match,
        )
        items = [app for hr in page.get("items") or [] if (app := self._to_app(hr)) is not None]
        meta = page.get("metadata") or {}
        list_meta = {k: meta[k] for k in ("resourceVersion", "continue", "remainingItemCount") if meta.get(k)}
        return {"apiVersion": self.info.api_version, "kind": self.info.list_kind, "metadata": list_meta,
                "items": items}

    async def _cached_list(self, namespace: str | None, options: ListOptions) -> JSON | None:
        """The list from the informer when kube's resourceVersion semantics allow it (see
        :meth:`Informer.entries`) and it fits in one page; None means: ask kube-apiserver."""
        if options.continue_token or options.exact:
            return None
        user_selector = selectors.parse_label_selector(options.label_selector)
        cached = await self._informer.entries(options.resource_version, namespace)
        if cached is None:
            return None
        entries, rv = cached
        items = self._projections.select(entries, user_selector, options.field_selector)
        if options.limit and len(items) > options.limit:
            return None
        return {"apiVersion": self.info.api_version, "kind": self.info.list_kind,
                "metadata": {"resourceVersion": rv}, "items": items}

    async def watch(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> AsyncIterator[JSON]:
        view = WatchView(namespace, options.label_selector, options.field_selector,
                         lambda name: backing_name(self.definition, name))
        await self._informer.require_synced()
        subscription = self._informer.subscribe(options.resource_version, bookmarks=options.allow_bookmarks,
                                                replay_keys=view.may_show_key)
        try:
            async for event in subscription:
                kind, hr = event["type"], event["object"]
                if kind == "BOOKMARK":
                    yield {"type": kind, "object": {"apiVersion": self.info.api_version, "kind": self.info.kind,
                                                    "metadata": hr.get("metadata", {})}}
                    continue
                if not view.may_show(hr):
                    continue
                shown = view.event(kind, self._to_app(hr), self._before(event.get("previous")),
                                   hr["metadata"].get("resourceVersion", ""))
                if shown is not None:
                    yield shown
        except ApiError as exc:
            yield {"type": "ERROR", "object": exc.status()}
        finally:
            await subscription.aclose()

    def _before(self, previous: Packed | None) -> Callable[[], JSON | None]:
        """The Application a watch event's previous backing object was, projected only when asked for."""
        return lambda: self._to_app(self._informer.unpack(previous)) if previous is not None else None

    # ------------------------------------------------------------------ writes
    async def create(self, ctx: RequestContext, namespace: str, obj: JSON, options: WriteOptions) -> JSON:
        obj, defaulted = await self._mutated("CREATE", ctx, namespace,
                                             str((obj.get("metadata") or {}).get("name") or ""), obj, options)
        validate_application(self.definition, obj, group=self.info.group, defaulted=defaulted)
        name = obj["metadata"]["name"]
        app_in = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        hr = build(self.definition, app_in, group=self.info.group)
        admitted = self._to_app(hr)
        await self._admit(AdmissionRequest.for_write("CREATE", self.info, ctx, namespace, name, options, admitted))
        try:
            created = await self._releases.create(namespace, hr, dry_run=options.dry_run)
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        app = self._created_app(hr, admitted, created)
        warn_of_new_finalizers(app)
        # No Event: kube-apiserver records none for a created custom resource, and one would cost it a write
        # as large as the create (docs/architecture.md, "A request, top to bottom").
        return app

    async def update(self, ctx: RequestContext, namespace: str, name: str, obj: JSON,
                     options: WriteOptions) -> JSON:
        existing = await self._live(namespace, name)
        wanted_rv = (obj.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != existing["metadata"].get("resourceVersion"):
            raise self._rename(ApiError(409, "Conflict", "stale resourceVersion"), name)
        old = self._to_app(existing)
        obj, defaulted = await self._mutated("UPDATE", ctx, namespace, name, obj, options, old)
        validate_application(self.definition, obj, group=self.info.group, live=existing, defaulted=defaulted)
        app_in = {**obj, "metadata": {**obj["metadata"], "namespace": namespace, "name": name}}
        hr = build(self.definition, app_in, group=self.info.group, live=existing)
        await self._admit(AdmissionRequest.for_write("UPDATE", self.info, ctx, namespace, name, options,
                                                     self._to_app(hr), old))
        if unchanged(hr, existing):
            updated = existing  # nothing to write: kube-apiserver would not write it either
        else:
            try:
                updated = await self._releases.replace(namespace, hr["metadata"]["name"], hr,
                                                      dry_run=options.dry_run)
            except ApiError as exc:
                raise self._rename(exc, name) from exc
        app = self._to_app(updated) or {}
        warn_of_new_finalizers(app, old)
        if not options.dry_run and updated["metadata"].get("resourceVersion") != existing["metadata"].get(
            "resourceVersion"
        ):
            self._event(app, "Updated", f"HelmRelease {namespace}/{updated['metadata']['name']} updated")
        return app

    async def delete(self, ctx: RequestContext, namespace: str, name: str, options: WriteOptions, *,
                     collection: bool = False) -> JSON:
        existing = await self._live(namespace, name)
        await self._admit(AdmissionRequest.for_write("DELETE", self.info, ctx, namespace, "" if collection else name,
                                                     options, old=self._to_app(existing)))
        try:
            result = await self._releases.delete(namespace, existing["metadata"]["name"], options.delete_options())
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        # kube-apiserver answers with the object when finalizers keep it (it now has a
        # deletionTimestamp) and with a Status when it is gone at once.
        if result.get("kind") == HR_KIND:
            return self._to_app(result) or {}
        app = self._to_app(existing) or {}
        if not options.dry_run:
            self._event(app, "Deleted", f"HelmRelease {namespace}/{existing['metadata']['name']} deleted")
        return errors.deleted(self.info.group, self.info.plural, name, existing["metadata"].get("uid"))

    # ------------------------------------------------------------------ table
    def table_cells(self, obj: JSON) -> builtins.list[Any]:
        return table_cells(obj)
