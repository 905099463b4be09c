"""The service logs in from kubeconfigs with a token file or an exec plugin, against the real kube-apiserver.

Both halves of the process (its own client and kopf's reconciler) use the one loaded
configuration.  A ServiceAccount token from the TokenRequest API is the real credential; the exec
plugin is a script that prints it as an ExecCredential.  A second helm_agl process runs with such a
kubeconfig next to the session's service (no APIService of its own): that it serves a kind only
the reconciler can have registered, from a definition it watched through kopf, shows the login
worked end to end.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import processes, services
from localcluster.cluster import Cluster, free_port

from shared.api.errors import ApiError
from shared.client import credentials, kube
from tests.kube import kubectl, load_fixture, wait_for

GROUP, VERSION = "apps.cozystack.io", "v1alpha1"
GROUP_LABEL = "apps.cozystack.io/application.group"
NAMESPACE = "agl-login"
ACCOUNT = "agl-login"


@pytest.fixture(scope="module")
def token(control_plane: Cluster) -> str:
    """A real, bound ServiceAccount token (TokenRequest API) for an account allowed everything."""
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "agl-login-test"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]},
    ]
    kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(documents))
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    return kubectl(control_plane, "create", "token", ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout.strip()


PLUGIN = """
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {"token": pathlib.Path(os.environ["AGL_TOKEN_FILE"]).read_text().strip()}
json.dump({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}, sys.stdout)
"""


def write_kubeconfig(cluster: Cluster, directory: Path, kind: str, token: str) -> Path:
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    if kind == "tokenFile":
        user: dict[str, Any] = {"tokenFile": str(token_file)}
    else:
        script = directory / "plugin.py"
        script.write_text(PLUGIN)
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                         "args": [str(script)], "interactiveMode": "Never",
                         "env": [{"name": "AGL_TOKEN_FILE", "value": str(token_file)}]}}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "login",
        "clusters": [{"name": "local", "cluster": {"server": cluster.server,
                                                   "certificate-authority": str(cluster.pki_dir / "ca.crt")}}],
        "users": [{"name": ACCOUNT, "user": user}],
        "contexts": [{"name": "login", "context": {"cluster": "local", "user": ACCOUNT}}],
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def get(cluster: Cluster, port: int, path: str) -> tuple[int, Any]:
    """As kube-apiserver's front proxy, for the admin."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    pki = cluster.pki_dir
    ctx.load_cert_chain(str(pki / "front-proxy-client.crt"), str(pki / "front-proxy-client.key"))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={
        "Accept": "application/json", "X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            raw = resp.read()
            return int(resp.status), json.loads(raw) if raw.startswith(b"{") else raw.decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, repr(exc)


@pytest.fixture(params=["tokenFile", "exec"])
def service(request: pytest.FixtureRequest, control_plane: Cluster, token: str,
            tmp_path: Path) -> Iterator[tuple[int, Path, str]]:
    config = write_kubeconfig(control_plane, tmp_path, request.param, token)
    port = free_port()
    log = tmp_path / "helm-agl.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "helm_agl", "--kubeconfig", str(config),
                                 "--bind-address", "127.0.0.1", "--secure-port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        yield port, log, request.param
    finally:
        processes.terminate(proc.pid, grace=10)


def records(log: Path) -> list[dict[str, Any]]:
    """The service's JSON log records (anything else it printed is left out)."""
    lines = log.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_reconciler_logs_in_with_the_kubeconfig(control_plane: Cluster, service: tuple[int, Path, str]) -> None:
    port, log, kind = service

    def serves_redises() -> bool:
        code, body = get(control_plane, port, f"/apis/{GROUP}/{VERSION}")
        return code == 200 and "redises" in {r["name"] for r in body.get("resources", [])}

    wait_for(serves_redises, f"the definition to be reconciled into a served kind (log: {log})", timeout=90,
             interval=1)
    assert get(control_plane, port, "/readyz")[0] == 200
    # The service's own client, with the same credentials: a list it answers from kube-apiserver.
    code, body = get(control_plane, port, f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/redises")
    assert code == 200 and body["kind"] == "RedisList", body
    # The kind's first list was sent during the start, with the same login, unless only the client can make it.
    said = [r for r in records(log) if r["logger"].startswith("shared.client.early")]
    handed = [r for r in said if r["msg"] == "first list answered with the pages listed during start-up"
              and r["labelSelector"] == f"apps.cozystack.io/application.kind=Redis,{GROUP_LABEL}={GROUP}"]
    if kind == "exec":
        assert {r["msg"] for r in said} == {"not listing ahead: the kubeconfig uses exec"}, said
    else:
        assert len(handed) == 1 and handed[0]["pages"] >= 1, said


def test_the_client_reads_no_netrc_per_request(control_plane: Cluster, helm_service: services.Running, token: str,
                                                tmp_path: Path) -> None:
    """The service's kube client resolves the environment once (``kube.client_for``), not per request.

    kubernetes_asyncio's session trusts the environment, so aiohttp would read ``$NETRC`` in a thread
    for every kube call.  Here ``$NETRC`` is a FIFO that counts its readers: each open for reading
    meets one open for writing here.  Gets through the service (each one kube call of its own client;
    gets are never served from the cache) must not add readers.
    """
    fifo = tmp_path / "netrc"
    os.mkfifo(fifo)
    reads = 0
    done = threading.Event()

    def serve_empty_netrc() -> None:
        nonlocal reads
        while not done.is_set():
            with open(fifo, "w"):  # blocks until a reader opens it
                pass
            reads += 1

    writer = threading.Thread(target=serve_empty_netrc, daemon=True)
    writer.start()
    redis = json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Redis",
                        "metadata": {"name": "netrc-probe", "namespace": NAMESPACE}, "spec": {}})
    wait_for(lambda: kubectl(control_plane, "apply", "-f", "-", input=redis, check=False).returncode == 0,
             "the session's service to serve Redis", timeout=60, interval=1)
    port = free_port()
    log = tmp_path / "helm-agl.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "helm_agl", "--kubeconfig", str(control_plane.kubeconfig),
                                 "--bind-address", "127.0.0.1", "--secure-port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1", NETRC=str(fifo)))
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/redises/netrc-probe"
    try:
        wait_for(lambda: get(control_plane, port, path)[0] == 200,
                 f"the service to answer a get (log: {log})", timeout=60, interval=1)
        assert reads >= 1  # the environment was read, once, when the client was built
        before = reads
        for _ in range(20):
            code, body = get(control_plane, port, path)
            assert code == 200 and body["metadata"]["name"] == "netrc-probe", body
        time.sleep(0.5)
        assert reads == before, f"{reads - before} reads of $NETRC during 20 gets"
    finally:
        done.set()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a waiting writer go
        processes.terminate(proc.pid, grace=10)
        kubectl(control_plane, "delete", "redis", "netrc-probe", "-n", NAMESPACE, "--ignore-not-found")


async def test_each_kube_request_carries_the_current_token(control_plane: Cluster, token: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A projected token is renewed in place; the very next kube request, and the next watch, send the new one:
    the credential hook runs per request on the service's own request path (``kube.send``)."""
    config = write_kubeconfig(control_plane, tmp_path, "tokenFile", "not-a-token")
    monkeypatch.setattr(credentials, "TOKEN_FILE_PERIOD", 0.0)
    api = await kube.api_client(str(config))
    namespaces = kube.ObjectClient(api, kube.GVR("", "v1", "namespaces"))
    try:
        with pytest.raises(ApiError) as refused:
            await namespaces.get(None, NAMESPACE)
        assert refused.value.code == 503 and "rejected the service's credentials" in refused.value.message
        (tmp_path / "token").write_text(token + "\n")
        assert (await namespaces.get(None, NAMESPACE))["metadata"]["name"] == NAMESPACE
        (tmp_path / "token").write_text("not-a-token-either\n")
        with pytest.raises(ApiError) as refused:
            async for _ in namespaces.watch(timeout_seconds=1):
                pass
        assert refused.value.code == 503, refused.value
    finally:
        await api.close()
