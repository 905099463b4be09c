"""tofu_agl.secretvalues against the real kube-apiserver: what is kept of the Secrets a Terraform reads.

The Secrets are real ones in a namespace of this module; the Terraforms whose deletion the record of readers
follows are real objects of the tofu-controller CRD, seen by a real informer.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from kubernetes_asyncio import client as kclient

from shared.api.errors import ApiError
from shared.client.informer import Informer, Tuning
from shared.client.kube import GVR, ObjectClient
from tests.unit.waiting import eventually
from tofu_agl.plan import REDACTED
from tofu_agl.secretvalues import Masking, SecretKey, SecretValues, guard_messages

pytestmark = pytest.mark.integration

NS = "tofu-secretvalues"
SECRETS = GVR("", "v1", "secrets")
TERRAFORMS = GVR("infra.contrib.fluxcd.io", "v1alpha2", "terraforms")
RUN_LABEL = "test.cozystack.io/secretvalues-run"


@pytest.fixture
def api(kube_client: kclient.ApiClient, control_plane: Any) -> kclient.ApiClient:
    control_plane.kubectl("create", "namespace", NS, check=False)
    return kube_client


def _secret(name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "data": {"password": base64.b64encode(value.encode()).decode()}}


def _terraform(name: str, secret: str, run: str = "", message: str = "Plan generated") -> dict[str, Any]:
    """A Terraform reading ``secret``; its status (dropped by a create: a subresource) has tofu-controller's
    ``message`` in Ready, as once the controller reconciled it."""
    return {"apiVersion": TERRAFORMS.api_version, "kind": "Terraform",
            "metadata": {"name": name, "namespace": NS, "labels": {RUN_LABEL: run}},
            "spec": {"interval": "10m", "path": "./modules/a", "varsFrom": [{"kind": "Secret", "name": secret}],
                     "sourceRef": {"kind": "GitRepository", "name": "infra", "namespace": "flux-system"}},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "Progressing",
                                       "message": message}] if message else []}}


async def _delete(oc: ObjectClient, name: str) -> None:
    try:
        await oc.delete(NS, name)
    except ApiError as exc:
        if exc.code != 404:
            raise


async def test_a_rotated_secrets_earlier_value_stays_masked(api: kclient.ApiClient, run: str) -> None:
    """tofu-controller's message may still be the one OpenTofu printed with the value before a rotation."""
    secrets = ObjectClient(api, SECRETS)
    name = f"creds-{run}"
    await secrets.create(NS, _secret(name, f"old-password-{run}"))
    try:
        values = SecretValues(secrets, max_age=0)  # every ask reads again
        changed: list[SecretKey] = []
        values.listen(changed.append)
        terraform = _terraform(f"tf-{run}", name)
        assert await values.values(terraform) == [f"old-password-{run}"]
        await secrets.patch_merge(NS, name, {"data": {"password": base64.b64encode(
            f"new-password-{run}".encode()).decode()}})
        masks = await values.values(terraform)
        assert masks == [f"new-password-{run}", f"old-password-{run}"]
        assert changed == [(NS, name), (NS, name)]

        conditions = [{"type": "Ready", "status": "False", "message": f"invalid value old-password-{run} for x"}]
        guard_messages(conditions, [dict(conditions[0])], masks)
        assert conditions[0]["message"] == f"invalid value {REDACTED} for x"
    finally:
        await _delete(secrets, name)


class HeldAnswers(ObjectClient):
    """The real Secrets, each answer held back until :attr:`release` is set: a read answered before a change
    and still on its way when the value is asked for again (kube-apiserver cannot delay an answer on demand)."""

    def __init__(self, api: kclient.ApiClient) -> None:
        super().__init__(api, SECRETS)
        self.answered = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def get(self, namespace: str | None, name: str, *, subresource: str | None = None) -> Any:
        answer = await super().get(namespace, name, subresource=subresource)
        self.answered.set()
        await self.release.wait()
        return answer


async def test_a_read_sent_before_a_change_does_not_answer_an_ask_after_it(api: kclient.ApiClient,
                                                                          run: str) -> None:
    """``values`` asked after a rotation does not settle for a read already under way, answered before it."""
    secrets = HeldAnswers(api)
    name = f"inflight-{run}"
    await secrets.create(NS, _secret(name, f"before-{run}"))
    try:
        values = SecretValues(secrets, max_age=0)
        terraform = _terraform(f"tf-{run}", name)
        assert await values.values(terraform) == [f"before-{run}"]
        secrets.answered.clear()
        secrets.release.clear()
        assert values.known(terraform) == [f"before-{run}"]  # starts a read in the background
        async with asyncio.timeout(10):
            await secrets.answered.wait()  # kube-apiserver answered it, with the value before the rotation
        await secrets.patch_merge(NS, name, {"data": {"password": base64.b64encode(f"after-{run}".encode()).decode()}})
        asked = asyncio.create_task(values.values(terraform))
        await asyncio.sleep(0.05)
        secrets.release.set()
        async with asyncio.timeout(10):
            assert await asked == [f"after-{run}", f"before-{run}"]
    finally:
        await _delete(secrets, name)


async def test_the_secret_least_recently_asked_for_is_dropped(api: kclient.ApiClient, run: str) -> None:
    secrets = ObjectClient(api, SECRETS)
    names = [f"lru-{i}-{run}" for i in range(3)]
    for i, name in enumerate(names):
        await secrets.create(NS, _secret(name, f"value-{i}-{run}"))
    try:
        values = SecretValues(secrets, max_secrets=2)
        dropped: list[SecretKey] = []
        values.listen(lambda _key: None, dropped.append)
        first, second, third = (_terraform(f"tf-{i}-{run}", name) for i, name in enumerate(names))
        assert await values.values(first) == [f"value-0-{run}"]
        assert await values.values(second) == [f"value-1-{run}"]
        assert values.known(first) == [f"value-0-{run}"]  # the first is now the more recently asked for
        assert await values.values(third) == [f"value-2-{run}"]
        assert values.size == 2
        assert dropped == [(NS, names[1])]
        assert values.known(second) is None  # no longer kept: withheld until read again
        assert values.known(first) == [f"value-0-{run}"]
        assert await values.values(second) == [f"value-1-{run}"]  # read again, which drops the third
        assert dropped == [(NS, names[1]), (NS, names[2])]
    finally:
        for name in names:
            await _delete(secrets, name)


async def test_the_readers_of_a_secret_forget_deleted_terraforms(api: kclient.ApiClient, run: str) -> None:
    secrets, terraforms = ObjectClient(api, SECRETS), ObjectClient(api, TERRAFORMS)
    secret = f"shared-{run}"
    await secrets.create(NS, _secret(secret, f"shared-value-{run}"))
    names = [f"reader-{i}-{run}" for i in range(4)]
    informer = Informer(terraforms, label_selector=f"{RUN_LABEL}={run}", tuning=Tuning(watch_timeout=30))
    informer.start()
    try:
        for name in names:
            await terraforms.create(NS, _terraform(name, secret, run))
        async with asyncio.timeout(10):
            await informer.wait_synced()
        await eventually(lambda: all(informer.holds((NS, name)) for name in names[:3]), seconds=10)
        values = SecretValues(secrets, max_age=0)  # every ask reads again
        await values.values(_terraform(names[0], secret, run))  # its first read is done before anyone listens
        forgotten: list[Any] = []
        masking = Masking(values, forgotten.append, informer.holds, prune_floor=3)
        for name in names[:3]:
            masking.known(_terraform(name, secret, run))
        assert masking.pairs == 3
        for name in names[:2]:
            await terraforms.delete(NS, name)
        await eventually(lambda: not any(informer.holds((NS, name)) for name in names[:2]), seconds=10)
        masking.known(_terraform(names[3], secret, run))  # the fourth pair: above the floor, so it prunes
        assert masking.pairs == 2
        await secrets.patch_merge(NS, secret, {"data": {"password": base64.b64encode(b"rotated").decode()}})
        await values.values(_terraform(names[3], secret, run))
        assert sorted(forgotten) == sorted([(NS, names[2]), (NS, names[3])])  # the deleted ones are not told
        assert masking.pairs == 0
        masking.close()
    finally:
        await informer.stop()
        for name in names:
            await _delete(terraforms, name)
        await _delete(secrets, secret)


async def test_a_terraform_the_controller_has_not_reconciled_depends_on_no_secret(api: kclient.ApiClient,
                                                                                 run: str) -> None:
    """No message of tofu-controller's, nothing shown to mask: no Secret is read or remembered for it (a kind of
    50 000 new Terraforms reading one Secret would otherwise remember 50 000 readers of it)."""
    secrets = ObjectClient(api, SECRETS)
    secret = f"quiet-{run}"
    await secrets.create(NS, _secret(secret, f"quiet-value-{run}"))
    try:
        values = SecretValues(secrets)
        masking = Masking(values, lambda _key: None, lambda _key: True)
        assert masking.known(_terraform(f"new-{run}", secret, run, message="")) == []
        assert masking.pairs == 0 and values.size == 0
        assert masking.known(_terraform(f"said-{run}", secret, run)) is None  # read started, withheld meanwhile
        assert masking.pairs == 1
        assert await masking.read(_terraform(f"said-{run}", secret, run)) == [f"quiet-value-{run}"]
        assert values.size == 1
        masking.close()
    finally:
        await _delete(secrets, secret)
