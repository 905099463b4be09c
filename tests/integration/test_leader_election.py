"""Two helm_agl replicas with --leader-elect: one Lease holder writes, the other takes over when it dies."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes_asyncio import client as kclient
from localcluster import services
from localcluster.cluster import Cluster, free_port

from shared.client.kube import api_client
from shared.client.leader import LeaderElector
from tests.kube import get_json, kubectl, load_fixture, wait_for

NS = "tenant-leader"
LEASE_NS = services.NAMESPACE
LEASE = "helm-agl-reconciler"
HR = "helmreleases.helm.toolkit.fluxcd.io"
ELECTION = ("--leader-elect", "--leader-elect-namespace", LEASE_NS)
#: Short but valid timings for the in-process electors: a take-over needs about five seconds.
FAST = {"lease_duration": 5, "renew_deadline": 2.5, "retry_period": 1}


def ready(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def holder(cluster: Cluster) -> str | None:
    result = kubectl(cluster, "get", "lease", LEASE, "-n", LEASE_NS, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    value = json.loads(result.stdout)["spec"].get("holderIdentity")
    return str(value) if value else None


def rolled_out_events(cluster: Cluster, definition: str) -> list[dict[str, Any]]:
    events = get_json(cluster, "events", "-A", "--field-selector", f"involvedObject.name={definition}")
    return [e for e in events["items"] if e["reason"] == "RolledOut"]


@pytest.fixture(scope="module")
def replicas(control_plane: Cluster, helm_service: services.Running) -> Iterator[dict[str, int]]:
    """Two helm_agl processes electing a leader; identity (hostname_pid) -> pid.

    Asks for the session's ``helm_service`` so that the one given back at the end is stopped with
    the session, even when no other module needed it.
    """
    for ns in (NS, LEASE_NS):
        kubectl(control_plane, "create", "namespace", ns, check=False)
    # The session's helm_agl runs without election: replace it.
    services.stop(control_plane, services.HELM_AGL)
    first = services.start(control_plane, services.HELM_AGL, extra_args=ELECTION)
    port = free_port()
    second = services.launch(control_plane, services.HELM_AGL, port=port, extra_args=ELECTION,
                             log_file=control_plane.logs_dir / "helm-agl-second.log")
    try:
        wait_for(lambda: ready(first.port) and ready(port), "both replicas ready", timeout=60)
        host = socket.gethostname()
        yield {f"{host}_{first.pid}": first.pid, f"{host}_{second.pid}": second.pid}
    finally:
        services.stop(control_plane, services.HELM_AGL)
        with contextlib.suppress(OSError):
            os.killpg(second.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            second.wait(10)
        if second.poll() is None:
            second.kill()
        services.start(control_plane, services.HELM_AGL)  # give later modules their service back


def test_one_leader_writes_and_the_other_takes_over(control_plane: Cluster, replicas: dict[str, int]) -> None:
    cluster = control_plane
    leader = wait_for(lambda: holder(cluster), "a Lease holder")
    assert leader in replicas, (leader, replicas)
    time.sleep(6)  # a renewal period later the holder is the same: the follower did not steal it
    assert holder(cluster) == leader

    defn = load_fixture("redis.yaml")
    # A definition of its own, so Events of other modules' "redis" definition do not count here.
    defn["metadata"]["name"] = "leader-cache"
    defn["spec"]["application"].update(kind="LeaderCache", plural="leadercaches", singular="leadercache")
    defn["spec"]["release"]["prefix"] = "leader-cache-"
    name = defn["metadata"]["name"]
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(defn))

    def accepted() -> bool:
        conditions = get_json(cluster, "applicationdefinitions", name).get("status", {}).get("conditions", [])
        return any(c["type"] == "Accepted" and c["status"] == "True" for c in conditions)

    wait_for(accepted, "the definition Accepted")
    group, kind = "apps.cozystack.io", defn["spec"]["application"]["kind"]
    wait_for(lambda: defn["spec"]["application"]["plural"] in kubectl(
        cluster, "api-resources", f"--api-group={group}", "--cached=false", check=False).stdout, "kind served")
    app = {"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": "cache", "namespace": NS},
           "spec": {}}
    wait_for(lambda: kubectl(cluster, "apply", "-f", "-", input=json.dumps(app), check=False).returncode == 0,
             "the Application created")
    prefix = defn["spec"]["release"].get("prefix", "")
    release = f"{prefix}cache"
    wait_for(lambda: kubectl(cluster, "get", HR, release, "-n", NS, check=False).returncode == 0, "HelmRelease")

    changed = copy.deepcopy(defn)
    changed["spec"]["release"]["chartRef"] = {"kind": "HelmChart", "name": "redis-v2", "namespace": "cozy-public"}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(changed))
    wait_for(lambda: get_json(cluster, HR, release, "-n", NS)["spec"]["chartRef"]["name"] == "redis-v2",
             "rollout of redis-v2")
    time.sleep(5)  # room for a duplicate rollout by a second writer to show up
    events = rolled_out_events(cluster, name)
    assert len(events) == 1, events
    assert (events[0].get("count") or 1) == 1, events[0]
    accepted_events = [e for e in get_json(cluster, "events", "-A", "--field-selector",
                                           f"involvedObject.name={name}")["items"] if e["reason"] == "Accepted"]
    assert len(accepted_events) == 1 and (accepted_events[0].get("count") or 1) == 1, accepted_events

    # The leader dies without releasing the Lease; a change made right after must still be rolled out.
    os.killpg(replicas[leader], signal.SIGKILL)
    killed_at = time.monotonic()
    again = copy.deepcopy(changed)
    again["spec"]["release"]["chartRef"]["name"] = "redis-v3"
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(again))
    successor = wait_for(lambda: (h := holder(cluster)) and h != leader and h, "a new Lease holder", timeout=30)
    assert successor in replicas and successor != leader
    wait_for(lambda: get_json(cluster, HR, release, "-n", NS)["spec"]["chartRef"]["name"] == "redis-v3",
             "rollout of redis-v3 by the new leader", timeout=max(1.0, 35 - (time.monotonic() - killed_at)))
    lease = get_json(cluster, "lease", LEASE, "-n", LEASE_NS)["spec"]
    assert lease["leaseTransitions"] >= 1


# In-process electors against the real kube-apiserver, with short timings.

class FreezableProxy:
    """A TCP relay to kube-apiserver that can stop relaying: a network path that hangs, not one that fails."""

    def __init__(self, target: str) -> None:
        address = urlsplit(target)
        self._target = (address.hostname or "127.0.0.1", address.port or 443)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self._flowing.clear()

    async def close(self) -> None:
        self._flowing.set()  # let the relays see their clients' end and finish
        if self._server is not None:
            self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    await self._flowing.wait()
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


@contextlib.asynccontextmanager
async def connected(cluster: Cluster, host: str | None = None) -> AsyncIterator[kclient.ApiClient]:
    """A client with the cluster's admin credentials, talking to ``host`` (a relay) if given."""
    client = await api_client(str(cluster.kubeconfig))
    if host is not None:
        client.configuration.host = host
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def lease_api(control_plane: Cluster) -> AsyncIterator[kclient.ApiClient]:
    kubectl(control_plane, "create", "namespace", LEASE_NS, check=False)
    async with connected(control_plane) as client:
        yield client


@pytest.fixture
def lease_name() -> str:
    return f"fast-{uuid.uuid4().hex[:8]}"


async def until(check: Callable[[], bool], what: str, within: float,
                invariant: Callable[[], bool] = lambda: True) -> float:
    """Seconds until ``check`` holds, asserting ``invariant`` every 50 ms on the way."""
    start = asyncio.get_running_loop().time()
    while not check():
        assert invariant(), f"invariant broken while waiting for {what}"
        elapsed = asyncio.get_running_loop().time() - start
        assert elapsed < within, f"timed out after {within}s waiting for {what}"
        await asyncio.sleep(0.05)
    return asyncio.get_running_loop().time() - start


async def throughout(seconds: float, invariant: Callable[[], bool], what: str) -> None:
    """Assert ``invariant`` every 50 ms for ``seconds``."""
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        assert invariant(), what
        await asyncio.sleep(0.05)


async def lease_spec(api: kclient.ApiClient, name: str) -> Any:
    return (await kclient.CoordinationV1Api(api).read_namespaced_lease(name, LEASE_NS)).spec


@contextlib.asynccontextmanager
async def running(*electors: LeaderElector) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    tasks = {e.identity: asyncio.create_task(e.run()) for e in electors}
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def one_leader(*electors: LeaderElector) -> bool:
    return sum(e.is_leader for e in electors) <= 1


async def test_one_candidate_leads_and_keeps_the_lease(lease_api: kclient.ApiClient, lease_name: str) -> None:
    a, b = (LeaderElector(lease_api, LEASE_NS, lease_name, who, **FAST) for who in ("a", "b"))
    async with running(a, b):
        await until(lambda: a.is_leader or b.is_leader, "a leader", 10, lambda: one_leader(a, b))
        first = a if a.is_leader else b
        await throughout(3 * FAST["lease_duration"], lambda: first.is_leader and one_leader(a, b),
                         "the leader kept the Lease and was the only one")
        spec = await lease_spec(lease_api, lease_name)
        assert spec.holder_identity == first.identity
        assert spec.lease_transitions == 0


async def test_release_hands_the_lease_over_at_once(lease_api: kclient.ApiClient, lease_name: str) -> None:
    a, b = (LeaderElector(lease_api, LEASE_NS, lease_name, who, **FAST) for who in ("a", "b"))
    async with running(a) as tasks:
        await until(lambda: a.is_leader, "a leads", 10)
        async with running(b):
            await asyncio.sleep(1.5)  # b has read the Lease held by a
            tasks["a"].cancel()
            await a.release()
            assert not a.is_leader
            took = await until(lambda: b.is_leader, "b leads", 10)
            assert took < FAST["lease_duration"] - 1, took  # not waiting for the Lease to expire
            spec = await lease_spec(lease_api, lease_name)
            assert (spec.holder_identity, spec.lease_transitions) == ("b", 1)


async def test_a_dead_leader_is_replaced_once_the_lease_expires(lease_api: kclient.ApiClient,
                                                                lease_name: str) -> None:
    a, b = (LeaderElector(lease_api, LEASE_NS, lease_name, who, **FAST) for who in ("a", "b"))
    async with running(a) as tasks:
        await until(lambda: a.is_leader, "a leads", 10)
        async with running(b):
            await asyncio.sleep(1.5)
            tasks["a"].cancel()  # dies without releasing
            took = await until(lambda: b.is_leader, "b leads", 15)
            assert FAST["lease_duration"] - FAST["retry_period"] <= took, took
            spec = await lease_spec(lease_api, lease_name)
            assert (spec.holder_identity, spec.lease_transitions) == ("b", 1)


async def test_hung_renewal_steps_down_before_the_lease_expires(control_plane: Cluster,
                                                                lease_api: kclient.ApiClient,
                                                                lease_name: str) -> None:
    proxy = FreezableProxy(control_plane.server)
    try:
        async with connected(control_plane, await proxy.start()) as proxied:
            a = LeaderElector(proxied, LEASE_NS, lease_name, "a", **FAST)
            b = LeaderElector(lease_api, LEASE_NS, lease_name, "b", **FAST)
            async with running(a):
                await until(lambda: a.is_leader, "a leads", 10)
                async with running(b):
                    await asyncio.sleep(1.5)
                    proxy.freeze()  # a's next renewal never gets an answer
                    await until(lambda: b.is_leader, "b takes over", 15, lambda: one_leader(a, b))
                    assert not a.is_leader
    finally:
        await proxy.close()
