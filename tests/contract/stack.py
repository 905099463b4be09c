"""What the contract suite knows about each service (:class:`Stack`) and the verbs its tests use (:class:`Contract`).

Every test takes the ``stack`` fixture (conftest.py), a :class:`Stack` saying what differs between the two
services (group, definition kind, backing resource, Table columns, ...).  Each difference is a
field with the reason beside it; everything not a field is, by this suite, the same on both.

The definitions are contract-only (kind ``ContractThing`` in each group), so no other test
mutates them, and every Application lives in the stack's own namespace.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from localcluster.cluster import Cluster

from tests.kube import Api, get_json, kubectl, load_fixture

#: Prefix of the backing object's label/annotation keys that carry the user's labels/annotations.
USER_KEY_PREFIX = "apps.cozystack.io-"
#: kubectl keeps the last applied manifest in an annotation; it is the user's, so it is prefixed too.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

KIND = "ContractThing"
PLURAL = "contractthings"
SINGULAR = "contractthing"
PREFIX = "contract-"
#: The longest backing object name either service allows (Helm: release names; Tofu: so that
#: ``<name>-tf-runner`` is still a DNS label).
MAX_BACKING_NAME = 53

#: One schema for both stacks: top-level keys are single lowercase words, so Tofu variables are
#: named exactly like the spec keys whatever the naming mode.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "size": {"type": "integer", "minimum": 1, "default": 1},
        "tier": {"type": "string", "enum": ["small", "large"], "default": "small"},
        "note": {"type": "string"},
    },
}

JSON = dict[str, Any]

#: The same kind and schema as a plain custom resource: the oracle for CRD semantics.
ORACLE_GROUP = "contract.example"
ORACLE_NAMESPACE = "contract-oracle"
ORACLE_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{ORACLE_GROUP}"},
    "spec": {"group": ORACLE_GROUP, "scope": "Namespaced",
             "names": {"kind": KIND, "plural": PLURAL, "singular": SINGULAR, "listKind": f"{KIND}List"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": SCHEMA}}}}]},
}


def _definition(sample: str, release: JSON, **backend: JSON) -> JSON:
    """The contract definition for the stack whose sample definition is ``sample``: the same
    application and release naming on both, plus the backend's own section."""
    crd = load_fixture(sample)
    application = {"kind": KIND, "plural": PLURAL, "singular": SINGULAR, "openAPISchema": json.dumps(SCHEMA)}
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": SINGULAR},
            "spec": {"application": application,
                     "release": {"prefix": PREFIX, "labels": {"contract.example/origin": "definition"}, **release},
                     **backend}}


def _helm_definition() -> JSON:
    return _definition("redis.yaml", {"chartRef": {"kind": "HelmChart", "name": "contract-v1",
                                                   "namespace": "cozy-public"}})


def _tofu_definition() -> JSON:
    return _definition("vpc.yaml", {}, terraform={
        "sourceRef": {"kind": "GitRepository", "name": "contract-v1", "namespace": "cozy-system"},
        "path": "./modules/contract", "interval": "10m", "approvePlan": "auto", "variableNaming": "verbatim"})


def _helm_rollout(defn: JSON) -> tuple[JSON, Callable[[JSON], bool]]:
    changed = copy.deepcopy(defn)
    changed["spec"]["release"]["chartRef"]["name"] = "contract-v2"
    return changed, lambda backing: bool(backing["spec"]["chartRef"]["name"] == "contract-v2")


def _tofu_rollout(defn: JSON) -> tuple[JSON, Callable[[JSON], bool]]:
    changed = copy.deepcopy(defn)
    changed["spec"]["terraform"]["sourceRef"]["name"] = "contract-v2"
    return changed, lambda backing: bool(backing["spec"]["sourceRef"]["name"] == "contract-v2")


def _helm_spec(backing: JSON) -> JSON:
    values: JSON = backing["spec"].get("values") or {}
    return values


def _tofu_spec(backing: JSON) -> JSON:
    return {v["name"]: v["value"] for v in backing["spec"].get("vars") or []}


@dataclass(frozen=True)
class Stack:
    """What the contract needs to know about one service; every field is a legitimate difference."""

    name: str
    #: The session fixture that runs the service.
    service_fixture: str
    #: API group of the Applications.
    group: str
    #: Namespace the suite's Applications live in (one per stack, so the two never see each other).
    namespace: str
    #: Resource of the definition CRD, and the contract definition itself.
    definition_resource: str
    definition: JSON
    #: The backing resource (kubectl name) and its REST collection root.
    backing: str
    backing_api: str
    #: The backend's own finalizer, as its controller sets it.
    backing_finalizer: str
    #: Table columns: Tofu adds STATUS, PLAN and OUTPUTS (its plan/apply life cycle and outputs
    #: Secret), Helm has VERSION (the chart revision).
    columns: tuple[str, ...]
    #: Tofu writes the spec *after* schema defaults onto the Terraform, so the module receives exactly
    #: what ``kubectl get`` shows; Helm writes the values as given (cozystack's behaviour: the chart
    #: has its own defaults, and a schema default changed later reaches every instance).
    writes_defaults: bool
    #: A definition change that is backend-specific (Helm: chartRef; Tofu: sourceRef) and a check
    #: that a backing object carries it.
    rollout: Callable[[JSON], tuple[JSON, Callable[[JSON], bool]]]
    #: The user's spec as written onto the backing object (Helm: values; Tofu: vars by name).
    written_spec: Callable[[JSON], JSON]
    #: The kind name of the backing object in the service's Event messages.
    backing_kind: str
    #: The backing object's annotation that keeps the Application's managedFields (each stack owns its own).
    managed_fields_annotation: str
    #: The recorded status (tests/data/status) the stack's controller wrote once it finished a generation
    #: successfully: each controller has its own conditions, the Application's common ones must read the same.
    finished_status: str

    # ------------------------------------------------------------------ names and paths

    @property
    def resource(self) -> str:
        """The Application resource, group-qualified: both groups serve a ``contractthings``."""
        return f"{PLURAL}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1alpha1"

    @property
    def collection(self) -> str:
        return f"/apis/{self.api_version}/namespaces/{self.namespace}/{PLURAL}"

    def path(self, name: str) -> str:
        return f"{self.collection}/{name}"

    def backing_name(self, name: str) -> str:
        return PREFIX + name

    def backing_path(self, name: str) -> str:
        return f"{self.backing_api}/namespaces/{self.namespace}/{self.backing.split('.')[0]}/{self.backing_name(name)}"

    @property
    def max_name(self) -> int:
        return MAX_BACKING_NAME - len(PREFIX)

    def manifest(self, name: str, spec: Any = None, **meta: Any) -> JSON:
        return {"apiVersion": self.api_version, "kind": KIND,
                "metadata": {"name": name, "namespace": self.namespace, **meta},
                "spec": {} if spec is None else spec}


STACKS = {
    "helm": Stack(
        name="helm", service_fixture="helm_service", group="apps.cozystack.io", namespace="contract-helm",
        definition_resource="applicationdefinitions.cozystack.io", definition=_helm_definition(),
        backing="helmreleases.helm.toolkit.fluxcd.io", backing_api="/apis/helm.toolkit.fluxcd.io/v2",
        backing_finalizer="finalizers.fluxcd.io", columns=("NAME", "READY", "AGE", "VERSION"),
        writes_defaults=False, rollout=_helm_rollout, written_spec=_helm_spec,
        backing_kind="HelmRelease", managed_fields_annotation="apps.cozystack.io/managed-fields",
        finished_status="helmrelease-installed",
    ),
    "tofu": Stack(
        name="tofu", service_fixture="tofu_service", group="tofu.apps.cozystack.io", namespace="contract-tofu",
        definition_resource="tofuapplicationdefinitions.cozystack.io", definition=_tofu_definition(),
        backing="terraforms.infra.contrib.fluxcd.io", backing_api="/apis/infra.contrib.fluxcd.io/v1alpha2",
        backing_finalizer="finalizers.tf.contrib.fluxcd.io",
        columns=("NAME", "READY", "STATUS", "PLAN", "OUTPUTS", "AGE"),
        writes_defaults=True, rollout=_tofu_rollout, written_spec=_tofu_spec,
        backing_kind="Terraform", managed_fields_annotation="tofu.apps.cozystack.io/managed-fields",
        finished_status="terraform-applied",
    ),
}


def served(cluster: Cluster, group: str) -> list[str]:
    out = kubectl(cluster, "api-resources", f"--api-group={group}", "--cached=false", "-o", "name",
                  check=False).stdout
    return out.split()


# ---------------------------------------------------------------------------------------- helpers


class Contract:
    """The suite's verbs for one stack: create/read Applications and their backing objects, and
    check that a refused request changed nothing."""

    def __init__(self, cluster: Cluster, api: Api, stack: Stack) -> None:
        self.cluster = cluster
        self.api = api
        self.stack = stack

    def apply(self, name: str, spec: Any = None, *flags: str, **meta: Any) -> None:
        kubectl(self.cluster, "apply", *flags, "-f", "-", input=json.dumps(self.stack.manifest(name, spec, **meta)))

    def create(self, name: str, spec: Any = None, **meta: Any) -> JSON:
        code, body = self.api.request("POST", self.stack.collection, self.stack.manifest(name, spec, **meta))
        assert code == 201, (code, body)
        created: JSON = body
        return created

    def get(self, name: str) -> JSON:
        found: JSON = get_json(self.cluster, self.stack.resource, name, "-n", self.stack.namespace)
        return found

    def kubectl(self, *args: str, check: bool = True) -> Any:
        """kubectl with the Application resource's namespace appended."""
        return kubectl(self.cluster, *args, "-n", self.stack.namespace, check=check)

    def kubectl_input(self, *args: str, body: str) -> Any:
        """kubectl reading ``body`` on stdin; the result is returned whatever the exit code."""
        return kubectl(self.cluster, *args, input=body, check=False)

    def patch(self, name: str, patch: JSON, *flags: str) -> None:
        kubectl(self.cluster, "patch", self.stack.resource, name, "-n", self.stack.namespace, "--type=merge",
                "-p", json.dumps(patch), *flags)

    def backing(self, name: str) -> JSON | None:
        """The backing object of Application ``name``, or None if there is none."""
        result = kubectl(self.cluster, "get", self.stack.backing, self.stack.backing_name(name), "-n",
                         self.stack.namespace, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def backing_named(self, backing_name: str) -> JSON:
        """The backing object called ``backing_name`` (it must exist)."""
        found: JSON = get_json(self.cluster, self.stack.backing, backing_name, "-n", self.stack.namespace)
        return found

    def backing_objects(self) -> dict[str, str]:
        """Every backing object of the namespace: name -> resourceVersion."""
        items = get_json(self.cluster, self.stack.backing, "-n", self.stack.namespace)["items"]
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}

    @contextlib.contextmanager
    def nothing_changes(self) -> Iterator[None]:
        """No backing object of the namespace is created, changed or deleted inside the block."""
        before = self.backing_objects()
        yield
        assert self.backing_objects() == before, "a refused request changed backing objects"

    def refused(self, method: str, path: str, body: Any, code: int, reason: str | None = None,
                content_type: str = "application/json") -> JSON:
        """Send a bad request: it gets a Status with ``code`` (and ``reason``) and changes nothing."""
        with self.nothing_changes():
            got, status = self.api.request(method, path, body, content_type=content_type)
        assert got == code, (got, status)
        assert isinstance(status, dict) and status.get("kind") == "Status", status
        assert status["code"] == code and status["status"] == "Failure", status
        if reason is not None:
            assert status["reason"] == reason, status
        return status

    def list_apps(self, query: str = "", all_namespaces: bool = False) -> tuple[int, Any]:
        root = f"/apis/{self.stack.api_version}/{PLURAL}" if all_namespaces else self.stack.collection
        return self.api.request("GET", f"{root}?{query}" if query else root)

    def events_of(self, name: str, namespace: str | None = None) -> list[JSON]:
        scope = ["-n", namespace] if namespace else ["-A"]
        out = kubectl(self.cluster, "get", "events", *scope, "--field-selector", f"involvedObject.name={name}",
                      "-o", "json").stdout
        items: list[JSON] = json.loads(out)["items"]
        return items


def causes(status: JSON) -> list[JSON]:
    found: list[JSON] = (status.get("details") or {}).get("causes") or []
    return found


def cause_fields(status: JSON) -> set[str]:
    return {str(c.get("field", "")) for c in causes(status)}


def selector(text: str) -> str:
    return quote(text, safe="")


def user_annotations(obj: JSON) -> dict[str, str]:
    """An Application's annotations minus the one kubectl apply keeps for itself."""
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k != LAST_APPLIED}
