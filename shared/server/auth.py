"""Authentication and authorization glue: who is asking, and may they (fail closed either way).

The mechanisms live in :mod:`shared.security` (front-proxy headers, SubjectAccessReview); this
module is what the server does with them: 401 without an authenticator, 403 without an
authorizer, and every decision counted.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from shared.api import errors
from shared.api.attributes import Attributes, NonResourceAttributes
from shared.api.rest import User
from shared.server.metrics import Metrics

log = logging.getLogger(__name__)

#: Maps a request to the user the front proxy asserted; raises 401 ApiError otherwise.
Authenticator = Callable[[web.Request], "User | Awaitable[User]"]


class AuthorizerLike(Protocol):
    """What the HTTP layer needs from an authorizer (:class:`shared.security.authz.Authorizer` is one)."""

    async def authorize(self, user: User, attrs: Attributes) -> bool: ...


class Gate:
    """The configured authenticator and authorizer; both can be swapped while serving."""

    def __init__(
        self, authenticator: Authenticator | None, authorizer: AuthorizerLike | None, metrics: Metrics
    ) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self._metrics = metrics

    async def authenticate(self, request: web.Request) -> User:
        if self.authenticator is None:
            raise errors.unauthorized("no authenticator is configured")
        result = self.authenticator(request)
        return await result if inspect.isawaitable(result) else result

    async def authorize(self, user: User, attrs: Attributes) -> None:
        """Return if ``user`` may do ``attrs``; raise 403 otherwise."""
        allowed = False
        if self.authorizer is None:
            log.warning("no authorizer is configured; denying", extra={"user": user.name, "verb": attrs.verb})
        else:
            allowed = await self.authorizer.authorize(user, attrs)
        self._metrics.decided(allowed)
        if allowed:
            return
        if isinstance(attrs, NonResourceAttributes):
            raise errors.forbidden_path(user.name, attrs.verb, attrs.path)
        # kube-apiserver names a subresource as "<resource>/<subresource>" in the message.
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        raise errors.forbidden(user.name, attrs.verb, resource, attrs.group, attrs.namespace, attrs.name)
