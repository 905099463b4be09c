"""Helpers the cluster-backed test tiers share: raw HTTP as a user, kubectl, fixtures, polling."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from localcluster.cluster import Cluster
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
#: Sample definitions: the demo applies them and the tests use them as realistic fixtures.
FIXTURES = ROOT / "deploy" / "samples"


class Api:
    """Raw HTTP to kube-apiserver as a given kubeconfig user: for requests kubectl cannot send
    (malformed bodies, exotic content types) and to read Status objects exactly."""

    def __init__(self, cluster: Cluster, user: str = "admin") -> None:
        self.cluster = cluster
        ctx = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
        if user == "admin":
            ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.ctx = ctx

    def request(self, method: str, path: str, body: bytes | str | dict[str, Any] | None = None,
                content_type: str = "application/json", accept: str = "application/json",
                timeout: float = 30) -> tuple[int, Any]:
        data = json.dumps(body).encode() if isinstance(body, dict) else (
            body.encode() if isinstance(body, str) else body)
        req = urllib.request.Request(self.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": accept})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")


def warning_texts(headers: Any) -> list[str]:
    """The texts of the ``Warning: 299 - "text"`` headers of a response."""
    return [json.loads(value.split(" ", 2)[2]) for value in headers.get_all("Warning") or []]


def send(api: Api, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any, list[str]]:
    """Like :meth:`Api.request` (JSON in and out), keeping the warnings the server sent."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(api.cluster.server + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60, context=api.ctx) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, warning_texts(resp.headers)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            answer: Any = json.loads(raw)
        except ValueError:
            answer = raw.decode(errors="replace")
        return exc.code, answer, warning_texts(exc.headers)


def load_fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / "definitions" / name).read_text())
    return loaded


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True,
            kubeconfig: Any = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl against ``cluster`` (admin unless another kubeconfig is given)."""
    return cluster.kubectl(*args, input=input, check=check, kubeconfig=kubeconfig)


def get_json(cluster: Cluster, *args: str) -> Any:
    """``kubectl get ARGS -o json``, parsed."""
    return json.loads(kubectl(cluster, "get", *args, "-o", "json").stdout)


def wait_for(check: Any, what: str, timeout: float = 30, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


_REQUESTS = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


def served_requests(cluster: Cluster, group: str, resource: str) -> Counter[str]:
    """Requests kube-apiserver served so far for ``resource`` of ``group`` (``apiserver_request_total``), by verb."""
    counts: Counter[str] = Counter()
    for match in _REQUESTS.finditer(kubectl(cluster, "get", "--raw", "/metrics").stdout):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if (labels.get("group"), labels.get("resource"), labels.get("subresource")) == (group, resource, ""):
            counts[labels["verb"]] += int(float(match["value"]))
    # A cache's watch may be renewed at any time; it is not per request.
    del counts["WATCH"]
    return counts


_LISTED = re.compile(r'^apiserver_(?:cache|storage)_list_returned_objects_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$',
                     re.M)


def listed_objects(cluster: Cluster, group: str, resource: str) -> int:
    """Objects of ``resource`` kube-apiserver returned in lists so far, from its watch cache or from etcd (a list
    of ``limit=1`` returns one; a list of everything, all)."""
    total = 0
    for match in _LISTED.finditer(kubectl(cluster, "get", "--raw", "/metrics").stdout):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if (labels.get("group"), labels.get("resource")) == (group, resource):
            total += int(float(match["value"]))
    return total


def call_service(port: int, path: str, *, cert: tuple[Path, Path] | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """GET a service directly, not through kube-apiserver: as its front proxy when ``cert`` is the front-proxy
    client certificate (``headers`` then name the user). Returns the code and the body: a Status as JSON, else
    the text."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={"Accept": "application/json",
                                                                              **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return int(exc.code), json.loads(raw) if raw.startswith(b"{") else raw.decode()


def service_metrics(cluster: Cluster, port: int) -> str:
    """A running service's ``/metrics`` text, read as kube-apiserver's front proxy on behalf of an administrator."""
    front_proxy = (cluster.pki_dir / "front-proxy-client.crt", cluster.pki_dir / "front-proxy-client.key")
    code, text = call_service(port, "/metrics", cert=front_proxy,
                              headers={"X-Remote-User": "root", "X-Remote-Group": "system:masters"})
    assert code == 200, text
    return str(text)


def metric_samples(text: str, sample: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named ``sample`` (``agl_kube_requests_total``, ``..._seconds_sum``) in Prometheus text, with
    its labels."""
    return [(dict(s.labels), float(s.value)) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == sample]
