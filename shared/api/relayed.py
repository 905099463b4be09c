"""A backend controller's Event about a backing object, restated about the Application it backs (pure).

helm-controller and tofu-controller write core/v1 Events (client-go's ``record`` package, through
Flux's ``runtime/events``) whose ``involvedObject`` is the HelmRelease or Terraform. A user who may
read only the Application never sees them, so each service relays them: the same ``type``,
``reason`` and ``message`` (Tofu: redacted first), ``count`` and timestamps, now about the
Application, with the original reporter kept as ``source.component`` / ``reportingComponent``, so
``kubectl describe`` shows *From helm-controller*.

The relayed Event's name is derived from the Application's name and the original's uid, so
writing it again (after a restart, a relist or a leader change) addresses the same object: the
relay applies it server-side, and a grown ``count`` updates it instead of adding another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.bodies import JSON

#: On a relayed Event: ``<namespace>/<name>`` of the original, so it is traceable and never relayed again.
RELAYED_FROM = "agl.cozystack.io/relayed-from"
#: On a relayed Event: the service that relayed it (its ``source`` names the controller that reported).
RELAYED_BY = "agl.cozystack.io/relayed-by"
#: The relayed message's bound: OpenTofu's output can run to pages; the original keeps all of it.
MAX_MESSAGE = 4096
_MAX_NAME = 253
_EVENT_TYPES = ("Normal", "Warning")


@dataclass(frozen=True)
class Watched:
    """Which Events a service relays: those about one backing kind, of one API group."""

    group: str
    kind: str

    @property
    def field_selector(self) -> str:
        """What kube-apiserver filters on (the group is checked by :func:`selects`; Events cannot select it)."""
        return f"involvedObject.kind={self.kind}"


def selects(event: Mapping[str, Any], watched: Watched) -> bool:
    """Whether ``event`` is one the relay handles: about an object of the watched kind and group, with the
    name, namespace and uid that identify it, and not itself a relayed Event."""
    involved = event.get("involvedObject")
    if not isinstance(involved, Mapping):
        return False
    api_version = str(involved.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    annotations = (event.get("metadata") or {}).get("annotations") or {}
    return (involved.get("kind") == watched.kind and group == watched.group and RELAYED_FROM not in annotations
            and all(involved.get(k) for k in ("name", "namespace", "uid")))


def relayed_name(application_name: str, original_uid: str) -> str:
    """The relayed Event's name: one per original Event and Application, the same on every write."""
    return f"{application_name}.{original_uid}"[:_MAX_NAME]


def reporter(event: Mapping[str, Any]) -> str:
    """Who reported the original: ``reportingComponent`` (``reportingController`` in events.k8s.io/v1), else
    ``source.component``."""
    source = event.get("source") or {}
    return str(event.get("reportingComponent") or event.get("reportingController") or source.get("component") or "")


def observed(event: Mapping[str, Any]) -> tuple[int, str | None, str | None]:
    """``(count, firstTimestamp, lastTimestamp)`` of an Event as core/v1 shows it.

    An Event written through events.k8s.io/v1 reads back in core/v1 with ``eventTime`` and ``series``
    and without the legacy fields; both shapes give the same triple.
    """
    series = event.get("series") or {}
    count = int(event.get("count") or series.get("count") or 1)
    first = event.get("firstTimestamp") or _seconds(event.get("eventTime"))
    last = event.get("lastTimestamp") or _seconds(series.get("lastObservedTime")) or first
    return count, first, last


def relayed_event(original: Mapping[str, Any], involved: Mapping[str, Any], message: str, relayer: str) -> JSON:
    """The core/v1 Event that restates ``original`` about ``involved`` (the Application's reference), saying
    ``message`` (the original's, or a redacted form of it)."""
    meta = original.get("metadata") or {}
    count, first, last = observed(original)
    component = reporter(original) or "unknown"
    source = original.get("source") or {}
    namespace = str(involved["namespace"])
    event_type = original.get("type") if original.get("type") in _EVENT_TYPES else "Normal"
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": relayed_name(str(involved["name"]), str(meta.get("uid") or "")),
            "namespace": namespace,
            "annotations": {RELAYED_FROM: f"{meta.get('namespace')}/{meta.get('name')}", RELAYED_BY: relayer},
        },
        "involvedObject": {k: involved[k] for k in ("apiVersion", "kind", "name", "namespace", "uid")
                           if involved.get(k)},
        "type": event_type,
        "reason": str(original.get("reason") or ""),
        "message": message[:MAX_MESSAGE],
        "count": count,
        "source": {"component": component, **({"host": source["host"]} if source.get("host") else {})},
        "reportingComponent": component,
        "reportingInstance": str(original.get("reportingInstance") or source.get("host") or relayer)[:128],
    }
    if first:
        body["firstTimestamp"] = first
    if last:
        body["lastTimestamp"] = last
    return body


def _seconds(micro_time: Any) -> str | None:
    """A MicroTime (``2026-11-26T14:00:00.123456Z``) as a Time (whole seconds), as legacy fields hold it."""
    if not isinstance(micro_time, str) or len(micro_time) < 19:
        return None
    return micro_time[:19] + "Z"
