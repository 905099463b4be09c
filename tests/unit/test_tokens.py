"""Bearer-token authentication (TokenReview, faked here) and how a request picks its authenticator."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from shared.api import errors
from shared.api.rest import User
from shared.security.authn import DelegatingAuthenticator, FrontProxyAuthenticator, RequestHeaderConfig
from shared.security.tokens import TokenAuthenticator, bearer_token, review_body

PROMETHEUS = User("system:serviceaccount:monitoring:prometheus", ("system:serviceaccounts", "system:authenticated"))


class FakeTokenReview:
    def __init__(self) -> None:
        self.tokens = {"good": PROMETHEUS}
        self.asked: list[str] = []
        self.fail = False

    async def __call__(self, token: str) -> User | None:
        self.asked.append(token)
        if self.fail:
            raise ConnectionError("kube-apiserver is down")
        return self.tokens.get(token)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None and bearer_token("Bearer ") is None and bearer_token(None) is None
    assert review_body("abc")["spec"] == {"token": "abc"}


async def test_tokens_are_reviewed_cached_and_refused() -> None:
    review, clock = FakeTokenReview(), Clock()
    tokens = TokenAuthenticator(review, clock=clock)
    assert await tokens.authenticate("good") == PROMETHEUS
    assert await tokens.authenticate("good") == PROMETHEUS
    with pytest.raises(errors.ApiError) as err:
        await tokens.authenticate("stolen")
    assert err.value.code == 401
    assert review.asked == ["good", "stolen"]
    clock.now += 10.0
    review.tokens.clear()  # revoked
    with pytest.raises(errors.ApiError) as err:
        await tokens.authenticate("good")
    assert err.value.code == 401


async def test_failed_review_is_503_and_not_remembered() -> None:
    review = FakeTokenReview()
    review.fail = True
    tokens = TokenAuthenticator(review, clock=Clock())
    with pytest.raises(errors.ApiError) as err:
        await tokens.authenticate("good")
    assert err.value.code == 503
    review.fail = False
    assert await tokens.authenticate("good") == PROMETHEUS


class Transport:
    def __init__(self, peercert: dict[str, Any] | None) -> None:
        self.peercert = peercert

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peercert if name == "peercert" else default


def request(headers: dict[str, str], peercert: dict[str, Any] | None = None) -> Any:
    return make_mocked_request("GET", "/metrics", headers=headers, transport=Transport(peercert))


async def test_a_request_without_certificate_may_bring_a_token() -> None:
    review = FakeTokenReview()
    front_proxy = FrontProxyAuthenticator(RequestHeaderConfig(client_ca="not used"))
    authenticate = DelegatingAuthenticator(front_proxy, TokenAuthenticator(review, clock=Clock()))
    assert await authenticate(request({"Authorization": "Bearer good"})) == PROMETHEUS
    # Identity headers without a front-proxy certificate are ignored, never believed.
    spoofed = {"Authorization": "Bearer good", "X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
    assert await authenticate(request(spoofed)) == PROMETHEUS
    for headers in ({}, {"X-Remote-User": "system:admin"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
        with pytest.raises(errors.ApiError) as err:
            await authenticate(request(headers))
        assert err.value.code == 401
    # A client certificate makes it a front-proxy request: the token is not consulted.
    with pytest.raises(errors.ApiError) as err:
        await authenticate(request({"Authorization": "Bearer good"}, {"subject": ((("commonName", "x"),),)}))
    assert err.value.code == 401
    assert review.asked == ["good"]
