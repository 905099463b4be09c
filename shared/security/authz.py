"""Delegated authorization: ask kube-apiserver (SubjectAccessReview) whether the user may do it.

Aggregated servers do not hold RBAC themselves; kube-apiserver's authorizer chain is the one
source of truth.  One review per request would double the latency of every call, so decisions
are cached briefly (allowed 10 s, denied 5 s, like kube's webhook authorizer defaults keep
revocations effective quickly) and concurrent identical questions share one review.  Anything
that prevents a review from completing (kube-apiserver unreachable, slow, erroring) refuses the
request with a 503 and ``Retry-After``: failing open would hand out access, and a 403 would tell
the user they lack a permission they may well have.  Reviews are time-bounded, so an
unresponsive kube-apiserver never hangs a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from shared.api import errors
from shared.api.rest import User

log = logging.getLogger(__name__)

#: Bound on one SubjectAccessReview round trip, in seconds.
REVIEW_TIMEOUT = 10.0


@dataclass(frozen=True)
class ResourceAttributes:
    """What is being done to which resource (``resourceAttributes`` of a SubjectAccessReview)."""

    verb: str
    group: str
    version: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""


@dataclass(frozen=True)
class NonResourceAttributes:
    """A request for a URL that names no resource (``nonResourceAttributes``): ``/metrics``, ``/openapi/v2``.

    kube-apiserver authorizes its own non-resource paths this way, with the HTTP method as the
    verb (``get`` for GET and HEAD); RBAC grants them through ``nonResourceURLs``.
    """

    path: str
    verb: str = "get"


#: What a SubjectAccessReview can ask about.
Attributes = ResourceAttributes | NonResourceAttributes

#: Answers one review: True if allowed.  Raising means "could not decide".
ReviewFunction = Callable[[User, Attributes], Awaitable[bool]]

_Key = tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], Attributes]


def _key(user: User, attrs: Attributes) -> _Key:
    # The kind leads the key: a resource and a non-resource question never share an entry, even
    # if a path happened to spell like a resource name.
    kind = "resource" if isinstance(attrs, ResourceAttributes) else "nonResource"
    extra = tuple(sorted((k, tuple(v)) for k, v in user.extra.items()))
    return (kind, user.name, tuple(sorted(user.groups)), extra, attrs)


def describe(attrs: Attributes) -> str:
    """What was asked, for logs: the resource, or the path."""
    return attrs.resource if isinstance(attrs, ResourceAttributes) else attrs.path


class Authorizer:
    """Cached, fail-closed SubjectAccessReview authorizer."""

    def __init__(
        self,
        review: ReviewFunction,
        *,
        allowed_ttl: float = 10.0,
        denied_ttl: float = 5.0,
        max_entries: int = 10_000,
        review_timeout: float = REVIEW_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review = review
        self._review_timeout = review_timeout
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[_Key, tuple[bool, float]] = OrderedDict()
        self._inflight: dict[_Key, asyncio.Future[bool]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def _cached(self, key: _Key) -> bool | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        allowed, expires = entry
        if self._clock() >= expires:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return allowed

    def _store(self, key: _Key, allowed: bool) -> None:
        ttl = self._allowed_ttl if allowed else self._denied_ttl
        self._cache[key] = (allowed, self._clock() + ttl)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)

    async def authorize(self, user: User, attrs: Attributes) -> bool:
        """True if ``user`` may perform ``attrs``, False if denied.

        Raises a 503 :class:`~shared.errors.ApiError` when the review could not be completed;
        such a failure is not cached, so the next request asks again.
        """
        key = _key(user, attrs)
        cached = self._cached(key)
        if cached is not None:
            return cached
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            try:
                async with asyncio.timeout(self._review_timeout):
                    allowed = bool(await self._review(user, attrs))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error(
                    "SubjectAccessReview failed; refusing the request",
                    extra={"user": user.name, "verb": attrs.verb, "resource": describe(attrs),
                           "error": repr(exc)},
                )
                failure = errors.unavailable("the authorization check could not be completed; try again")
                future.set_exception(failure)
                future.exception()  # retrieved: sharing waiters re-raise it, nobody else must log it
                raise failure from exc
            self._store(key, allowed)
            future.set_result(allowed)
            return allowed
        finally:
            if not future.done():
                future.set_exception(errors.unavailable("the authorization check was cancelled; try again"))
                future.exception()
            self._inflight.pop(key, None)


def review_body(user: User, attrs: Attributes) -> dict[str, Any]:
    """The ``authorization.k8s.io/v1 SubjectAccessReview`` sent for one question."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if isinstance(attrs, NonResourceAttributes):
        spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
    else:
        spec["resourceAttributes"] = _resource_attributes(attrs)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def _resource_attributes(attrs: ResourceAttributes) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "verb": attrs.verb,
        "group": attrs.group,
        "version": attrs.version,
        "resource": attrs.resource,
    }
    if attrs.namespace:
        resource["namespace"] = attrs.namespace
    if attrs.name:
        resource["name"] = attrs.name
    if attrs.subresource:
        resource["subresource"] = attrs.subresource
    return resource


def subject_access_review(api_client: Any) -> ReviewFunction:
    """A :data:`ReviewFunction` backed by kube-apiserver (needs ``system:auth-delegator``)."""
    from kubernetes_asyncio import client

    api = client.AuthorizationV1Api(api_client)

    async def review(user: User, attrs: Attributes) -> bool:
        # The client serialises plain dicts as they are; the model classes add nothing here.
        result = await api.create_subject_access_review(
            cast(Any, review_body(user, attrs)), _request_timeout=REVIEW_TIMEOUT
        )
        status = result.status
        if status is None:
            raise RuntimeError("SubjectAccessReview came back without a status")
        if getattr(status, "evaluation_error", None):
            log.warning("SubjectAccessReview evaluation error: %s", status.evaluation_error)
        return bool(status.allowed) and not bool(getattr(status, "denied", False))

    return review


def from_api_client(api_client: Any, **kwargs: Any) -> Authorizer:
    """Convenience: a cached authorizer doing real SubjectAccessReviews through ``api_client``."""
    return Authorizer(subject_access_review(api_client), **kwargs)
