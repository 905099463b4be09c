"""Bearer tokens, authenticated by kube-apiserver (TokenReview), for clients that call the port directly.

kube-apiserver's front proxy is how users reach the served kinds, but a scraper such as Prometheus
calls ``/metrics`` on the service's own port with its ServiceAccount token, as it scrapes
kube-apiserver's own ``/metrics``.  Aggregated servers authenticate such a token the way
kube-apiserver would, by asking it (``authentication.k8s.io/v1 TokenReview``, granted by
``system:auth-delegator``); what the token may do is then decided by the same SubjectAccessReview
as for any other user.  Answers are cached for 10 s (kube's delegated-authentication default),
keyed by a hash of the token, never the token itself.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from shared.api import errors
from shared.api.rest import User
from shared.security.reviews import REVIEW_TIMEOUT, ReviewCache

#: Answers one TokenReview: the user, or None when kube-apiserver did not authenticate the token.
TokenReviewFunction = Callable[[str], Awaitable[User | None]]

#: How long an answer is kept, in seconds.
TOKEN_TTL = 10.0


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme is case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class TokenAuthenticator:
    """Cached, fail-closed TokenReview authentication."""

    def __init__(self, review: TokenReviewFunction, *, ttl: float = TOKEN_TTL, max_entries: int = 10_000,
                 review_timeout: float = REVIEW_TIMEOUT, clock: Callable[[], float] = time.monotonic) -> None:
        self._review = review
        self._cache: ReviewCache[str, User | None] = ReviewCache(
            "TokenReview", lambda _: ttl, max_entries=max_entries, review_timeout=review_timeout, clock=clock)

    async def authenticate(self, token: str) -> User:
        """The token's user; 401 if kube-apiserver does not know the token, 503 if it could not be asked."""

        async def review() -> User | None:
            return await self._review(token)

        digest = hashlib.sha256(token.encode()).hexdigest()
        user = await self._cache.get(digest, review, {"token_sha256": digest[:12]})
        if user is None:
            raise errors.unauthorized("the bearer token was not accepted by kube-apiserver")
        return user


def review_body(token: str) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}


def token_review(api_client: Any) -> TokenReviewFunction:
    """A :data:`TokenReviewFunction` backed by kube-apiserver (needs ``system:auth-delegator``)."""
    from kubernetes_asyncio import client

    api = client.AuthenticationV1Api(api_client)

    async def review(token: str) -> User | None:
        result = await api.create_token_review(cast(Any, review_body(token)), _request_timeout=REVIEW_TIMEOUT)
        status = result.status
        if status is None:
            raise RuntimeError("TokenReview came back without a status")
        if not status.authenticated or status.user is None or not status.user.username:
            return None
        extra = {k: tuple(v) for k, v in (status.user.extra or {}).items()}
        return User(name=status.user.username, groups=tuple(status.user.groups or ()), extra=extra)

    return review
