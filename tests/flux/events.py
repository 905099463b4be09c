"""Reading the Events the real controllers wrote and those the services relayed, as a user reads them."""

from __future__ import annotations

from typing import Any

from localcluster.cluster import Cluster

from shared.api.relayed import RELAYED_FROM
from tests.kube import get_json, kubectl


def about(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The Events whose involvedObject is ``kind`` ``name`` in ``namespace``."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    items: list[dict[str, Any]] = get_json(cluster, "events", "-n", namespace, "--field-selector", selector)["items"]
    return items


def relayed(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The relayed Events about the Application ``kind`` ``name``."""
    return [e for e in about(cluster, namespace, kind, name)
            if RELAYED_FROM in (e["metadata"].get("annotations") or {})]


def origin(event: dict[str, Any]) -> str:
    """``<namespace>/<name>`` of the original a relayed Event restates."""
    return str(event["metadata"]["annotations"][RELAYED_FROM])


def described_events(cluster: Cluster, plural: str, name: str, namespace: str) -> str:
    """The Events section of ``kubectl describe`` of the Application, as a tenant reads it."""
    text = kubectl(cluster, "describe", plural, name, "-n", namespace).stdout
    return text[text.find("\nEvents:"):] if "\nEvents:" in text else ""


def events_for(cluster: Cluster, kind: str, name: str, namespace: str) -> str:
    """``kubectl events --for <kind>/<name>``."""
    return kubectl(cluster, "events", "-n", namespace, "--for", f"{kind}/{name}").stdout
