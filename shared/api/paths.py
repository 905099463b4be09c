"""The part of a REST path after ``/api/<version>`` or ``/apis/<group>/<version>``, split as kube-apiserver's
request-info resolver splits it: the one reading of resource URLs, for the paths the servers answer and the
paths the kube client sends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: What follows ``namespaces/<name>`` when it is the namespace's own subresource, not a resource in it.
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True)
class ResourcePath:
    """``[namespaces/<namespace>/]<plural>[/<name>[/<subresource>]]``."""

    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""


def resource_path(segments: Sequence[str]) -> ResourcePath:
    """Read ``segments`` (at least one, none empty): a namespace's own URLs (``namespaces/x``,
    ``namespaces/x/status``) name the namespace, every longer ``namespaces/x/...`` a resource in it."""
    rest = list(segments)
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    return ResourcePath(plural=rest[0], namespace=namespace, name=rest[1] if len(rest) > 1 else None,
                        subresource="/".join(rest[2:]))
