"""What a resource handler (read, write, watch) is given: the resolved request, its storage, who asks, the body.

Handlers get data, not the HTTP request: :mod:`shared.server.routes` resolves the request once and
hands each handler this bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.api.rest import RequestContext, Storage
from shared.server.body import Body
from shared.server.requestinfo import RequestInfo


@dataclass(frozen=True)
class Call:
    info: RequestInfo
    storage: Storage
    ctx: RequestContext
    body: Body

    @property
    def namespace(self) -> str:
        """The URL's namespace; only for handlers that resolution guarantees one (object URLs and writes)."""
        assert self.info.target.namespace is not None
        return self.info.target.namespace

    @property
    def name(self) -> str:
        """The URL's object name; only for object handlers."""
        assert self.info.target.name is not None
        return self.info.target.name
