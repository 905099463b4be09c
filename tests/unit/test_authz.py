"""The cached, fail-closed authorizer (with a fake review function standing in for the SAR)."""

from __future__ import annotations

import argparse
import asyncio
import logging

import pytest

from shared.api import errors
from shared.api.attributes import Attributes, NonResourceAttributes, ResourceAttributes
from shared.api.rest import User
from shared.security.authz import Authorizer, review_body
from shared.service import runtime

ALICE = User("alice", ("devs",), {"scopes": ("a",)})
GET = ResourceAttributes("get", "apps.example.io", "v1alpha1", "things", "ns", "a")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeReview:
    """Answers from a table of allowed verbs; counts calls; can be told to fail or to block."""

    def __init__(self, allowed_verbs: set[str]) -> None:
        self.allowed_verbs = allowed_verbs
        self.calls: list[tuple[User, Attributes]] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, user: User, attrs: Attributes) -> bool:
        self.calls.append((user, attrs))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("kube-apiserver is down")
        return attrs.verb in self.allowed_verbs


async def test_allowed_is_cached_for_ten_seconds() -> None:
    clock, review = Clock(), FakeReview({"get"})
    authz = Authorizer(review, clock=clock)
    assert await authz.authorize(ALICE, GET)
    clock.now += 9.9
    assert await authz.authorize(ALICE, GET)
    assert len(review.calls) == 1
    clock.now += 0.2
    assert await authz.authorize(ALICE, GET)
    assert len(review.calls) == 2


async def test_denied_is_cached_for_five_seconds() -> None:
    clock, review = Clock(), FakeReview(set())
    authz = Authorizer(review, clock=clock)
    assert not await authz.authorize(ALICE, GET)
    clock.now += 4.9
    assert not await authz.authorize(ALICE, GET)
    assert len(review.calls) == 1
    clock.now += 0.2
    review.allowed_verbs.add("get")  # access granted meanwhile
    assert await authz.authorize(ALICE, GET)
    assert len(review.calls) == 2


async def test_cache_key_covers_identity_and_attributes() -> None:
    review = FakeReview({"get", "list"})
    authz = Authorizer(review, clock=Clock())
    await authz.authorize(ALICE, GET)
    await authz.authorize(User("bob", ("devs",)), GET)
    await authz.authorize(User("alice", ("other",), {"scopes": ("a",)}), GET)
    await authz.authorize(User("alice", ("devs",), {"scopes": ("b",)}), GET)
    await authz.authorize(ALICE, ResourceAttributes("get", "apps.example.io", "v1alpha1", "things", "ns", "b"))
    await authz.authorize(ALICE, ResourceAttributes("get", "apps.example.io", "v1alpha1", "things", "other", "a"))
    await authz.authorize(ALICE, ResourceAttributes("list", "apps.example.io", "v1alpha1", "things", "ns"))
    assert len(review.calls) == 7
    await authz.authorize(User("alice", ("devs",), {"scopes": ("a",)}), GET)  # equal identity: cached
    assert len(review.calls) == 7


async def test_failing_review_refuses_with_503_logs_and_is_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    review = FakeReview({"get"})
    review.fail = True
    authz = Authorizer(review, clock=Clock())
    with caplog.at_level(logging.ERROR, logger="shared.security.authz"), pytest.raises(errors.ApiError) as err:
        await authz.authorize(ALICE, GET)  # fail closed, but not as a misleading 403
    assert err.value.code == 503 and err.value.retry_after
    assert "SubjectAccessReview failed" in caplog.text
    review.fail = False
    assert await authz.authorize(ALICE, GET)  # the failure was not remembered
    assert len(review.calls) == 2


async def test_hung_review_times_out_with_503() -> None:
    review = FakeReview({"get"})
    review.gate = asyncio.Event()  # never set: the review hangs
    authz = Authorizer(review, clock=Clock(), review_timeout=0.05)
    waiters = [asyncio.create_task(authz.authorize(ALICE, GET)) for _ in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 2)
    assert all(isinstance(r, errors.ApiError) and r.code == 503 for r in results), results
    assert len(review.calls) == 1  # the waiters shared the one review, and its failure


async def test_cache_is_bounded() -> None:
    review = FakeReview({"get"})
    authz = Authorizer(review, clock=Clock(), max_entries=3)
    for i in range(5):
        await authz.authorize(User(f"u{i}"), GET)
    assert len(authz) == 3
    await authz.authorize(User("u0"), GET)  # evicted: asked again
    assert len(review.calls) == 6
    await authz.authorize(User("u4"), GET)  # recent: still cached
    assert len(review.calls) == 6


async def test_concurrent_identical_questions_share_one_review() -> None:
    review = FakeReview({"get"})
    review.gate = asyncio.Event()
    authz = Authorizer(review, clock=Clock())
    tasks = [asyncio.create_task(authz.authorize(ALICE, GET)) for _ in range(5)]
    await asyncio.sleep(0.01)
    review.gate.set()
    assert await asyncio.gather(*tasks) == [True] * 5
    assert len(review.calls) == 1


def test_review_body() -> None:
    body = review_body(ALICE, GET)
    assert body == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": "get",
                "group": "apps.example.io",
                "version": "v1alpha1",
                "resource": "things",
                "namespace": "ns",
                "name": "a",
            },
            "user": "alice",
            "groups": ["devs"],
            "extra": {"scopes": ["a"]},
        },
    }
    cluster_list = review_body(User("bob"), ResourceAttributes("list", "g.io", "v1", "things"))
    assert cluster_list["spec"]["resourceAttributes"] == {
        "verb": "list",
        "group": "g.io",
        "version": "v1",
        "resource": "things",
    }
    assert "extra" not in cluster_list["spec"]


def test_review_body_for_a_path() -> None:
    body = review_body(ALICE, NonResourceAttributes("/openapi/v2"))
    assert body["spec"] == {"nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"},
                            "user": "alice", "groups": ["devs"], "extra": {"scopes": ["a"]}}


class PathsOnly:
    """Allows non-resource questions only: a resource answer taken from the cache would be wrong."""

    def __init__(self) -> None:
        self.calls: list[Attributes] = []

    async def __call__(self, user: User, attrs: Attributes) -> bool:
        self.calls.append(attrs)
        return isinstance(attrs, NonResourceAttributes)


async def test_resource_and_path_decisions_never_share_a_cache_entry() -> None:
    review = PathsOnly()
    authz = Authorizer(review, clock=Clock())
    path = NonResourceAttributes("/metrics")
    assert await authz.authorize(ALICE, path)
    assert not await authz.authorize(ALICE, ResourceAttributes("get", "", "v1", "/metrics"))
    assert await authz.authorize(ALICE, path)  # cached under its own key
    assert len(review.calls) == 2


async def test_the_privileged_group_is_allowed_without_a_review() -> None:
    review = FakeReview(set())
    authz = Authorizer(review, clock=Clock())
    root = User("root", ("system:authenticated", "system:masters"))
    assert await authz.authorize(root, GET)
    assert await authz.authorize(root, NonResourceAttributes("/metrics"))
    assert review.calls == [] and len(authz) == 0
    # Any other group is reviewed, and denied here.
    assert not await authz.authorize(User("root", ("system:authenticated", "masters")), GET)
    assert len(review.calls) == 1


async def test_cleared_privileged_groups_review_everyone() -> None:
    review = FakeReview(set())
    authz = Authorizer(review, clock=Clock(), always_allow_groups=())
    assert not await authz.authorize(User("root", ("system:masters",)), GET)
    assert len(review.calls) == 1


def test_the_flag_sets_or_clears_the_privileged_groups() -> None:
    parser = argparse.ArgumentParser()
    runtime.common_arguments(parser)
    assert parser.parse_args([]).authorization_always_allow_groups == ("system:masters",)
    assert parser.parse_args(["--authorization-always-allow-groups="]).authorization_always_allow_groups == ()
    assert parser.parse_args(["--authorization-always-allow-groups", "a, b"]).authorization_always_allow_groups \
        == ("a", "b")
