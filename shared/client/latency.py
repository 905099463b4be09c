"""How long each of a service's own kube-apiserver requests took, for its ``/metrics``.

Through aggregation, a slow answer is either the service's own work or the kube-apiserver request it
made; client-go tells them apart with its ``rest_client_*`` metrics, and the services do the same. The
kube client (:func:`shared.client.kube.send`) reports every request, once its answer's head has arrived,
to the observer registered here for its ``ApiClient``: one per server, so several servers (or tests) in
one process keep their figures apart, as their metric registries do. The benchmark reads them to split
an operation's time into the first hop, the service's own steps and its kube call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import lru_cache

from kubernetes_asyncio import client as kclient

from shared.api.paths import resource_path

#: Told ``(verb, resource, code, seconds)`` of each request: the HTTP method, :func:`resource_of` its
#: path, the HTTP code (``<error>`` when no answer came, as client-go labels it) and the seconds until
#: the answer's head arrived (for a watch: until it started streaming).
Observer = Callable[[str, str, str, float], None]

#: The code of a request that got no answer (refused, reset, timed out).
NO_ANSWER = "<error>"

_observers: weakref.WeakKeyDictionary[kclient.ApiClient, Observer] = weakref.WeakKeyDictionary()


def observe_requests(api: kclient.ApiClient, observer: Observer) -> None:
    """Tell ``observer`` about every request later sent on ``api``; replaces an earlier observer."""
    _observers[api] = observer


def observer_of(api: kclient.ApiClient) -> Observer | None:
    """The observer of ``api``'s requests, if any: the kube client times a request only then."""
    return _observers.get(api)


@lru_cache(maxsize=4096)
def resource_of(path: str) -> str:
    """The resource a REST path names, with its subresource (``helmreleases``, ``helmreleases/status``,
    ``events``, ``subjectaccessreviews``): few enough values to label a metric with, unlike paths, which
    carry names.  Anything else (discovery, ``/version``) is ``""``.  Read once per path: the same objects'
    paths are asked for again and again."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    prefix = {"api": 2, "apis": 3}.get(parts[0] if parts else "", len(parts))
    if len(parts) <= prefix:
        return ""
    found = resource_path(parts[prefix:])
    subresource = found.subresource.split("/", 1)[0]  # what follows it (a proxied path) is no label
    return f"{found.plural}/{subresource}" if subresource else found.plural
