"""Lists sent during a start, before the client library loads (:mod:`shared.client.early`), on the real kube-apiserver.

The lister logs in with the standard library as the kubeconfig's user (kube-apiserver says who it is), its pages are
taken by an informer's first list exactly as kube-apiserver would have answered it, and what changes after the
listing reaches the informer through its watch from the listed resourceVersion.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as kclient
from localcluster.cluster import Cluster

from shared.client import early
from shared.client.early import login as logins
from shared.client.informer import Informer, Tuning, without_managed_fields
from shared.client.kube import GVR, ObjectClient
from tests.kube import kubectl, wait_for

pytestmark = pytest.mark.integration

TERRAFORMS = GVR("infra.contrib.fluxcd.io", "v1alpha2", "terraforms")
DEFINITIONS = "/apis/cozystack.io/v1alpha1/tofuapplicationdefinitions"
NS = "listed-ahead"
ACCOUNT = "listed-ahead"


def whoami(login: logins.Login) -> str:
    """The user kube-apiserver authenticates the login as (a SelfSubjectReview, sent on the login's connection)."""
    conn = login.connect(10)
    try:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        conn.request("POST", f"{login.prefix}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                     body=json.dumps(review), headers={**login.headers, "Content-Type": "application/json"})
        answer = conn.getresponse()
        body = json.loads(answer.read())
        assert answer.status == 201, body
        return str(body["status"]["userInfo"]["username"])
    finally:
        conn.close()


def rewrite_user(cluster: Cluster, directory: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Path:
    """The admin kubeconfig with its user's entry replaced by ``change(user)``."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = config["users"][0]["user"]
    config["users"][0]["user"] = change(user)
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def inline(user: dict[str, Any]) -> dict[str, Any]:
    return {"client-certificate-data": base64.b64encode(Path(user["client-certificate"]).read_bytes()).decode(),
            "client-key-data": base64.b64encode(Path(user["client-key"]).read_bytes()).decode()}


@pytest.fixture(scope="module")
def account_token(control_plane: Cluster) -> str:
    kubectl(control_plane, "create", "namespace", NS, check=False)
    kubectl(control_plane, "create", "serviceaccount", ACCOUNT, "-n", NS, check=False)
    return kubectl(control_plane, "create", "token", ACCOUNT, "-n", NS, "--duration=1h").stdout.strip()


def test_the_lister_logs_in_as_the_kubeconfigs_user(control_plane: Cluster, account_token: str,
                                                      tmp_path: Path) -> None:
    assert whoami(logins.load(str(control_plane.kubeconfig))) == "agl-admin"
    assert whoami(logins.load(str(rewrite_user(control_plane, tmp_path, inline)))) == "agl-admin"
    (tmp_path / "token").write_text(account_token + "\n")
    for user in ({"token": account_token}, {"tokenFile": str(tmp_path / "token")}):
        config = rewrite_user(control_plane, tmp_path, lambda _, user=user: user)  # type: ignore[misc]
        assert whoami(logins.load(str(config))) == f"system:serviceaccount:{NS}:{ACCOUNT}"


def test_a_login_only_the_client_can_make_is_left_to_it(control_plane: Cluster, tmp_path: Path) -> None:
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    with pytest.raises(logins.Unsupported, match="exec"):
        logins.load(str(rewrite_user(control_plane, tmp_path, lambda _: plugin)))


def _terraform(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": TERRAFORMS.api_version, "kind": "Terraform",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"interval": "10m", "path": "./modules/a",
                     "sourceRef": {"kind": "GitRepository", "name": "infra", "namespace": "flux-system"}}}


async def test_a_first_list_takes_the_pages_listed_ahead_and_its_watch_brings_what_came_after(
        kube_client: kclient.ApiClient, control_plane: Cluster, account_token: str, run: str) -> None:
    selector = f"test.cozystack.io/listed-ahead={run}"
    terraforms = ObjectClient(kube_client, TERRAFORMS)
    names = [f"ahead-{run}-{i}" for i in range(7)]
    for name in names:
        await terraforms.create(NS, _terraform(name, {"test.cozystack.io/listed-ahead": run}))
    pages = early.Pages()
    planned: list[list[dict[str, Any]]] = []

    def plan(definitions: list[dict[str, Any]], flags: Any) -> list[tuple[str, str]]:
        planned.append(definitions)
        return [(TERRAFORMS.path(None), selector)]

    lister = early.Lister(lambda: logins.load(str(control_plane.kubeconfig)), DEFINITIONS, plan, {}, pages,
                          page_size=3)
    lister.start()
    wait_for(lambda: pages.held(TERRAFORMS.path(None), selector) == 3, "the three pages listed ahead", timeout=30)
    assert isinstance(planned[0], list)  # the definitions came first, decoded
    late = f"ahead-{run}-late"
    await terraforms.create(NS, _terraform(late, {"test.cozystack.io/listed-ahead": run}))  # after the listing

    reader = ObjectClient(kube_client, TERRAFORMS, listed_ahead=pages)
    informer = Informer(reader, label_selector=selector, transform=without_managed_fields,
                        tuning=Tuning(page_size=3, watch_timeout=30))
    informer.start()
    try:
        await informer.wait_synced()
        assert pages.handed(TERRAFORMS.path(None), selector) == 3

        async def cached() -> set[str]:
            answer = await informer.entries("0")
            assert answer is not None
            return {entry.key[1] for entry in answer[0]}

        for _ in range(100):
            if late in await cached():
                break
            await asyncio.sleep(0.1)
        assert await cached() == {*names, late}  # the pages held seven; the watch brought the eighth
        relisted = await reader.list_all(None, selector, page_size=3)  # a second list is asked of kube-apiserver
        assert len(relisted["items"]) == 8 and pages.handed(TERRAFORMS.path(None), selector) == 3
        lister.done.wait(10)
        assert lister.outcome.startswith("listed ahead"), lister.outcome
    finally:
        await informer.stop()
        for name in [*names, late]:
            await terraforms.delete(NS, name)
