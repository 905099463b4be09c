"""Async access to kube-apiserver for the services' own reads and writes, one concern per module.

Everything a service does to its backing objects goes through :class:`ObjectClient`
(:mod:`.objects`), so every failure surfaces the same way (:mod:`.statuses`): kube-apiserver's own
``Status`` carried through as an :class:`shared.api.errors.ApiError`, and a kube-apiserver that cannot
be reached as a 503 with ``Retry-After``.  :mod:`.resources` builds the paths, :mod:`.transport` sends
one request and reads its answer, :mod:`.session` builds the ``ApiClient`` it is sent on.
"""

from .objects import ObjectClient
from .resources import GVR
from .session import api_client, client_for, settle_environment
from .statuses import NETWORK_ERRORS, from_api_exception, status_error, to_api_error, unavailable_error
from .transport import DEFAULT_TIMEOUT, DEFAULT_WATCH_SECONDS, request_json, send, watch_events

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_WATCH_SECONDS",
    "GVR",
    "NETWORK_ERRORS",
    "ObjectClient",
    "api_client",
    "client_for",
    "from_api_exception",
    "request_json",
    "send",
    "settle_environment",
    "status_error",
    "to_api_error",
    "unavailable_error",
    "watch_events",
]
