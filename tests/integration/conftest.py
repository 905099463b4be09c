"""Fixtures of the integration tier's tests of the services' kube layer (a client of their own, a run's id)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as kclient

from shared.client.kube import api_client


@pytest.fixture
async def kube_client(control_plane: Any) -> AsyncIterator[kclient.ApiClient]:
    """The services' own kind of kube client (kubernetes_asyncio, the admin kubeconfig), closed afterwards."""
    client = await api_client(str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def run() -> str:
    """A short id of this test's run, for names and labels that no other run uses."""
    return uuid.uuid4().hex[:8]
