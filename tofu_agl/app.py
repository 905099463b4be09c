"""tofu_agl's wiring: the Tofu-backed kinds, their storages and the definition reconciler."""

from __future__ import annotations

import argparse

from shared.admission.cluster import ClusterAdmission
from shared.api.names import dns1123_subdomain_error
from shared.api.rest import ResourceInfo
from shared.client.informer import Informer
from shared.client.kube import GVR, ObjectClient
from shared.client.relay import EventRelay
from shared.service.kindroles import CLUSTERROLES, KindRoles
from shared.service.runtime import Build, Context, Wiring

from .definition import TofuApplicationDefinition
from .names import DEFAULT_GROUP, TF_GROUP, TF_PLURAL, TF_VERSION, VERSION
from .reconciler import DEFINITIONS, DefinitionReconciler, operator_registry
from .registry import KindRegistry
from .relay import WATCHED, resolver
from .secretvalues import SecretValues
from .storage import SECRETS, ApplicationStorage

COMPONENT = "tofu-agl"
TERRAFORMS = GVR(TF_GROUP, TF_VERSION, TF_PLURAL)


def _group(value: str) -> str:
    error = dns1123_subdomain_error(value)
    if error or "." not in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not an API group name (a DNS subdomain with a dot)"
                                         + (f": {error}" if error else ""))
    return value


def arguments(parser: argparse.ArgumentParser) -> None:
    """Flags only this service takes."""
    parser.add_argument(
        "--group", type=_group, default=DEFAULT_GROUP,
        help="API group the Tofu-backed kinds are served in (default %(default)s); the APIService must match",
    )


def wiring(args: argparse.Namespace) -> Build:
    """The build callback :func:`shared.service.runtime.run` calls once the shared context exists."""
    group: str = args.group

    async def build(ctx: Context) -> Wiring:
        terraforms = ObjectClient(ctx.api, TERRAFORMS, field_manager=COMPONENT)
        definitions = ObjectClient(ctx.api, DEFINITIONS, field_manager=COMPONENT)
        admission = ClusterAdmission(ctx.api)
        admission.start()
        ctx.server.serve_group_version(group, VERSION)
        secrets = ObjectClient(ctx.api, SECRETS)
        secret_values = SecretValues(secrets)  # one per service: the kinds' storages share what was read

        def make_storage(defn: TofuApplicationDefinition, info: ResourceInfo,
                         informer: Informer | None) -> ApplicationStorage:
            return ApplicationStorage(defn, info, terraforms, ctx.events, admission, admission.mutate, informer,
                                      fence_namespace=ctx.fence_namespace, secret_values=secret_values)

        async def kinds_changed() -> None:
            await ctx.discovery_changed(group, VERSION)

        registry = KindRegistry(group, ctx.server.register, ctx.server.unregister, make_storage, kinds_changed)
        roles = KindRoles(ObjectClient(ctx.api, CLUSTERROLES, field_manager=COMPONENT), group, approvable=True)
        reconciler = DefinitionReconciler(registry, definitions, terraforms, ctx.events, ctx.leader, roles)
        relay = EventRelay(terraforms, WATCHED,
                           resolver(lambda: [s.definition for s in registry.served.values()], group, secrets),
                           COMPONENT, ctx.leader)

        async def close() -> None:
            await reconciler.close()
            await admission.stop()

        return Wiring(operator=operator_registry(reconciler, ctx.kopf_login), close=close,
                      tasks=[reconciler.lead, relay.run])

    return build
