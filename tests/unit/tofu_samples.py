"""Sample data for the tofu_agl unit tests: a definition stand-in, its schema, and Application bodies."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from shared.admission import CompiledSchema, compile_schema
from shared.api.errors import ApiError
from tests.recorded import load_recorded
from tofu_agl.definition import Terraform, TofuDefinitionView
from tofu_agl.names import DEFAULT_GROUP

GROUP = DEFAULT_GROUP

#: The id of the plan the recorded pending Terraform holds for approval (``status.plan.pending`` of
#: ``tests/data/status/terraform-pending.yaml``, recorded from tofu-controller): read, never copied.
RECORDED_PENDING: str = load_recorded("terraform-pending")["status"]["plan"]["pending"]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "default": "eu-west-1"},
        "nodeCount": {"type": "integer", "minimum": 1, "default": 3},
        "public": {"type": "boolean", "default": False},
        "cidrBlock": {"type": "string"},
        "ratio": {"type": "number"},
        "zones": {"type": "array", "items": {"type": "string"}},
        "subnets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "cidrBlock": {"type": "string"},
                    "availabilityZone": {"type": "string", "default": "eu-west-1a"},
                },
            },
        },
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "network": {
            "type": "object",
            "default": {},
            "properties": {
                "enableDns": {"type": "boolean", "default": True},
                "natGateway": {"type": "object", "properties": {"perAz": {"type": "boolean"}}},
                "extraRoutes": {"type": "object", "additionalProperties": True},
            },
        },
    },
}


#: The sample kind's ``spec.terraform`` (snake_case names: :class:`tofu_agl.definition.Terraform`'s fields).
TERRAFORM: dict[str, Any] = {
    "source_ref": {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"},
    "path": "./modules/vpc",
    "interval": "10m",
    "retry_interval": "1m",
    "approve_plan": "auto",
    "destroy_resources_on_deletion": True,
    "write_outputs_to_secret": {"name": "{{ .name }}-outputs", "outputs": ["vpc_id"]},
    "service_account_name": "tf-runner",
    "runner_pod_template": {"metadata": {"labels": {"team": "platform"}}, "spec": {"env": [{"name": "A"}]}},
    "store_readable_plan": "human",
}


@dataclass(frozen=True)
class Defn:
    """A TofuApplicationDefinition view, as the definitions module exposes it; ``spec.terraform`` is the model
    itself, so a Terraform field is declared once (on :class:`Terraform`).  :func:`defn` and :func:`with_terraform`
    take its fields as keywords."""

    kind: str = "VPC"
    plural: str = "vpcs"
    singular: str = "vpc"
    prefix: str = "vpc-"
    release_labels: dict[str, str] = field(default_factory=lambda: {"cozystack.io/ui": "true"})
    schema: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(SCHEMA))
    terraform: Terraform = field(default_factory=lambda: Terraform.model_validate(TERRAFORM))

    @property
    def rules(self) -> CompiledSchema:
        return compile_schema(self.schema)[0]

    def render_outputs_secret_name(self, name: str, namespace: str, kind: str) -> str:
        outputs = self.terraform.write_outputs_to_secret
        template = outputs.name if outputs is not None else ""
        for key, value in (("name", name), ("namespace", namespace), ("kind", kind)):
            template = template.replace("{{ .%s }}" % key, value)  # noqa: UP031
        return template


def with_terraform(d: Defn, **changes: Any) -> Defn:
    """``d`` with ``changes``: Terraform fields (snake_case) go into ``d.terraform``, the rest onto ``d``."""
    terraform = {k: v for k, v in changes.items() if k in Terraform.model_fields}
    rest = {k: v for k, v in changes.items() if k not in Terraform.model_fields}
    if terraform:
        rest["terraform"] = Terraform.model_validate(d.terraform.model_dump() | terraform)
    return replace(d, **rest)


def defn(**changes: Any) -> Defn:
    """The sample definition with ``changes`` (see :func:`with_terraform`)."""
    return with_terraform(Defn(), **changes)


def _protocol_check(d: Defn) -> TofuDefinitionView:
    return d  # mypy proves the dataclass satisfies the protocol


def app(name: str = "net", spec: Any = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "VPC",
        "metadata": {"name": name, "namespace": "team", **meta},
        "spec": {"cidrBlock": "10.0.0.0/16"} if spec is None else spec,
    }


def vars_of(tf: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v["value"] for v in tf["spec"]["vars"]}


def causes(exc: pytest.ExceptionInfo[ApiError]) -> dict[str, dict[str, str]]:
    """The causes of a 422, by field."""
    return {c["field"]: c for c in exc.value.details["causes"]}
