"""Which Application a HelmRelease Event is about: helm-controller's Events relayed onto the Application.

helm-controller reports install, upgrade, test, rollback and uninstall outcomes as Events about the
HelmRelease (:mod:`shared.client.relay` watches them); a tenant who may read only the Application
sees them relayed unchanged. Their messages are what helm-controller also writes into the
HelmRelease's ``Ready`` condition, which the Application's status already shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shared.api.relayed import Watched
from shared.bodies import JSON
from shared.client.events import involved_ref
from shared.client.relay import Resolve, Target

from .definition import HelmDefinitionView
from .names import HR_GROUP, HR_KIND, KIND_LABEL
from .project import to_application

#: The Events relayed: helm-controller's, about HelmReleases.
WATCHED = Watched(HR_GROUP, HR_KIND)


def application_of(release: JSON, definitions: Iterable[HelmDefinitionView], group: str) -> JSON | None:
    """The reference to the Application ``release`` backs among the served ``definitions`` of ``group``, or None."""
    kind = ((release.get("metadata") or {}).get("labels") or {}).get(KIND_LABEL)
    for defn in definitions:
        if defn.kind == kind:
            app = to_application(defn, release, group=group)
            return involved_ref(app) if app is not None else None
    return None


def resolver(served: Callable[[], Iterable[HelmDefinitionView]], group: str) -> Resolve:
    """The relay's view of this service: ``served`` gives the definitions served in ``group`` at the moment of
    the Event."""

    async def resolve(release: JSON, original: JSON) -> Target | None:
        ref = application_of(release, served(), group)
        return Target(ref, str(original.get("message") or "")) if ref is not None else None

    return resolve
