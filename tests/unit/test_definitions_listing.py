"""A new leader's own list of the definitions (shared/service/definitions.py): tried again while kube-apiserver
refuses it, given up once the replica no longer leads. The fake client stands in for a failing kube-apiserver,
which the real one cannot be made to be on demand; the list itself is exercised against the real server in
tests/integration/test_leader_writes.py."""

from __future__ import annotations

from typing import Any, cast

import pytest

from shared.api import errors
from shared.client.kube import GVR
from shared.service import definitions

DEFINITIONS = GVR("cozystack.io", "v1alpha1", "applicationdefinitions")


class _Failing:
    """Answers ``failures`` lists with 503, then the definitions."""

    def __init__(self, failures: int) -> None:
        self.gvr = DEFINITIONS
        self.failures = failures
        self.calls = 0

    async def list_all(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise errors.unavailable("etcd is away")
        return {"items": [{"metadata": {"name": "redis"}}]}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(definitions, "RETRY_FIRST", 0.001)


async def test_a_refused_list_is_tried_again_until_it_answers() -> None:
    client = _Failing(failures=2)
    listed = await definitions.list_definitions_while(cast(Any, client), lambda: True)
    assert listed == [{"metadata": {"name": "redis"}}] and client.calls == 3


async def test_a_replica_that_stopped_leading_stops_trying() -> None:
    client = _Failing(failures=10)
    leading = iter([True, True, False])
    assert await definitions.list_definitions_while(cast(Any, client), lambda: next(leading)) is None
    assert client.calls == 2
