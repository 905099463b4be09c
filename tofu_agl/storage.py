"""The REST layer of one Tofu-backed kind: Application requests become Terraform operations.

Only I/O lives here: every write goes mutating admission (the cluster's mutating webhooks) -> validate -> build ->
validating admission (ValidatingAdmissionPolicies, validating webhooks) -> kube-apiserver, every read goes
kube-apiserver (or the informer) -> project. Shaped like helm_agl's storage on purpose (Draft 1 keeps the two
stacks side by side so Draft 2 can extract the common interface from real code). Consistent gets go to
kube-apiserver (one get is already the cheapest consistent read), gets at a resourceVersion to the informer, as
kube-apiserver answers them (to kube-apiserver at that resourceVersion when the informer has not reached it: its
watch cache then waits, or answers 504, as for a custom resource); lists are answered from the informer whenever
that is as consistent as kube-apiserver would be (:meth:`Informer.entries`, each object's projection kept per
revision by :class:`shared.client.projections.Projections`), else from kube-apiserver; watches are served from one
:class:`shared.client.informer.Informer` per kind.

What only Tofu has: plan approval.  The ``approve-plan`` annotation is a command checked against
the *live* Terraform on the update path (``kubectl annotate`` is a merge patch, i.e. an update),
and an accepted approval is recorded as an Event naming the user who gave it.  And the plan
preview: a pending plan's summary in the status and the readable plan as the read-only ``plan``
subresource, both read from the objects tofu-controller keeps (:mod:`tofu_agl.plan`).
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
from shared.api.rest import Content, ListOptions, RequestContext, ResourceInfo, WriteOptions
from shared.api.watchview import WatchView, backing_field_selector
from shared.bodies import JSON, Encoded
from shared.client.events import EventRecorder
from shared.client.fence import ReadFence
from shared.client.informer import Informer, Key, Packed, keeping_spec
from shared.client.kube import GVR, ObjectClient
from shared.client.projections import Projections
from shared.client.unchanged import unchanged

from . import plan, plan_read
from .approval import approved_plan, require_approve_permission
from .build import build, fence
from .definition import TofuApplicationDefinition
from .names import (
    TF_KIND,
    backing_name,
    backing_selector,
    fence_name,
    is_application,
    user_selector_key,
    watched_selector,
)
from .project import SPEC_READ, awaiting_approval, pending_plan, table_cells, to_application
from .rollout import PINNED_FIELDS, ROLLOUT_FIELDS
from .secretvalues import Masking, SecretValues
from .validate import validated_variables

log = logging.getLogger(__name__)

CONFIGMAPS = GVR("", "v1", "configmaps")
SECRETS = GVR("", "v1", "secrets")
#: What the cache keeps of a Terraform: no managedFields, and of the spec what its readers use: the projection, the
#: watch and the plan preview, and the definition's rollout round (the fields a definition sets).
CACHE_TRANSFORM = keeping_spec((*SPEC_READ, *ROLLOUT_FIELDS, *PINNED_FIELDS))


class ApplicationStorage:
    """:class:`shared.api.rest.Storage` for the kind one TofuApplicationDefinition publishes."""

    def __init__(
        self,
        definition: TofuApplicationDefinition,
        info: ResourceInfo,
        terraforms: ObjectClient,
        events: EventRecorder,
        admit: Admit = admit_all,
        mutate: Mutate = mutate_nothing,
        informer: Informer | None = None,
        fence_namespace: str | None = None,
        secret_values: SecretValues | None = None,
    ) -> None:
        self.definition = definition
        self.info = info
        self.group = info.group
        self._terraforms = terraforms
        self._events = events
        self._admit = admit
        self._mutate = mutate
        # The readable plans tofu-controller keeps, read with the service's own identity as the Terraforms are.
        self._plan_objects = {"configmaps": ObjectClient(terraforms.api, CONFIGMAPS),
                              "secrets": ObjectClient(terraforms.api, SECRETS)}
        self._summaries = plan_read.PlanSummaries()
        # A cache handed over by the storage this one replaces (same objects, changed definition).
        self._informer = informer or Informer(
            terraforms, label_selector=watched_selector(definition, self.group), name=f"terraforms/{info.kind}",
            transform=CACHE_TRANSFORM,
            fence=None if fence_namespace is None else ReadFence.on(
                terraforms, fence_namespace, fence_name(definition), fence(definition, group=self.group)),
        )
        self._projections = Projections(self._informer, self._to_app)
        # The values of the Secrets the Terraforms read, masked in their messages and plans (secretvalues).
        self._masking = Masking(secret_values or SecretValues(self._plan_objects["secrets"]), self._projections.forget,
                                self._informer.holds)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._informer.start()

    async def stop(self) -> None:
        self._masking.close()
        await self._informer.stop()

    async def kept_backing(self, keep: Callable[[JSON], Any]) -> builtins.list[Any] | None:
        """What ``keep`` makes of each of the kind's Terraforms in the cache (not its read fence), as current as a
        consistent list of them; None when the cache cannot answer so (the caller lists them instead)."""
        return await self._informer.kept(keep, lambda tf: is_application(tf, self.definition.kind, self.group))

    async def wait_synced(self) -> None:
        """Until the kind's cache has listed its backing objects once."""
        await self._informer.wait_synced()

    def hand_over(self) -> Informer:
        """Stop serving and give the cache, still running, to the storage that replaces this one.

        Watches of this storage end (their clients watch again and get the new definition's
        projection); the objects are not listed again, which a definition rollout would otherwise
        pay for on top of its own list.
        """
        self._masking.close()
        self._informer.end_subscriptions()
        return self._informer

    # ------------------------------------------------------------------ helpers
    def _not_found(self, name: str) -> ApiError:
        return errors.not_found(self.info.group, self.info.plural, name)

    def _no_plan(self, name: str, message: str) -> ApiError:
        details = {"group": self.info.group, "kind": f"{self.info.plural}/{plan.SUBRESOURCE}", "name": name}
        return ApiError(404, "NotFound", message, details=details)

    def _to_app(self, tf: JSON, plan_summary: JSON | None = None) -> JSON | None:
        return to_application(self.definition, tf, group=self.group, plan_summary=plan_summary,
                              secret_values=self._masking.known(tf))

    async def _masks(self, tf: JSON) -> builtins.list[str] | None:
        """Every secret value to keep out of what is shown of ``tf``'s plan, once the Secrets it reads were read;
        None when one cannot be read."""
        values = await self._masking.read(tf)
        if values is None:
            return None
        app = self._to_app(tf) or {}
        return [*plan.sensitive_values(self.definition.schema, app.get("spec") or {}), *values]

    def _created_app(self, tf: JSON, admitted: JSON | None, created: JSON) -> JSON:
        """The Application ``created`` represents, its spec taken from ``admitted`` (``tf``'s projection)
        when kube-apiserver stored the variables as sent: the spec is a function of the variables alone."""
        same_vars = (created.get("spec") or {}).get("vars") == (tf.get("spec") or {}).get("vars")
        spec = admitted["spec"] if admitted is not None and same_vars else None
        return to_application(self.definition, created, group=self.group, spec=spec) or {}

    async def _project(self, tf: JSON) -> JSON | None:
        """The Application of ``tf``, with the summary of a plan awaiting approval when one is kept."""
        if not is_application(tf, self.definition.kind, self.group) or not awaiting_approval(tf):
            return self._to_app(tf)
        key = plan_read.PlanSummaries.key(tf)
        summary = self._summaries.get(key)
        if summary is None and plan.plan_location(tf) is not None:
            summary = await self._plan_summary(tf)
            if summary is not None:
                self._summaries.put(key, summary)
        return self._to_app(tf, summary)

    async def _plan_summary(self, tf: JSON) -> JSON | None:
        try:
            found = await self._read_plan(tf)
        except ApiError as exc:
            # The Application is still served; the summary appears once the plan objects can be read.
            log.warning("cannot read the pending plan", extra={"terraform": tf["metadata"].get("name"),
                                                               "namespace": tf["metadata"].get("namespace"),
                                                               "code": exc.code})
            return None
        except (ValueError, OSError) as exc:  # a malformed plan object: never fail the read of the Application
            log.warning("cannot decode the pending plan", extra={"terraform": tf["metadata"].get("name"),
                                                                 "error": type(exc).__name__})
            return None
        if found is None:
            return None
        masks = await self._masks(tf)
        return plan.summary(*found, masks) if masks is not None else None  # no summary rather than one unmasked

    async def _read_plan(self, tf: JSON) -> tuple[str, str] | None:
        """The pending plan's readable text and its format, as tofu-controller stored it; None when not kept."""
        location = plan.plan_location(tf)
        pending = pending_plan(tf)
        if location is None or not pending:
            return None
        objects = await plan_read.plan_objects(self._plan_objects[location.resource], tf["metadata"]["namespace"],
                                               location)
        text = plan.assemble(objects, pending, location.format)
        return (text, location.format) if text is not None else None

    def _backing_selector(self, options: ListOptions) -> str:
        user = selectors.translate_keys(options.label_selector, user_selector_key)
        return ",".join(s for s in (backing_selector(self.definition, self.group), selectors.render(user)) if s)

    def _backing_fields(self, options: ListOptions) -> str:
        return selectors.render_field_selector(
            backing_field_selector(options.field_selector, lambda name: backing_name(self.definition, name)))

    def _rename(self, exc: ApiError, name: str) -> ApiError:
        """Speak of the Application, not the Terraform, for errors a user can act on."""
        if exc.code == 404:
            return exc if errors.names_other_resource(exc, self._terraforms.gvr.plural) else self._not_found(name)
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
            tf = await self._terraforms.get(namespace, backing_name(self.definition, name),
                                            resource_version=resource_version)
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        if not is_application(tf, self.definition.kind, self.group):
            raise self._not_found(name)
        return tf

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
        """The Application; encoded unless a plan awaits approval: its projection is kept per revision of the
        Terraform and shared with lists (:class:`Projections`), so an unchanged Terraform is not projected
        again.  A pending plan's summary is read from other objects, so that projection is made per read."""
        key = (namespace, backing_name(self.definition, name))
        tf = await self._cached(key, name, resource_version) if resource_version else None
        if tf is None:  # kube-apiserver answers at the same version, so its wait and its 504 are the oracle's
            tf = await self._live(namespace, name, resource_version)
        app = await self._project(tf) if awaiting_approval(tf) else self._projections.current(key, tf)
        if app is None:
            raise self._not_found(name)
        return app

    async def _cached(self, key: Key, name: str, resource_version: str) -> JSON | None:
        """The Terraform from the cache when a GET at ``resource_version`` may be answered from it (404 when
        the cache holds none); None: ask kube-apiserver."""
        found = await self._informer.lookup(key, resource_version)
        if found is None:
            return None
        tf: JSON | None = self._informer.unpack(found.packed) if found.packed is not None else None
        if tf is None or not is_application(tf, self.definition.kind, self.group):
            raise self._not_found(name)
        return tf

    async def stored(self, ctx: RequestContext, namespace: str, name: str) -> JSON:
        """The Application as stored: the variables as written (with the defaults of their time) and
        its managedFields."""
        tf = await self._live(namespace, name)
        app = to_application(self.definition, tf, group=self.group, defaulted=False,
                             secret_values=self._masking.known(tf))
        if app is None:
            raise self._not_found(name)
        return app

    async def get_subresource(self, ctx: RequestContext, namespace: str, name: str, subresource: str) -> Content:
        """The readable plan of the pending plan (``plan``): OpenTofu's text, or the JSON plan redacted."""
        tf = await self._live(namespace, name)
        if not pending_plan(tf):
            raise self._no_plan(name, f'{self.info.kind} "{name}" has no pending plan')
        location = plan.plan_location(tf)
        if location is None:
            raise self._no_plan(name, f"no readable plan is kept for {self.info.plural}: the definition's "
                                "terraform.storeReadablePlan is neither human nor json")
        await plan_read.require_read(ctx, namespace, location)
        found = await self._read_plan(tf)
        if found is None:
            raise self._no_plan(name, f'the readable plan of "{pending_plan(tf)}" is not stored yet')
        masks = await self._masks(tf)
        if masks is None:
            raise ApiError(503, "ServiceUnavailable", f'the plan of {self.info.kind} "{name}" is withheld: a Secret '
                           "it may hold values of cannot be read now", retry_after=5)
        body, content_type = plan.readable(*found, masks)
        return Content(body, content_type)

    async def list(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> JSON:
        cached = await self._cached_list(namespace, options)
        if cached is not None:
            return cached
        page = await self._terraforms.list(
            namespace,
            label_selector=self._backing_selector(options),
            field_selector=self._backing_fields(options),
            limit=options.limit, continue_token=options.continue_token,
            resource_version=options.resource_version, resource_version_match=options.resource_version_match,
        )
        items = [app for tf in page.get("items") or [] if (app := await self._project(tf)) is not None]
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
                kind, tf = event["type"], event["object"]
                if kind == "BOOKMARK":
                    yield {"type": kind, "object": {"apiVersion": self.info.api_version, "kind": self.info.kind,
                                                    "metadata": tf.get("metadata", {})}}
                    continue
                if not view.may_show(tf):
                    continue
                app = self._to_app(tf) if kind == "DELETED" else await self._project(tf)
                shown = view.event(kind, app, self._before(event.get("previous")),
                                   tf["metadata"].get("resourceVersion", ""))
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
        app_in = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        await require_approve_permission(ctx, self.info, namespace, app_in, None)
        tf_vars = validated_variables(self.definition, app_in, group=self.group, defaulted=defaulted)
        name = app_in["metadata"]["name"]
        tf = build(self.definition, app_in, group=self.group, tf_vars=tf_vars)
        admitted = self._to_app(tf)
        await self._admit(AdmissionRequest.for_write("CREATE", self.info, ctx, namespace, name, options, admitted))
        try:
            created = await self._terraforms.create(namespace, tf, dry_run=options.dry_run)
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        app = self._created_app(tf, admitted, created)
        warn_of_new_finalizers(app)
        # No Event: kube-apiserver records none for a created custom resource, and one would cost it a write
        # as large as the create (docs/architecture.md, "A request, top to bottom").
        return app

    async def update(self, ctx: RequestContext, namespace: str, name: str, obj: JSON,
                     options: WriteOptions) -> JSON:
        existing = await self._live(namespace, name)
        live_meta = existing.get("metadata") or {}
        wanted_rv = (obj.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != live_meta.get("resourceVersion"):
            raise self._rename(ApiError(409, "Conflict", "stale resourceVersion"), name)
        old = self._to_app(existing)
        obj, defaulted = await self._mutated("UPDATE", ctx, namespace, name, obj, options, old)
        app_in = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace, "name": name}}
        await require_approve_permission(ctx, self.info, namespace, app_in, existing)
        tf_vars = validated_variables(self.definition, app_in, group=self.group, live=existing, defaulted=defaulted)
        approved = approved_plan(app_in, existing)
        tf = build(self.definition, app_in, group=self.group, live=existing, tf_vars=tf_vars)
        await self._admit(AdmissionRequest.for_write("UPDATE", self.info, ctx, namespace, name, options,
                                                     self._to_app(tf), old))
        if unchanged(tf, existing):
            updated = existing  # nothing to write: kube-apiserver would not write it either
        else:
            try:
                updated = await self._terraforms.replace(namespace, tf["metadata"]["name"], tf,
                                                      dry_run=options.dry_run)
            except ApiError as exc:
                raise self._rename(exc, name) from exc
        app = self._to_app(updated) or {}
        warn_of_new_finalizers(app, old)
        if options.dry_run:
            return app
        if approved:
            self._event(app, "PlanApproved", f'{ctx.user.name} approved plan "{approved}"')
            log.info("plan approved", extra={"application": f"{namespace}/{name}", "kind": self.info.kind,
                                             "plan": approved, "user": ctx.user.name})
        elif updated["metadata"].get("resourceVersion") != live_meta.get("resourceVersion"):
            self._event(app, "Updated", f"Terraform {namespace}/{updated['metadata']['name']} updated")
        return app

    async def delete(self, ctx: RequestContext, namespace: str, name: str, options: WriteOptions, *,
                     collection: bool = False) -> JSON:
        existing = await self._live(namespace, name)
        await self._admit(AdmissionRequest.for_write("DELETE", self.info, ctx, namespace, "" if collection else name,
                                                     options, old=self._to_app(existing)))
        try:
            result = await self._terraforms.delete(namespace, existing["metadata"]["name"], options.delete_options())
        except ApiError as exc:
            raise self._rename(exc, name) from exc
        # kube-apiserver answers with the object when finalizers keep it (tofu-controller destroys
        # the infrastructure first; it now has a deletionTimestamp) and with a Status when it is gone.
        if result.get("kind") == TF_KIND:
            app = self._to_app(result) or {}
            if not options.dry_run:
                self._event(app, "Deleting", f"Terraform {namespace}/{existing['metadata']['name']} is "
                                  "being finalized")
            return app
        app = self._to_app(existing) or {}
        if not options.dry_run:
            self._event(app, "Deleted", f"Terraform {namespace}/{existing['metadata']['name']} deleted")
        return errors.deleted(self.info.group, self.info.plural, name, existing["metadata"].get("uid"))

    # ------------------------------------------------------------------ table
    def table_cells(self, obj: JSON) -> builtins.list[Any]:
        return table_cells(obj)
