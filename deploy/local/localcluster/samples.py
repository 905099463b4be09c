"""The sample definitions as this local stack needs them, and nothing else changed.

``deploy/samples/definitions/`` holds the definitions a platform engineer would apply to a real
cluster. Two of their settings cannot work outside a pod, so ``up`` writes local copies into the
cluster's state directory (``<cluster dir>/samples/definitions``) that differ only there:

- ``backendConfig.inClusterConfig: true``, or no backendConfig (tofu-controller then writes one with
  ``in_cluster_config = true``) — OpenTofu's kubernetes state backend would read the runner pod's
  service-account token. Locally the runner is tofu-controller's in-process one, so the copy says
  ``inClusterConfig: false`` and ``configPath: <the agl:tf-runner kubeconfig>``: the same backend, the
  same Secrets (``tfstate-<workspace>-<Terraform name>``, tofu_agl sets the suffix), reached with an
  explicit kubeconfig. A ``customConfiguration`` is left alone.
- ``runnerPodTemplate`` — kept as it is (no pod is made locally, so it has no effect here).

Everything else (the Helm definitions, sources, naming, approval) is applied as written.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TOFU_KIND = "TofuApplicationDefinition"


def localize(definition: dict[str, Any], state_kubeconfig: Path) -> dict[str, Any]:
    """``definition`` as the local stack applies it (a copy; Helm definitions come back unchanged)."""
    if definition.get("kind") != TOFU_KIND:
        return definition
    local = copy.deepcopy(definition)
    terraform = (local.get("spec") or {}).get("terraform")
    if not isinstance(terraform, dict):
        return local
    backend = terraform.setdefault("backendConfig", {"inClusterConfig": True})
    if isinstance(backend, dict) and backend.get("inClusterConfig") and not backend.get("customConfiguration"):
        backend["inClusterConfig"] = False
        backend["configPath"] = str(state_kubeconfig)
    return local


def local_definitions(directory: Path, state_kubeconfig: Path, source: Path = SAMPLES / "definitions") -> Path:
    """Write the localized copy of every sample definition into ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.yaml")):
        docs = [localize(doc, state_kubeconfig) for doc in yaml.safe_load_all(path.read_text()) if doc]
        header = f"# Local copy of deploy/samples/definitions/{path.name} (see localcluster/samples.py)\n"
        (directory / path.name).write_text(header + yaml.safe_dump_all(docs, sort_keys=False))
    return directory
