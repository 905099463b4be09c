"""Delegated authorization: ask kube-apiserver (SubjectAccessReview) whether the user may do it.

Aggregated servers do not hold RBAC themselves; kube-apiserver's authorizer chain is the one
source of truth.  One review per request would double the latency of every call, so decisions
are cached briefly (allowed 10 s, denied 5 s, like kube's webhook authorizer defaults keep
revocations effective quickly) and concurrent identical questions share one review.  Anything
that prevents a review from completing (kube-apiserver unreachable, slow, erroring) refuses the
request with a 503 and ``Retry-After``: failing open would hand out access, and a 403 would tell
the user they lack a permission they may well have.  Reviews are time-bounded, so an
unresponsive kube-apiserver never hangs a request.

Members of ``system:masters`` are allowed without a review, as the delegating authorizer of
Kubernetes' generic apiserver does by default: kube-apiserver allows that group in a hard-coded
authorizer ahead of RBAC and webhooks, so its answer is known before asking.  Without this, every
get of a new name by an administrator (or a controller holding that group) costs a second kube
call.  ``--authorization-always-allow-groups`` changes or clears the list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from shared.api.attributes import Attributes, NonResourceAttributes, ResourceAttributes
from shared.api.rest import User
from shared.security.reviews import REVIEW_TIMEOUT, ReviewCache

log = logging.getLogger(__name__)

#: Answers one review: True if allowed.  Raising means "could not decide".
ReviewFunction = Callable[[User, Attributes], Awaitable[bool]]

#: Groups whose members kube-apiserver allows everything, whatever RBAC or a webhook would say.
ALWAYS_ALLOWED_GROUPS = ("system:masters",)

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
    """Cached, fail-closed SubjectAccessReview authorizer (see :mod:`shared.security.reviews`)."""

    def __init__(
        self,
        review: ReviewFunction,
        *,
        allowed_ttl: float = 10.0,
        denied_ttl: float = 5.0,
        max_entries: int = 10_000,
        review_timeout: float = REVIEW_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        always_allow_groups: Iterable[str] = ALWAYS_ALLOWED_GROUPS,
    ) -> None:
        self._review = review
        self._always_allowed = frozenset(always_allow_groups)
        self._cache: ReviewCache[_Key, bool] = ReviewCache(
            "SubjectAccessReview", lambda allowed: allowed_ttl if allowed else denied_ttl,
            max_entries=max_entries, review_timeout=review_timeout, clock=clock)

    def __len__(self) -> int:
        return len(self._cache)

    async def authorize(self, user: User, attrs: Attributes) -> bool:
        """True if ``user`` may perform ``attrs``, False if denied.

        Raises a 503 :class:`~shared.api.errors.ApiError` when the review could not be completed;
        such a failure is not cached, so the next request asks again.
        """
        if not self._always_allowed.isdisjoint(user.groups):
            return True

        async def review() -> bool:
            return bool(await self._review(user, attrs))

        context = {"user": user.name, "verb": attrs.verb, "resource": describe(attrs)}
        return await self._cache.get(_key(user, attrs), review, context)


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
