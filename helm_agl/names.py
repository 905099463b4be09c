"""Names: the API group served, the HelmRelease behind it, the label keys that tie the two, and naming.

An Application and its HelmRelease are linked only by names and labels, never by a stored
mapping: the release is ``prefix + name`` in the same namespace, and carries the kind, group and
name labels below.  Every module that needs one of these facts takes it from here, so a label key
or a name rule cannot drift between the request path and the rollout path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shared.client.fence import FENCE_LABEL

if TYPE_CHECKING:
    from .definition import HelmDefinitionView

GROUP = "apps.cozystack.io"
VERSION = "v1alpha1"

#: Prefix of the HelmRelease label/annotation keys that carry the user's own labels/annotations.
LABEL_PREFIX = "apps.cozystack.io-"
KIND_LABEL = "apps.cozystack.io/application.kind"
GROUP_LABEL = "apps.cozystack.io/application.group"
NAME_LABEL = "apps.cozystack.io/application.name"
#: The labels that say whose Application a HelmRelease is: only the service writes them, never a definition.
IDENTITY_LABELS = (KIND_LABEL, GROUP_LABEL, NAME_LABEL)
#: helm-controller's own finalizer on a HelmRelease: the controller's, so never shown on the Application
#: (:mod:`shared.api.ownership`).
CONTROLLER_FINALIZERS = ("finalizers.fluxcd.io",)
#: Written at runtime by the flux shard operator; an update must not revert it.
SHARDING_LABEL = "sharding.fluxcd.io/key"
#: The Application's ``metadata.managedFields``, kept on the HelmRelease (the service's own
#: annotation: no ``apps.cozystack.io-`` prefix, so never shown as a user annotation).
MANAGED_FIELDS_ANNOTATION = "apps.cozystack.io/managed-fields"

HR_GROUP = "helm.toolkit.fluxcd.io"
HR_VERSION = "v2"
HR_PLURAL = "helmreleases"
HR_KIND = "HelmRelease"
HR_API_VERSION = f"{HR_GROUP}/{HR_VERSION}"
#: (group, version, plural) of the backing resource, for kube clients.
HR_GVR = (HR_GROUP, HR_VERSION, HR_PLURAL)
#: The list path of every backing object (all namespaces).
BACKING_PATH = f"/apis/{HR_GROUP}/{HR_VERSION}/{HR_PLURAL}"
#: (group, version, plural) of the definitions this service serves kinds from, and their list path.
DEFINITIONS_GVR = ("cozystack.io", "v1alpha1", "applicationdefinitions")
DEFINITIONS_PATH = "/apis/{}/{}/{}".format(*DEFINITIONS_GVR)

#: Helm release names are at most 53 characters, so the Application name gets what the prefix leaves.
MAX_RELEASE_NAME = 53


def backing_name(defn: HelmDefinitionView, name: str) -> str:
    """HelmRelease name for Application ``name``."""
    return defn.prefix + name


def application_name(defn: HelmDefinitionView, backing_name: str) -> str | None:
    """Application name for HelmRelease ``backing_name``, or None if the name lacks the prefix."""
    if not backing_name.startswith(defn.prefix):
        return None
    name = backing_name[len(defn.prefix) :]
    return name or None


def backing_selector(defn: HelmDefinitionView, group: str) -> str:
    """Label selector matching every HelmRelease that backs an Application of ``defn``'s kind."""
    return f"{watched_selector(defn, group)},!{FENCE_LABEL}"


def watched_selector(defn: HelmDefinitionView, group: str) -> str:
    """What the kind's informer watches: its HelmReleases and its read fence (:mod:`shared.client.fence`)."""
    return kind_selector(defn.kind, group)


def kind_selector(kind: str, group: str) -> str:
    """:func:`watched_selector` of a kind known only by name (a definition not yet read into its model)."""
    return f"{KIND_LABEL}={kind},{GROUP_LABEL}={group}"


def lists_ahead(definitions: Sequence[Mapping[str, Any]], flags: Mapping[str, str | None]) -> list[tuple[str, str]]:
    """The first list of each kind's informer, from the definitions as kube-apiserver sent them: what the entry
    point lists while the service imports itself (:mod:`shared.client.early`)."""
    group = GROUP
    kinds = (((item.get("spec") or {}).get("application") or {}).get("kind") for item in definitions)
    return [(BACKING_PATH, kind_selector(kind, group)) for kind in kinds if isinstance(kind, str) and kind]


def fence_name(defn: HelmDefinitionView) -> str:
    """Name of the kind's read fence: the dot keeps it apart from every backing name (an Application's
    name is a DNS-1035 label)."""
    return f"read-fence.{defn.kind.lower()}"


def user_selector_key(key: str) -> str:
    """HelmRelease label (or annotation) key under which a user's label ``key`` is stored."""
    return LABEL_PREFIX + key


def is_application(obj: Mapping[str, Any], kind: str, group: str) -> bool:
    """Whether the HelmRelease ``obj`` carries the kind and group labels of ``kind`` in ``group``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(KIND_LABEL) == kind and labels.get(GROUP_LABEL) == group and FENCE_LABEL not in labels)
