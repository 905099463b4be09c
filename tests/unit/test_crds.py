"""crds/: both definition CRDs are well-formed, structural, and accept the fixtures.

The fixtures (cozystack-shaped Helm definitions and Tofu samples) are validated with jsonschema
against each CRD's openAPIV3Schema, after applying the CRD's defaults as kube-apiserver would.
The few CEL rules are evaluated by a tiny interpreter that knows exactly those rule shapes, so a
new rule fails here until it is covered.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from helm_agl.definition import ApplicationDefinition
from helm_agl.definition import acceptance as helm_acceptance
from shared.schema.defaults import apply_defaults
from shared.service.acceptance import Verdict, condition
from tofu_agl.definition import TofuApplicationDefinition
from tofu_agl.definition import acceptance as tofu_acceptance

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "deploy" / "samples" / "definitions"
HELM_CRD = ROOT / "crds" / "cozystack.io_applicationdefinitions.yaml"
TOFU_CRD = ROOT / "crds" / "cozystack.io_tofuapplicationdefinitions.yaml"

CRDS = {
    "helm": (HELM_CRD, "applicationdefinitions", "ApplicationDefinition", ["postgres", "redis"]),
    "tofu": (TOFU_CRD, "tofuapplicationdefinitions", "TofuApplicationDefinition", ["vpc", "bucket"]),
}


def load_yaml(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    return obj


def crd_schema(key: str) -> dict[str, Any]:
    schema: dict[str, Any] = load_yaml(CRDS[key][0])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# --------------------------------------------------------------------------- CEL subset

_MATCHES = re.compile(r"^self\.matches\('(.*)'\)$")


def _cel(rule: str, value: Any) -> bool:
    match = _MATCHES.match(rule)
    if match:
        return re.search(match.group(1), value) is not None
    if rule == "size(self) > 0":
        return len(value) > 0
    raise AssertionError(f"CEL rule not covered by the test interpreter: {rule}")


def schema_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """jsonschema errors plus the CRD's CEL rules, as readable strings."""
    problems = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in Draft202012Validator(schema).iter_errors(value)
    ]
    problems += _cel_problems(schema, value, "")
    return problems


def _cel_problems(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    out = []
    for rule in schema.get("x-kubernetes-validations", []):
        if value is not None and not _cel(rule["rule"], value):
            out.append(f"{path}: {rule['message']}")
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                out += _cel_problems(sub, value[name], f"{path}/{name}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _cel_problems(schema["items"], item, f"{path}/{i}")
    return out


def admitted(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it: defaulted, and valid (asserted)."""
    schema = crd_schema(key)
    stored: dict[str, Any] = apply_defaults(schema, obj)
    assert schema_problems(schema, stored) == []
    return stored


# --------------------------------------------------------------------------- CRD shape


@pytest.mark.parametrize("key", sorted(CRDS))
def test_crd_metadata(key: str) -> None:
    path, plural, kind, _ = CRDS[key]
    crd = load_yaml(path)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.cozystack.io"
    spec = crd["spec"]
    assert spec["group"] == "cozystack.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": plural[:-1],
    }
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["KIND", "ACCEPTED", "AGE"]


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        out += _nodes(node["additionalProperties"], f"{path}[*]")
    if isinstance(node.get("items"), dict):
        out += _nodes(node["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("key", sorted(CRDS))
def test_crd_schema_is_structural(key: str) -> None:
    schema = crd_schema(key)
    Draft202012Validator.check_schema(schema)
    for path, node in _nodes(schema):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{path}: no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        for name in node.get("required", []):
            assert name in node.get("properties", {}), f"{path}: required {name} not declared"
        if "default" in node:
            assert schema_problems(node, node["default"]) == [], f"{path}: default does not validate"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message"), path
            assert node.get("type") != "string" or "maxLength" in node or rule["rule"].startswith("size("), (
                f"{path}: CEL on an unbounded string is expensive"
            )


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize(("key", "fixture"), [(k, f) for k in sorted(CRDS) for f in CRDS[k][3]])
def test_fixture_is_admitted_and_accepted(key: str, fixture: str) -> None:
    obj = load_yaml(FIXTURES / f"{fixture}.yaml")
    assert obj["kind"] == CRDS[key][2]
    stored = admitted(key, obj)
    if key == "helm":
        helm = ApplicationDefinition.from_object(stored)
        assert helm_acceptance(helm, []).accepted
    else:
        tofu = TofuApplicationDefinition.from_object(stored)
        assert tofu_acceptance(tofu, []).accepted


def test_tofu_defaults_from_crd() -> None:
    obj = load_yaml(FIXTURES / "vpc.yaml")
    terraform = obj["spec"]["terraform"]
    for field in ("interval", "approvePlan", "variableNaming", "allowServiceAccountOverride"):
        terraform.pop(field)
    stored = admitted("tofu", obj)["spec"]["terraform"]
    assert stored["interval"] == "10m"
    assert stored["approvePlan"] == "auto"
    assert stored["variableNaming"] == "snake_case"
    assert stored["allowServiceAccountOverride"] is False


def test_postgres_fixture_is_cozystack_shaped() -> None:
    obj = load_yaml(FIXTURES / "postgres.yaml")
    annotations = obj["metadata"]["annotations"]
    assert set(annotations) == {
        "release.cozystack.io/helm-install-timeout",
        "release.cozystack.io/helm-upgrade-timeout",
        "release.cozystack.io/helm-install-disable-wait",
    }
    spec = obj["spec"]
    assert {"dashboard", "secrets", "services"} <= set(spec)
    assert any("resourceNames" in sel for sel in spec["secrets"]["include"])
    assert spec["release"]["healthCheckExprs"]


# --------------------------------------------------------------------------- rejections


def _mutated(fixture: str, path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(load_yaml(FIXTURES / f"{fixture}.yaml"))
    node = obj
    *parents, leaf = path.split(".")
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return obj


_DELETE = object()


@pytest.mark.parametrize(
    ("key", "fixture", "path", "value"),
    [
        ("helm", "redis", "spec.release.prefix", "Redis-"),
        ("helm", "redis", "spec.release.chartRef.kind", "HelmRepository"),
        ("helm", "redis", "spec.release.chartRef", _DELETE),
        ("helm", "redis", "spec.release.waitStrategy", "eventually"),
        ("helm", "redis", "spec.application.kind", "redis"),
        ("helm", "redis", "spec.application.openAPISchema", ""),
        ("helm", "redis", "spec.application.plural", "Redises"),
        ("helm", "postgres", "spec.release.healthCheckExprs", [{"kind": "Cluster"}]),
        ("helm", "redis", "spec.application", _DELETE),
        ("tofu", "vpc", "spec.terraform.sourceRef.kind", "HelmRepository"),
        ("tofu", "vpc", "spec.terraform.approvePlan", "yes"),
        ("tofu", "vpc", "spec.terraform.interval", "10 minutes"),
        ("tofu", "vpc", "spec.terraform.retryInterval", "1d"),
        ("tofu", "vpc", "spec.terraform.variableNaming", "camelCase"),
        ("tofu", "vpc", "spec.terraform.storeReadablePlan", "pretty"),
        ("tofu", "vpc", "spec.terraform.writeOutputsToSecret", {"outputs": ["x"]}),
        ("tofu", "vpc", "spec.terraform.sourceRef", _DELETE),
        ("tofu", "vpc", "spec.terraform", _DELETE),
        ("tofu", "vpc", "spec.release.prefix", "vpc_"),
        ("tofu", "vpc", "spec.application.kind", "vpc"),
    ],
)
def test_crd_rejects(key: str, fixture: str, path: str, value: Any) -> None:
    obj = _mutated(fixture, path, value)
    assert schema_problems(crd_schema(key), apply_defaults(crd_schema(key), obj)) != []


def test_long_prefix_is_admitted_so_acceptance_can_explain() -> None:
    # The CRD does not cap the prefix: the definition is stored and gets InvalidRelease instead.
    obj = _mutated("redis", "spec.release.prefix", "p" * 60)
    stored = admitted("helm", obj)
    assert helm_acceptance(ApplicationDefinition.from_object(stored), []).reason == "InvalidRelease"


def test_unknown_placeholder_is_admitted_so_acceptance_can_explain() -> None:
    obj = _mutated("vpc", "spec.terraform.writeOutputsToSecret", {"name": "{{ .uid }}"})
    stored = admitted("tofu", obj)
    assert tofu_acceptance(TofuApplicationDefinition.from_object(stored), []).reason == "InvalidPlaceholder"


# --------------------------------------------------------------------------- status


@pytest.mark.parametrize("key", sorted(CRDS))
def test_status_written_by_services_validates(key: str) -> None:
    status_schema = crd_schema(key)["properties"]["status"]
    accepted = condition(Verdict.ok(), 2, None, "2024-05-01T10:00:00Z")
    rejected = condition(
        Verdict.reject("KindConflict", "taken by 'other'"), 3, [accepted], "2024-05-02T10:00:00Z"
    )
    for cond in (accepted, rejected):
        assert schema_problems(status_schema, {"observedGeneration": 3, "conditions": [cond]}) == []
    assert schema_problems(status_schema, {"conditions": [{**accepted, "status": "Maybe"}]}) != []
    assert schema_problems(status_schema, {"conditions": [{**accepted, "reason": "not a reason"}]}) != []


def test_tofu_status_not_rolled_out() -> None:
    status_schema = crd_schema("tofu")["properties"]["status"]
    status = {
        "notRolledOut": [{"name": "prod", "namespace": "tenant-a", "fields": ["workspace", "backendConfig"]}]
    }
    assert schema_problems(status_schema, status) == []
    assert schema_problems(status_schema, {"notRolledOut": [{"name": "prod"}]}) != []
