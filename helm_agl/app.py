"""helm_agl's wiring: the Helm-backed kinds, their storages and the definition reconciler."""

from __future__ import annotations

import argparse

from shared.admission.cluster import ClusterAdmission
from shared.api.rest import ResourceInfo
from shared.client.informer import Informer
from shared.client.kube import GVR, ObjectClient
from shared.client.relay import EventRelay
from shared.service.kindroles import CLUSTERROLES, KindRoles
from shared.service.runtime import Build, Context, Wiring

from .definition import ApplicationDefinition
from .names import GROUP, HR_GVR, VERSION
from .reconciler import DEFINITIONS, DefinitionReconciler, operator_registry
from .registry import KindRegistry
from .relay import WATCHED, resolver
from .storage import ApplicationStorage

COMPONENT = "helm-agl"
HELMRELEASES = GVR(*HR_GVR)


def wiring(args: argparse.Namespace) -> Build:
    """The build callback :func:`shared.service.runtime.run` calls once the shared context exists."""

    async def build(ctx: Context) -> Wiring:
        releases = ObjectClient(ctx.api, HELMRELEASES, field_manager=COMPONENT)
        definitions = ObjectClient(ctx.api, DEFINITIONS, field_manager=COMPONENT)
        admission = ClusterAdmission(ctx.api)
        admission.start()
        ctx.server.serve_group_version(GROUP, VERSION)

        def make_storage(defn: ApplicationDefinition, info: ResourceInfo,
                         informer: Informer | None) -> ApplicationStorage:
            return ApplicationStorage(defn, info, releases, ctx.events, admission, admission.mutate, informer,
                                      fence_namespace=ctx.fence_namespace)

        async def kinds_changed() -> None:
            await ctx.discovery_changed(GROUP, VERSION)

        registry = KindRegistry(GROUP, ctx.server.register, ctx.server.unregister, make_storage, kinds_changed)
        roles = KindRoles(ObjectClient(ctx.api, CLUSTERROLES, field_manager=COMPONENT), GROUP)
        reconciler = DefinitionReconciler(registry, definitions, releases, ctx.events, ctx.leader, roles)
        relay = EventRelay(releases, WATCHED,
                           resolver(lambda: [s.definition for s in registry.served.values()], GROUP),
                           COMPONENT, ctx.leader)

        async def close() -> None:
            await reconciler.close()
            await admission.stop()

        return Wiring(operator=operator_registry(reconciler, ctx.kopf_login), close=close,
                      tasks=[reconciler.lead, relay.run])

    return build
