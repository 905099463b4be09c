"""tofu_agl.generate with real OpenTofu and the real control plane.

The generated definition of tests/data/modules/network is applied and Accepted; an object
that sets nothing gets the Terraform vars tofu-controller would write to the runner's
``generated.auto.tfvars.json`` (runner/server_generate_tf_vars.go in v0.16.5: one JSON object,
name -> value), and real ``tofu plan`` accepts them on the module.  The variable-name rule is
checked against ``tofu validate`` name by name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import build, services
from localcluster.cluster import Cluster

from tests.kube import get_json, kubectl, wait_for
from tofu_agl.variables import RESERVED

MODULES = Path(__file__).resolve().parents[1] / "data" / "modules"
NAMES: dict[str, list[str]] = yaml.safe_load((MODULES / "variable-names.yaml").read_text())
GROUP = "tofu.apps.cozystack.io"
NS = "tenant-generate"
TF = "terraforms.infra.contrib.fluxcd.io"


@pytest.fixture(scope="module")
def tofu_binary() -> Path:
    """The pinned OpenTofu the local control plane builds (``nox -s tests`` builds it in the background)."""
    return build.ensure_tofu()


def tofu(binary: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": os.devnull}
    return subprocess.run([str(binary), f"-chdir={workdir}", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=300)


def generated(module: str, *flags: str) -> dict[str, Any]:
    """The definition the CLI prints (as a platform engineer runs it)."""
    out = subprocess.run([sys.executable, "-m", "tofu_agl.generate", str(MODULES / module), *flags],
                         capture_output=True, text=True, check=True).stdout
    definition: dict[str, Any] = yaml.safe_load(out)
    return definition


def wait_accepted(cluster: Cluster, name: str) -> None:
    kubectl(cluster, "wait", "--for=condition=Accepted=True", "--timeout=60s", f"tofuapplicationdefinition/{name}")


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster, tofu_service: services.Running) -> Iterator[Cluster]:
    """The shared control plane; kinds and names here are not used by other test modules."""
    kubectl(control_plane, "create", "namespace", NS, check=False)
    yield control_plane
    kubectl(control_plane, "delete", "namespace", NS, "--wait=false", check=False)
    kubectl(control_plane, "delete", "tofuapplicationdefinitions", "generatednetwork", "generatedzone",
            "--ignore-not-found", check=False)


# ------------------------------------------------------------------------------ generated definitions


@pytest.fixture(scope="module")
def defaults_vars(cluster: Cluster) -> dict[str, Any]:
    """The generated network definition applied and Accepted; the vars of an object that sets nothing."""
    definition = generated("network", "--kind", "GeneratedNetwork", "--source-name", "modules", "--path", "./network")
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(definition))
    wait_accepted(cluster, "generatednetwork")
    app = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "GeneratedNetwork",
           "metadata": {"name": "defaults", "namespace": NS}, "spec": {}}
    wait_for(lambda: kubectl(cluster, "apply", "-f", "-", input=json.dumps(app)), "kind served", timeout=60)
    terraform = get_json(cluster, TF, "generatednetwork-defaults", "-n", NS)
    return {var["name"]: var["value"] for var in terraform["spec"]["vars"]}


def test_generated_definition_is_accepted_and_serves_its_defaults(defaults_vars: dict[str, Any]) -> None:
    assert defaults_vars["region"] == "eu-west-1"
    assert defaults_vars["subnets"][1]["nat_gateway"]["routes"] == [
        {"destination_cidr": "0.0.0.0/0", "next_hop_type": "gateway"}]
    assert "admin_password" not in defaults_vars  # sensitive: the module's own default applies
    assert "flow_log_retention_days" not in defaults_vars  # default null: left to the module


def test_defaults_are_variables_tofu_plan_accepts(
    defaults_vars: dict[str, Any], tofu_binary: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "network"
    shutil.copytree(MODULES / "network", workdir)
    (workdir / "generated.auto.tfvars.json").write_text(json.dumps(defaults_vars))
    init = tofu(tofu_binary, workdir, "init", "-input=false", "-no-color")
    assert init.returncode == 0, init.stderr
    plan = tofu(tofu_binary, workdir, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out=plan.bin")
    assert plan.returncode == 2, plan.stdout + plan.stderr  # 2: succeeded, with changes
    shown = json.loads(tofu(tofu_binary, workdir, "show", "-json", "plan.bin").stdout)
    planned = {name: v["value"] for name, v in shown["variables"].items()}
    # what OpenTofu computed from the vars equals the vars: defaults were applied the same way
    for name, value in defaults_vars.items():
        assert planned[name] == value or (name == "dns_servers" and sorted(planned[name]) == sorted(value)), name
    assert planned["admin_password"] == "change-me-please"
    assert planned["flow_log_retention_days"] is None


def test_verbatim_camel_case_definition_is_accepted(cluster: Cluster) -> None:
    """recordSet (camelCase) is an OpenTofu identifier: variableNaming verbatim serves it."""
    definition = generated("edges", "--kind", "GeneratedZone", "--variable-naming", "verbatim")
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(definition))
    wait_accepted(cluster, "generatedzone")
    assert "recordSet" in json.loads(definition["spec"]["application"]["openAPISchema"])["properties"]


@pytest.mark.parametrize("module", ["network", "edges"])
def test_fixture_modules_are_valid_opentofu(tofu_binary: Path, tmp_path: Path, module: str) -> None:
    """The generator's expectations are only worth something on modules OpenTofu itself accepts."""
    workdir = tmp_path / module
    shutil.copytree(MODULES / module, workdir)
    init = tofu(tofu_binary, workdir, "init", "-input=false", "-no-color", "-backend=false")
    assert init.returncode == 0, init.stderr
    result = tofu(tofu_binary, workdir, "validate", "-no-color")
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------ the name rule


def validates(binary: Path, workdir: Path, name: str) -> subprocess.CompletedProcess[str]:
    """``tofu validate`` on a module declaring one variable called ``name``."""
    workdir.mkdir()
    (workdir / "main.tf").write_text(f"variable {json.dumps(name)} {{\n  type = string\n}}\n")
    init = tofu(binary, workdir, "init", "-input=false", "-no-color", "-backend=false")
    if init.returncode != 0:
        return init
    return tofu(binary, workdir, "validate", "-no-color")


def test_valid_and_non_ascii_names_are_accepted_by_opentofu(tofu_binary: Path, tmp_path: Path) -> None:
    for i, name in enumerate(NAMES["valid"] + NAMES["non_ascii"]):
        result = validates(tofu_binary, tmp_path / str(i), name)
        assert result.returncode == 0, (name, result.stdout + result.stderr)


def test_names_refused_here_are_refused_by_opentofu(tofu_binary: Path, tmp_path: Path) -> None:
    for i, name in enumerate(NAMES["invalid"] + sorted(RESERVED)):
        result = validates(tofu_binary, tmp_path / str(i), name)
        assert result.returncode != 0, name
        assert "Invalid variable name" in result.stdout + result.stderr, (name, result.stdout + result.stderr)
