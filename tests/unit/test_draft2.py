"""tofu_agl.draft2: TofuApplicationDefinition -> Draft 2 ApplicationDefinition."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from tofu_agl import draft2
from tofu_agl.definition import Terraform, TofuApplicationDefinition
from tofu_agl.draft2 import to_draft2

FIXTURES = Path(__file__).resolve().parents[2] / "deploy" / "samples" / "definitions"
SAMPLES = ("vpc", "bucket")
#: Every field of spec.terraform the TofuApplicationDefinition model knows (by its JSON name).
TERRAFORM_FIELDS = {field.alias or name for name, field in Terraform.model_fields.items()}


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())
    return obj


def back_to_tofu(converted: dict[str, Any]) -> dict[str, Any]:
    """Rebuild a TofuApplicationDefinition from a converted object (the inverse mapping, for checks)."""
    spec = copy.deepcopy(converted["spec"])
    backend = spec.pop("backend")
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": copy.deepcopy(converted["metadata"]),
        "spec": {**spec, "terraform": backend["terraform"]},
    }


@pytest.mark.parametrize("sample", SAMPLES)
def test_shape(sample: str) -> None:
    src = load(sample)
    out = to_draft2(src)
    assert out["apiVersion"] == "cozystack.io/v1alpha1"
    assert out["kind"] == "ApplicationDefinition"
    assert out["metadata"] == {"name": src["metadata"]["name"]}
    assert list(out["spec"]) == ["application", "release", "backend"] + (["dashboard"] if "dashboard" in
                                                                          src["spec"] else [])
    assert out["spec"]["application"] == src["spec"]["application"]
    assert out["spec"]["release"] == {"prefix": src["spec"]["release"]["prefix"],
                                      "labels": src["spec"]["release"]["labels"]}
    assert out["spec"]["backend"]["type"] == "Terraform"
    assert list(out["spec"]["backend"]) == ["type", "terraform"]
    assert "terraform" not in out["spec"] and "status" not in out


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_terraform_field_is_carried_over(sample: str) -> None:
    src = load(sample)
    out = to_draft2(src)["spec"]["backend"]["terraform"]
    assert out == src["spec"]["terraform"]
    assert list(out) == list(src["spec"]["terraform"]), "field order is kept"


def test_vpc_sample_uses_every_known_terraform_field() -> None:
    """The vpc sample exercises the whole model, so the test above really covers every field."""
    assert set(load("vpc")["spec"]["terraform"]) == TERRAFORM_FIELDS


def test_unknown_terraform_and_spec_fields_survive() -> None:
    src = load("bucket")
    src["spec"]["terraform"]["futureField"] = {"nested": [1, 2]}
    src["spec"]["secrets"] = {"include": [{"resourceNames": ["x"]}]}
    out = to_draft2(src)
    assert out["spec"]["backend"]["terraform"]["futureField"] == {"nested": [1, 2]}
    assert out["spec"]["secrets"] == src["spec"]["secrets"]


def test_dashboard_kept_and_absent_dashboard_not_invented() -> None:
    assert to_draft2(load("vpc"))["spec"]["dashboard"] == load("vpc")["spec"]["dashboard"]
    assert "dashboard" not in to_draft2(load("bucket"))["spec"]


def test_release_defaults_when_missing() -> None:
    src = load("bucket")
    del src["spec"]["release"]
    assert to_draft2(src)["spec"]["release"] == {"prefix": "", "labels": {}}


@pytest.mark.parametrize("sample", SAMPLES)
def test_round_trip(sample: str) -> None:
    """Converting back gives a definition equal to the original, field for field."""
    src = load(sample)
    again = back_to_tofu(to_draft2(src))
    assert again == {k: v for k, v in src.items() if k != "status"}
    assert TofuApplicationDefinition.from_object(again) == TofuApplicationDefinition.from_object(src)


def test_server_fields_and_status_dropped_user_metadata_kept() -> None:
    src = load("vpc")
    src["metadata"].update(uid="u-1", resourceVersion="42", generation=3, creationTimestamp="2026-01-01T00:00:00Z",
                           labels={"team": "net"}, annotations={"note": "x"}, managedFields=[{"manager": "kubectl"}])
    src["status"] = {"conditions": [{"type": "Accepted", "status": "True"}]}
    out = to_draft2(src)
    assert out["metadata"] == {"name": "vpc", "labels": {"team": "net"}, "annotations": {"note": "x"}}
    assert "status" not in out


def test_pure() -> None:
    src = load("vpc")
    before = copy.deepcopy(src)
    out = to_draft2(src)
    assert src == before
    out["spec"]["backend"]["terraform"]["sourceRef"]["name"] = "changed"
    out["spec"]["application"]["kind"] = "Changed"
    assert src == before
    assert to_draft2(src) == to_draft2(before)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["spec"]["terraform"].pop("sourceRef"), "spec.terraform.sourceRef: Field required"),
        (lambda o: o["spec"].pop("application"), "spec.application: Field required"),
        (lambda o: o["spec"]["terraform"].update(approvePlan="sometimes"), "spec.terraform.approvePlan"),
        (lambda o: o["spec"].update(terraform="main.tf"), "spec.terraform: Input should be a valid dictionary"),
        (lambda o: o.update(kind="ApplicationDefinition"), "kind must be 'TofuApplicationDefinition'"),
        (lambda o: o.update(apiVersion="apps.cozystack.io/v1alpha1"), "apiVersion must be 'cozystack.io/v1alpha1'"),
    ],
)
def test_malformed_input_is_a_clear_value_error(mutate: Any, message: str) -> None:
    src = load("vpc")
    mutate(src)
    with pytest.raises(ValueError, match="TofuApplicationDefinition 'vpc'") as info:
        to_draft2(src)
    assert message in str(info.value)


def test_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="expected a TofuApplicationDefinition object"):
        to_draft2(["vpc"])  # type: ignore[arg-type]


def test_cli_prints_converted_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(FIXTURES / f"{name}.yaml") for name in SAMPLES]
    assert draft2.main(files) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == [to_draft2(load(name)) for name in SAMPLES]


def test_cli_reports_bad_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bad = load("vpc")
    del bad["spec"]["terraform"]["sourceRef"]
    path = tmp_path / "defs.yaml"
    path.write_text(yaml.safe_dump_all([load("bucket"), bad]))
    assert draft2.main([str(path)]) == 1
    captured = capsys.readouterr()
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(captured.out)] == ["s3bucket"]
    assert "(document 2)" in captured.err and "spec.terraform.sourceRef" in captured.err

    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(load("vpc"))))
    assert draft2.main(["-"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == to_draft2(load("vpc"))
    assert draft2.main([]) == 2


def test_dump_keeps_order_and_round_trips() -> None:
    out = to_draft2(load("vpc"))
    text = draft2.dump([out])
    assert text.index("application:") < text.index("release:") < text.index("backend:") < text.index("dashboard:")
    assert "openAPISchema: |-" in text
    assert yaml.safe_load(text) == out
