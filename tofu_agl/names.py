"""Names: the API group served, the Terraform behind it, the label keys that tie the two, and naming.

An Application and its Terraform are linked only by names and labels, never by a stored mapping:
the Terraform is ``prefix + name`` in the same namespace and carries the kind, group and name
labels below.  Every module that needs one of these facts takes it from here, so a label key or a
name rule cannot drift between the request path and the rollout path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shared.client.fence import FENCE_LABEL

if TYPE_CHECKING:
    from .definition import TofuDefinitionView

DEFAULT_GROUP = "tofu.apps.cozystack.io"
VERSION = "v1alpha1"

#: User labels and annotations are stored on the Terraform under this prefix (as for Helm), so
#: they never collide with the controller's or ours and can be read back.
LABEL_PREFIX = "apps.cozystack.io-"
KIND_LABEL = "apps.cozystack.io/application.kind"
GROUP_LABEL = "apps.cozystack.io/application.group"
NAME_LABEL = "apps.cozystack.io/application.name"
#: The labels that say whose Application a Terraform is: only the service writes them, never a definition.
IDENTITY_LABELS = (KIND_LABEL, GROUP_LABEL, NAME_LABEL)
#: tofu-controller's own finalizer on a Terraform: the controller's, so never shown on the Application
#: (:mod:`shared.api.ownership`).
CONTROLLER_FINALIZERS = ("finalizers.tf.contrib.fluxcd.io",)
#: Flux sharding label: owned by whoever operates the controllers, so an update keeps it.
SHARDING_LABEL = "sharding.fluxcd.io/key"
#: The Application's ``metadata.managedFields``, kept on the Terraform (the service's own
#: annotation: no ``apps.cozystack.io-`` prefix, so never shown as a user annotation).
MANAGED_FIELDS_ANNOTATION = "tofu.apps.cozystack.io/managed-fields"

TF_GROUP = "infra.contrib.fluxcd.io"
TF_VERSION = "v1alpha2"
TF_PLURAL = "terraforms"
TF_KIND = "Terraform"
TF_API_VERSION = f"{TF_GROUP}/{TF_VERSION}"
#: The list path of every backing object (all namespaces).
BACKING_PATH = f"/apis/{TF_GROUP}/{TF_VERSION}/{TF_PLURAL}"
#: (group, version, plural) of the definitions this service serves kinds from, and their list path.
DEFINITIONS_GVR = ("cozystack.io", "v1alpha1", "tofuapplicationdefinitions")
DEFINITIONS_PATH = "/apis/{}/{}/{}".format(*DEFINITIONS_GVR)

#: tofu-controller's "approve every plan" value of ``spec.approvePlan`` (and the definition's mode).
AUTO = "auto"

#: The two command annotations a user sets on an Application.
APPROVE_ANNOTATION = "tofu.apps.cozystack.io/approve-plan"
RUNNER_SA_ANNOTATION = "tofu.apps.cozystack.io/runner-service-account"

#: tofu-controller runner pods are named ``<terraform name>-tf-runner`` and must stay a 63-char
#: DNS label, which leaves 53 characters for the Terraform name.
MAX_TERRAFORM_NAME = 53


def backing_name(defn: TofuDefinitionView, name: str) -> str:
    """Name of the Terraform backing Application ``name``."""
    return defn.prefix + name


def application_name(defn: TofuDefinitionView, backing_name: str) -> str | None:
    """Name of the Application a Terraform backs, or None when the name lacks the prefix."""
    if not backing_name.startswith(defn.prefix):
        return None
    name = backing_name[len(defn.prefix) :]
    return name or None


def backing_selector(defn: TofuDefinitionView, group: str) -> str:
    """Label selector matching every Terraform that backs an Application of ``defn``'s kind."""
    return f"{watched_selector(defn, group)},!{FENCE_LABEL}"


def watched_selector(defn: TofuDefinitionView, group: str) -> str:
    """What the kind's informer watches: its Terraforms and its read fence (:mod:`shared.client.fence`)."""
    return kind_selector(defn.kind, group)


def kind_selector(kind: str, group: str) -> str:
    """:func:`watched_selector` of a kind known only by name (a definition not yet read into its model)."""
    return f"{KIND_LABEL}={kind},{GROUP_LABEL}={group}"


def lists_ahead(definitions: Sequence[Mapping[str, Any]], flags: Mapping[str, str | None]) -> list[tuple[str, str]]:
    """The first list of each kind's informer, from the definitions as kube-apiserver sent them: what the entry
    point lists while the service imports itself (:mod:`shared.client.early`)."""
    group = flags.get("group") or DEFAULT_GROUP
    kinds = (((item.get("spec") or {}).get("application") or {}).get("kind") for item in definitions)
    return [(BACKING_PATH, kind_selector(kind, group)) for kind in kinds if isinstance(kind, str) and kind]


def fence_name(defn: TofuDefinitionView) -> str:
    """Name of the kind's read fence: the dot keeps it apart from every backing name (an Application's
    name is a DNS-1035 label)."""
    return f"read-fence.{defn.kind.lower()}"


def user_selector_key(key: str) -> str:
    """Terraform label (or annotation) key under which a user's label ``key`` is stored."""
    return LABEL_PREFIX + key


def is_application(obj: Mapping[str, Any], kind: str, group: str) -> bool:
    """Whether the Terraform ``obj`` carries the labels of an Application of ``kind`` in ``group``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(KIND_LABEL) == kind and labels.get(GROUP_LABEL) == group and FENCE_LABEL not in labels)

