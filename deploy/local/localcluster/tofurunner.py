"""Hand a Terraform object's variables to real OpenTofu the way tofu-controller's runner does.

tofu-controller does not build here, so nothing runs its runner; what matters for the Tofu stack
is the step where the runner turns ``spec.vars`` into OpenTofu input, and that step is reproduced
exactly. tofu-controller v0.16.5, ``runner/server_generate_tf_vars.go`` (``GenerateVarsForTF``;
read from the module ``github.com/flux-iac/tofu-controller@v0.16.5`` in Go's module cache): each
``spec.vars`` entry becomes ``vars[name] = value`` (the raw JSON, ``null`` when absent),
``varsFrom`` objects are merged over it, and the map is marshalled as JSON into
``generated.auto.tfvars.json`` in the module's working directory, which ``tofu`` then reads.

The sample modules stand in for the sources the definitions name: the tree of source ``S`` is
``<tree>/S`` and the Terraform's ``path`` selects the module inside it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SAMPLE_MODULES = Path(__file__).resolve().parents[2] / "samples" / "modules"
VAR_FILE = "generated.auto.tfvars.json"
#: CLI configuration that forbids downloading any provider: the modules must work offline.
_OFFLINE = 'provider_installation {\n  direct {\n    exclude = ["*/*/*"]\n  }\n}\n'


class TofuError(RuntimeError):
    """``tofu`` exited non-zero; the message carries its output."""


def module_dir(terraform: dict[str, Any], trees: Sequence[Path] = (SAMPLE_MODULES,)) -> Path:
    source: str = terraform["spec"]["sourceRef"]["name"]
    path: str = terraform["spec"].get("path", ".")
    for tree in trees:
        if (tree / source).is_dir():
            return (tree / source / path).resolve()
    raise TofuError(f"no module tree for source {source!r} in {', '.join(map(str, trees))}")


def var_file(terraform: dict[str, Any], vars_from: dict[str, Any] | None = None) -> str:
    """The runner's ``generated.auto.tfvars.json`` for this Terraform (``vars_from``: what its varsFrom yield)."""
    variables = {var["name"]: var.get("value") for var in terraform["spec"].get("vars", [])}
    variables.update(vars_from or {})
    return json.dumps(variables)


def prepare(terraform: dict[str, Any], workdir: Path, trees: Sequence[Path] = (SAMPLE_MODULES,)) -> Path:
    """A working copy of the module the Terraform names, with the runner's var file written into it."""
    shutil.copytree(module_dir(terraform, trees), workdir)
    (workdir / ".tofurc").write_text(_OFFLINE)
    (workdir / VAR_FILE).write_text(var_file(terraform))
    return workdir


def run(tofu: Path, workdir: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(workdir), "TF_IN_AUTOMATION": "1",
           "TF_CLI_CONFIG_FILE": str(workdir / ".tofurc")}
    result = subprocess.run([str(tofu), *args, "-no-color"], cwd=workdir, env=env, capture_output=True, text=True,
                            timeout=300)
    if result.returncode != 0:
        raise TofuError(f"tofu {' '.join(args)} failed in {workdir}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def plan(tofu: Path, workdir: Path) -> str:
    """``tofu init`` and ``tofu plan`` (saved as ``plan.tfplan``) with local state; returns the plan text."""
    run(tofu, workdir, "init", "-input=false")
    return run(tofu, workdir, "plan", "-input=false", "-out=plan.tfplan")


def apply(tofu: Path, workdir: Path) -> dict[str, Any]:
    """Apply the saved plan; returns the outputs by name."""
    run(tofu, workdir, "apply", "-input=false", "plan.tfplan")
    outputs: dict[str, Any] = json.loads(run(tofu, workdir, "output", "-json"))
    return {name: out["value"] for name, out in outputs.items()}
