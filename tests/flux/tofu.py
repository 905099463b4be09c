"""What the flux tier's Tofu modules share: a module served as a git source, a test kind's definition for
the local stack, and reading an Application's row as kubectl prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from localcluster import flux, gitserver
from localcluster.cluster import Cluster

from tests.kube import kubectl, wait_for

GROUP = "tofu.apps.cozystack.io"
#: How long the real controllers may take for one plan and apply on two busy cores.
SLOW = 240
#: The small module of the tier's Tofu kinds (built-ins only), and the schema of kinds that use it.
LIFECYCLE_MODULE = Path(__file__).resolve().parents[1] / "data" / "modules" / "lifecycle"
LIFECYCLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer"},
        "zones": {"type": "array", "items": {"type": "string"}, "default": []},
        "settings": {"type": "object", "default": {"enabled": False},
                     "properties": {"enabled": {"type": "boolean"}, "label": {"type": "string"}}},
    },
}


def serve_module(cluster: Cluster, name: str, directory: Path) -> str:
    """Publish ``directory`` as the git repository ``name`` of the local git server and wait until the
    GitRepository ``name`` (in the sources namespace) is Ready; returns the commit."""
    server = gitserver.start(cluster)
    commit = gitserver.publish(server.root, name, directory)
    kubectl(cluster, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name, "namespace": flux.SOURCES_NAMESPACE},
        "spec": {"url": gitserver.url_of(server, name), "interval": "10m", "ref": {"branch": "main"}}}))
    kubectl(cluster, "wait", "--for=condition=Ready", f"gitrepositories.source.toolkit.fluxcd.io/{name}",
            "-n", flux.SOURCES_NAMESPACE, "--timeout=120s")
    return commit


def definition(cluster: Cluster, kind: str, plural: str, schema: dict[str, Any], repository: str,
               **terraform: Any) -> dict[str, Any]:
    """A TofuApplicationDefinition of a test kind whose module is the git repository ``repository``, with
    state reached through the local stack's kubeconfig (as ``localcluster.samples`` does for the samples);
    ``terraform`` adds to or overrides ``spec.terraform``."""
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": plural},
        "spec": {
            "application": {"kind": kind, "plural": plural, "singular": kind.lower(),
                            "openAPISchema": json.dumps(schema)},
            "release": {"prefix": f"{kind.lower()}-", "labels": {}},
            "terraform": {
                "sourceRef": {"kind": "GitRepository", "name": repository, "namespace": flux.SOURCES_NAMESPACE},
                "path": ".",
                "interval": "10m",
                "retryInterval": "15s",
                "backendConfig": {"inClusterConfig": False, "configPath": str(flux.state_kubeconfig(cluster))},
                **terraform,
            },
        },
    }


def served(cluster: Cluster, *plurals: str) -> None:
    """Wait until discovery serves every one of ``plurals`` in the Tofu group."""
    wait_for(lambda: set(plurals) <= set(kubectl(
        cluster, "api-resources", f"--api-group={GROUP}", "--cached=false", "-o", "name", check=False
    ).stdout.replace(f".{GROUP}", "").split()), f"the kinds {', '.join(plurals)}", timeout=90)


def row(cluster: Cluster, plural: str, name: str, namespace: str) -> dict[str, str]:
    """The Application's Table row as kubectl prints it, by column name."""
    lines = kubectl(cluster, "get", plural, name, "-n", namespace).stdout.splitlines()
    return dict(zip(lines[0].split(), lines[1].split(), strict=False))


def wait_status(cluster: Cluster, plural: str, name: str, namespace: str, status: str,
                timeout: float = SLOW) -> dict[str, str]:
    """Wait until the STATUS column says ``status``; the row then. A timeout says what the row and the
    Application's conditions last were, so a slow controller and a wrong status read differently."""
    seen: dict[str, Any] = {}

    def shown() -> dict[str, str] | None:
        seen["row"] = row(cluster, plural, name, namespace)
        return seen["row"] if seen["row"].get("STATUS") == status else None

    try:
        result: dict[str, str] = wait_for(shown, f"{plural}/{name} STATUS {status}", timeout=timeout, interval=1)
    except AssertionError as timed_out:
        got = kubectl(cluster, "get", plural, name, "-n", namespace, "-o", "json", check=False).stdout
        conditions = (json.loads(got or "{}").get("status") or {}).get("conditions")
        raise AssertionError(f"{timed_out}; row {seen.get('row')}; conditions {conditions}") from None
    return result
