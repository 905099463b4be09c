"""Two helm_agl replicas with --leader-elect: one Lease holder writes, the other takes over when it dies."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from localcluster import aggregation, services
from localcluster.cluster import Cluster, free_port

from tests.kube import get_json, kubectl, load_fixture, wait_for

NS = "tenant-leader"
LEASE_NS = services.NAMESPACE
LEASE = "helm-agl-reconciler"
HR = "helmreleases.helm.toolkit.fluxcd.io"
ELECTION = ("--leader-elect", "--leader-elect-namespace", LEASE_NS)




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
def replicas(control_plane: Cluster) -> Iterator[dict[str, int]]:
    """Two helm_agl processes electing a leader; identity (hostname_pid) -> pid."""
    for ns in (NS, LEASE_NS):
        kubectl(control_plane, "create", "namespace", ns, check=False)
    # The session's helm_agl (if other modules started one) runs without election: replace it.
    services.stop(control_plane, services.HELM_AGL)
    first = services.start(control_plane, services.HELM_AGL, extra_args=ELECTION)
    _ca, cert = aggregation.serving_cert(control_plane, services.HELM_AGL.name, services.NAMESPACE)
    port = free_port()
    log_file = control_plane.logs_dir / "helm-agl-second.log"
    with log_file.open("ab") as out:
        second = subprocess.Popen(
            [sys.executable, "-m", "helm_agl", "--kubeconfig", str(control_plane.kubeconfig),
             "--bind-address", "127.0.0.1", "--secure-port", str(port), "--tls-cert-file", str(cert.cert),
             "--tls-private-key-file", str(cert.key), *ELECTION],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
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
