"""The kinds the differential tier compares: each sample definition, and its oracle CRD.

For every sample kind the served Application kind is one side; the other is a plain custom resource
with the same structural schema (the rewrite the services publish in OpenAPI,
:func:`shared.schema.structural.structural`) and so the same defaults, served by kube-apiserver
itself.  The oracle kinds live in their own group so both sides share one namespace per example.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.schema.defaults import apply_defaults
from shared.schema.structural import structural
from tests.kube import load_fixture

JSON = dict[str, Any]

#: The group of every oracle CRD; the sample plurals are distinct, so one group holds all four.
ORACLE_GROUP = "differential.example"
VERSION = "v1alpha1"


@dataclass(frozen=True)
class Kind:
    """One sample kind: its definition (served by ``service``) and what the oracle needs to mirror it."""

    #: The sample file under deploy/samples/definitions.
    sample: str
    #: The session fixture running the service that serves the sample.
    service_fixture: str
    #: The group that service serves Applications in.
    group: str
    definition: JSON
    #: The spec is written onto the backing object as given, not defaulted (INTENTIONAL["values-as-given"]).
    spec_as_given: bool

    @property
    def application(self) -> JSON:
        found: JSON = self.definition["spec"]["application"]
        return found

    @property
    def name(self) -> str:
        return str(self.application["kind"])

    @property
    def plural(self) -> str:
        return str(self.application["plural"])

    @property
    def schema(self) -> JSON:
        loaded: JSON = json.loads(self.application["openAPISchema"])
        return loaded

    @property
    def prefix(self) -> str:
        return str(self.definition["spec"]["release"].get("prefix") or "")

    @property
    def definition_resource(self) -> str:
        return f"{self.definition['kind'].lower()}s.cozystack.io"

    def oracle_crd(self) -> JSON:
        """The CRD with the definition's schema made structural (and so its defaults).

        It has a ``status`` subresource: an Application's status is never written by its clients
        (writes ignore it), and with the subresource a CRD's ``generation`` counts spec changes only,
        as the backing objects' does.
        """
        return {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{self.plural}.{ORACLE_GROUP}"},
            "spec": {
                "group": ORACLE_GROUP, "scope": "Namespaced",
                "names": {"kind": self.name, "plural": self.plural, "singular": self.application["singular"],
                          "listKind": f"{self.name}List"},
                "versions": [{
                    "name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": expanded_defaults(structural(self.schema)),
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
                }],
            },
        }


def expanded_defaults(node: Any) -> Any:
    """``node`` with every object default replaced by that default after nested defaulting.

    The same values once defaulted, but in the form kube-apiserver accepts in a CRD: it checks a
    default against ``required`` before nested defaults fill it, so ``default: {}`` on an object
    whose required properties have defaults of their own (postgres' ``quorum`` and ``backup``) is
    refused there, while a definition may say it (the services default recursively).
    """
    if isinstance(node, list):
        return [expanded_defaults(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: expanded_defaults(v) for k, v in node.items()}
    if isinstance(out.get("default"), dict | list):
        out["default"] = apply_defaults(out, out["default"])
    return out


def _kind(sample: str, service_fixture: str, group: str) -> Kind:
    return Kind(sample, service_fixture, group, load_fixture(sample), spec_as_given=service_fixture == "helm_service")


#: At least one kind of each stack, each with a different schema shape: postgres (nested defaults,
#: a transition rule, free-form maps of objects), redis (flat), vpc (required fields, lists of objects,
#: snake_case variables), s3bucket (verbatim variables, enums, manual approval).
KINDS: dict[str, Kind] = {
    "postgres": _kind("postgres.yaml", "helm_service", "apps.cozystack.io"),
    "redis": _kind("redis.yaml", "helm_service", "apps.cozystack.io"),
    "vpc": _kind("vpc.yaml", "tofu_service", "tofu.apps.cozystack.io"),
    "bucket": _kind("bucket.yaml", "tofu_service", "tofu.apps.cozystack.io"),
}
