"""helm_agl's security contract (SPEC §4) against the real control plane.

Two paths are exercised: through kube-apiserver with real users (client certificates signed by
the cluster CA, RBAC bound per namespace), and straight to the service's port, where a caller
can try to impersonate kube-apiserver's front proxy.  The direct path is also how the service's
own SubjectAccessReview and its decision cache are tested.

kube-apiserver authorizes every request itself before proxying it, and with RBAC alone it asks
the same question the service's SubjectAccessReview asks, so a 403 through it never shows that
the service authorizes at all; nor can RBAC answer differently for a user with an extra.  For
both, the local cluster sends the decisions about users of ``AUTHZ_WEBHOOK_GROUP`` to an
authorization webhook that these tests serve: it can allow kube-apiserver's own check and deny
the service's review that follows, and deny a user only when an extra is present.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import pki, services
from localcluster.cluster import AUTHZ_WEBHOOK_GROUP, Cluster

from tests import webhooks
from tests.kube import Api, load_fixture, wait_for

GROUP = "apps.cozystack.io"
VERSION = "v1alpha1"
NS_A = "sec-a"
NS_B = "sec-b"
HR = "helmreleases.helm.toolkit.fluxcd.io"


# ----------------------------------------------------------------------------------- helpers


def kubectl(cluster: Cluster, *args: str, kubeconfig: Path | None = None, input: str | None = None,
            check: bool = True) -> Any:
    return cluster.kubectl(*args, kubeconfig=kubeconfig, input=input, check=check)


def manifest(name: str, ns: str, spec: dict[str, Any] | None = None) -> str:
    return json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Redis",
                       "metadata": {"name": name, "namespace": ns}, "spec": spec or {}})


def release_names(cluster: Cluster, ns: str) -> set[str]:
    out = kubectl(cluster, "get", HR, "-n", ns, "-o", "json").stdout
    return {item["metadata"]["name"] for item in json.loads(out)["items"]}


class Direct:
    """HTTPS straight to the service's port, bypassing kube-apiserver."""

    def __init__(self, port: int) -> None:
        self.base = f"https://127.0.0.1:{port}"

    def request(self, path: str, *, cert: tuple[Path, Path] | None = None,
                headers: dict[str, str] | None = None, method: str = "GET",
                body: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
        # The serving certificate is not under test here; who the *client* is, is.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        req = urllib.request.Request(self.base + path, data=body, method=method, headers={
            "Accept": "application/json", "Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
                raw = resp.read()
                return resp.status, _decode(raw), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read()), dict(exc.headers)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def as_user(user: str, *groups: str) -> dict[str, str]:
    """The identity headers kube-apiserver's front proxy sends (one X-Remote-Group per group)."""
    headers = {"X-Remote-User": user}
    if groups:
        # urllib cannot repeat a header, so these tests use at most one group.
        assert len(groups) == 1
        headers["X-Remote-Group"] = groups[0]
    return headers


def user_api(cluster: Cluster, kubeconfig: Path) -> Api:
    """Raw HTTP through kube-apiserver as the client-certificate user of ``kubeconfig``."""
    api = Api(cluster, user="")
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    api.ctx.load_cert_chain(user["client-certificate"], user["client-key"])
    return api


def assert_status(code: int, body: Any, want_code: int, reason: str) -> None:
    assert code == want_code, (code, body)
    assert isinstance(body, dict) and body.get("kind") == "Status", body
    assert body["code"] == want_code and body["reason"] == reason, body


# ----------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def helm(control_plane: Cluster, helm_service: services.Running) -> Iterator[Cluster]:
    for ns in (NS_A, NS_B):
        kubectl(control_plane, "create", "namespace", ns, check=False)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: "redises" in kubectl(control_plane, "api-resources", f"--api-group={GROUP}",
                                          "--cached=false", check=False).stdout, "redis kind served")
    yield control_plane


@pytest.fixture(scope="module")
def direct(helm_service: services.Running) -> Direct:
    return Direct(helm_service.port)


@pytest.fixture(scope="module")
def front_proxy(control_plane: Cluster) -> tuple[Path, Path]:
    """kube-apiserver's own front-proxy client certificate (what the service must trust)."""
    return control_plane.pki_dir / "front-proxy-client.crt", control_plane.pki_dir / "front-proxy-client.key"


@pytest.fixture(scope="module")
def alice(helm: Cluster) -> Path:
    """A tenant with full rights on redises in namespace A only, and none on HelmReleases."""
    documents = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "redis-editor", "namespace": NS_A},
         "rules": [{"apiGroups": [GROUP], "resources": ["redises"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-redis-editor", "namespace": NS_A},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "redis-editor"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]},
    ]
    kubectl(helm, "apply", "-f", "-", input=yaml.safe_dump_all(documents))
    return helm.user_kubeconfig("alice")


@pytest.fixture(scope="module")
def mallory(helm: Cluster) -> Path:
    """An authenticated user with no RBAC on any Application kind."""
    return helm.user_kubeconfig("mallory")


REDISES_A = f"/apis/{GROUP}/{VERSION}/namespaces/{NS_A}/redises"
REDISES_B = f"/apis/{GROUP}/{VERSION}/namespaces/{NS_B}/redises"
#: The extra (X-Remote-Extra-Agl-Test-Deny) that makes the test authorizer deny a "fenced-" user.
DENY_EXTRA = "agl-test-deny"


class TestAuthorizer:
    """The decisions of the authorization webhook for ``AUTHZ_WEBHOOK_GROUP`` users, by user name:

    * ``fenced-*``: allowed, unless the review carries the extra :data:`DENY_EXTRA`;
    * ``once-*``: allowed the first time the user is reviewed (kube-apiserver's own check of the
      request), denied every later time (the service's SubjectAccessReview of the same request).

    Every decision is recorded per user, in order.
    """

    __test__ = False

    def __init__(self) -> None:
        self.decisions: dict[str, list[bool]] = defaultdict(list)
        self._lock = threading.Lock()

    def decide(self, review: dict[str, Any]) -> dict[str, Any]:
        spec = review["spec"]
        user = str(spec.get("user", ""))
        with self._lock:
            seen = self.decisions[user]
            if user.startswith("fenced-"):
                allowed = DENY_EXTRA not in {k.lower() for k in spec.get("extra") or {}}
            elif user.startswith("once-"):
                allowed = not seen
            else:
                return {**review, "status": {"allowed": False}}  # no opinion: RBAC decides
            seen.append(allowed)
            reason = f"test authorizer, review {len(seen)} of {user}"
        return {**review, "status": {"allowed": allowed, "denied": not allowed, "reason": reason}}


@pytest.fixture(scope="module")
def authorizer(helm: Cluster) -> Iterator[TestAuthorizer]:
    """The test authorizer, served where the local kube-apiserver sends its webhook reviews."""
    port, serving = helm.authz_webhook()
    decisions = TestAuthorizer()
    with webhooks.serve(decisions.decide, serving.cert, serving.key, port=port):
        yield decisions


# ------------------------------------------------------------------------- unauthenticated paths


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_health_endpoints_need_no_auth(helm: Cluster, direct: Direct, path: str) -> None:
    code, body, _ = direct.request(path)
    assert code == 200 and body == "ok", (code, body)


# ------------------------------------------------------------------ front-proxy authentication


def test_direct_request_without_client_cert_is_401(helm: Cluster, direct: Direct) -> None:
    for path in (REDISES_A, f"/apis/{GROUP}/{VERSION}", "/apis", "/openapi/v2"):
        code, body, _ = direct.request(path)
        assert_status(code, body, 401, "Unauthorized")


def test_forged_identity_headers_without_cert_are_401(helm: Cluster, direct: Direct) -> None:
    headers = as_user("system:admin", "system:masters")
    code, body, _ = direct.request(REDISES_A, headers=headers)
    assert_status(code, body, 401, "Unauthorized")
    code, body, _ = direct.request(REDISES_A, headers=headers, method="POST",
                                   body=manifest("forged", NS_A).encode())
    assert_status(code, body, 401, "Unauthorized")
    assert "redis-forged" not in release_names(helm, NS_A)


def test_cluster_ca_client_cert_is_not_a_front_proxy(helm: Cluster, direct: Direct) -> None:
    """The admin's certificate is valid for kube-apiserver, but it is not the front proxy's."""
    admin = (helm.pki_dir / "admin.crt", helm.pki_dir / "admin.key")
    code, body, _ = direct.request(REDISES_A, cert=admin, headers=as_user("system:admin", "system:masters"))
    assert_status(code, body, 401, "Unauthorized")
    code, body, _ = direct.request(REDISES_A, cert=admin, method="POST", body=manifest("viaadmin", NS_A).encode(),
                                   headers=as_user("system:admin", "system:masters"))
    assert_status(code, body, 401, "Unauthorized")
    assert "redis-viaadmin" not in release_names(helm, NS_A)


def test_front_proxy_ca_cert_with_wrong_name_is_401(helm: Cluster, direct: Direct, tmp_path: Path) -> None:
    """Signed by the right CA, but its CN is not in requestheader-allowed-names."""
    front_ca = pki.ensure_ca(helm.pki_dir, "front-proxy-ca", "agl-local-front-proxy-ca")
    rogue = pki.issue(front_ca, tmp_path, "rogue", "not-the-front-proxy")
    code, body, _ = direct.request(REDISES_A, cert=(rogue.cert, rogue.key),
                                   headers=as_user("system:admin", "system:masters"))
    assert_status(code, body, 401, "Unauthorized")


def test_front_proxy_without_user_header_is_401(helm: Cluster, direct: Direct,
                                                 front_proxy: tuple[Path, Path]) -> None:
    code, body, _ = direct.request(REDISES_A, cert=front_proxy)
    assert_status(code, body, 401, "Unauthorized")


def test_front_proxy_identity_is_authorized_by_subject_access_review(
        helm: Cluster, direct: Direct, front_proxy: tuple[Path, Path], alice: Path) -> None:
    """The positive control for the 401s above, and the authorizer's per-user decisions."""
    code, body, _ = direct.request(REDISES_A, cert=front_proxy, headers=as_user("system:admin", "system:masters"))
    assert code == 200 and body["kind"] == "RedisList", body
    wait_for(lambda: direct.request(REDISES_A, cert=front_proxy, headers=as_user("alice"))[0] == 200,
             "alice's RoleBinding to take effect")
    code, body, _ = direct.request(REDISES_A, cert=front_proxy, headers=as_user("mallory"))
    assert_status(code, body, 403, "Forbidden")
    assert 'User "mallory" cannot list resource "redises"' in body["message"]
    code, body, _ = direct.request(REDISES_B, cert=front_proxy, headers=as_user("alice"))
    assert_status(code, body, 403, "Forbidden")
    # Every verb is authorized, not only reads.
    for method, path, payload in (("GET", f"{REDISES_A}?watch=true&timeoutSeconds=1", None),
                                  ("POST", REDISES_A, manifest("mallorys", NS_A).encode()),
                                  ("DELETE", f"{REDISES_A}/anything", None)):
        code, body, _ = direct.request(path, cert=front_proxy, headers=as_user("mallory"), method=method,
                                       body=payload)
        assert_status(code, body, 403, "Forbidden")
    assert "redis-mallorys" not in release_names(helm, NS_A)


def test_group_membership_grants_and_revocation_takes_effect(
        helm: Cluster, direct: Direct, front_proxy: tuple[Path, Path]) -> None:
    """RBAC bound to a group works through kubectl (groups are forwarded and reviewed), and a
    removed binding stops working once the short decision cache expires."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "redis-reader", "namespace": NS_A},
            "rules": [{"apiGroups": [GROUP], "resources": ["redises"], "verbs": ["get", "list", "watch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "cache-admins", "namespace": NS_A},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "redis-reader"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "cache-admins"}]}
    kubectl(helm, "apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    carol = helm.user_kubeconfig("carol", ("cache-admins",))
    wait_for(lambda: kubectl(helm, "get", "redises", "-n", NS_A, kubeconfig=carol, check=False).returncode == 0,
             "carol can list through her group")
    assert direct.request(REDISES_A, cert=front_proxy, headers=as_user("carol", "cache-admins"))[0] == 200
    kubectl(helm, "delete", "rolebinding", "cache-admins", "-n", NS_A)
    wait_for(lambda: "forbidden" in kubectl(helm, "get", "redises", "-n", NS_A, kubeconfig=carol,
                                            check=False).stderr.lower(), "kube-apiserver to deny carol")
    wait_for(lambda: direct.request(REDISES_A, cert=front_proxy, headers=as_user("carol", "cache-admins"))[0] == 403,
             "the revoked permission to be denied by the service", timeout=30, interval=1)


def test_decision_cache_does_not_leak_between_users(helm: Cluster, direct: Direct,
                                                    front_proxy: tuple[Path, Path], alice: Path) -> None:
    wait_for(lambda: direct.request(REDISES_A, cert=front_proxy, headers=as_user("alice"))[0] == 200,
             "alice's RoleBinding to take effect")
    # The same question, asked right after an allowed answer was cached, by other identities.
    for _ in range(3):
        assert direct.request(REDISES_A, cert=front_proxy, headers=as_user("alice"))[0] == 200
        code, body, _ = direct.request(REDISES_A, cert=front_proxy, headers=as_user("mallory"))
        assert_status(code, body, 403, "Forbidden")
        # Same user name, but the privileged group is what allowed it: groups are part of the key.
        assert direct.request(REDISES_A, cert=front_proxy, headers=as_user("bob", "system:masters"))[0] == 200
        code, body, _ = direct.request(REDISES_A, cert=front_proxy, headers=as_user("bob"))
        assert_status(code, body, 403, "Forbidden")
    # A denied namespace does not become allowed through an allowed one's cache entry.
    code, body, _ = direct.request(REDISES_B, cert=front_proxy, headers=as_user("alice"))
    assert_status(code, body, 403, "Forbidden")


def test_decision_cache_is_keyed_by_extras(helm: Cluster, direct: Direct, front_proxy: tuple[Path, Path],
                                           authorizer: TestAuthorizer) -> None:
    """A user allowed without an extra and denied with it gets both answers, whichever is cached first."""
    for user, first_marked in (("fenced-allowed-first", False), ("fenced-denied-first", True)):
        plain = as_user(user, AUTHZ_WEBHOOK_GROUP)
        marked = {**plain, f"X-Remote-Extra-{DENY_EXTRA}": "yes"}
        for _ in range(2):
            for headers in ((marked, plain) if first_marked else (plain, marked)):
                code, body, _ = direct.request(REDISES_A, cert=front_proxy, headers=headers)
                if headers is marked:
                    assert_status(code, body, 403, "Forbidden")
                else:
                    assert code == 200 and body["kind"] == "RedisList", (user, code, body)
        # One review per distinct identity: the rest came from the cache, each under its own key.
        assert sorted(authorizer.decisions[user]) == [False, True], authorizer.decisions[user]


@pytest.mark.parametrize(("verb", "method", "path", "payload"), [
    ("list", "GET", REDISES_A, None),
    ("watch", "GET", f"{REDISES_A}?watch=true&timeoutSeconds=1", None),
    ("create", "POST", REDISES_A, manifest("let-through", NS_A)),
    ("delete", "DELETE", f"{REDISES_A}/guarded", None),
    ("patch", "PATCH", f"{REDISES_A}/guarded", '{"spec":{"replicas":9}}'),
])
def test_service_authorizes_what_kube_apiserver_let_through(
        helm: Cluster, authorizer: TestAuthorizer, verb: str, method: str, path: str, payload: str | None) -> None:
    """kube-apiserver allows the request, the service's own SubjectAccessReview denies it: 403, no effect."""
    kubectl(helm, "apply", "-f", "-", input=manifest("guarded", NS_A, {"replicas": 1}))
    before = json.loads(kubectl(helm, "get", HR, "redis-guarded", "-n", NS_A, "-o", "json").stdout)
    user = f"once-{verb}"
    raw = user_api(helm, helm.user_kubeconfig(user, (AUTHZ_WEBHOOK_GROUP,)))
    code, body = raw.request(method, path, payload, content_type="application/merge-patch+json"
                             if method == "PATCH" else "application/json")
    assert_status(code, body, 403, "Forbidden")
    # The first review (kube-apiserver's) allowed it; the 403 is the service's, from the second.
    assert authorizer.decisions[user] == [True, False]
    assert f'User "{user}" cannot {verb} resource "redises"' in body["message"]
    assert "test authorizer" not in body["message"]  # kube-apiserver quotes the webhook's reason
    assert "redis-let-through" not in release_names(helm, NS_A)
    after = json.loads(kubectl(helm, "get", HR, "redis-guarded", "-n", NS_A, "-o", "json").stdout)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


# ------------------------------------------------------------------- RBAC through kubectl


def test_unprivileged_user_is_forbidden_and_sees_nothing(helm: Cluster, mallory: Path) -> None:
    kubectl(helm, "apply", "-f", "-", input=manifest("secret-cache", NS_A))
    raw = user_api(helm, mallory)
    for path in (REDISES_A, f"{REDISES_A}/secret-cache", f"/apis/{GROUP}/{VERSION}/redises"):
        code, body = raw.request("GET", path)
        assert_status(code, body, 403, "Forbidden")
        assert "items" not in body and "spec" not in body
    for args in (("get", "redises", "-n", NS_A), ("get", "redises", "-A"),
                 ("get", "redis", "secret-cache", "-n", NS_A)):
        result = kubectl(helm, *args, "-o", "json", kubeconfig=mallory, check=False)
        assert result.returncode != 0, result.stdout
        assert "Forbidden" in result.stderr or "forbidden" in result.stderr, result.stderr
        assert "secret-cache" not in result.stdout
    result = kubectl(helm, "apply", "-f", "-", input=manifest("mallorys", NS_A), kubeconfig=mallory, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    assert "redis-mallorys" not in release_names(helm, NS_A)
    result = kubectl(helm, "delete", "redis", "secret-cache", "-n", NS_A, kubeconfig=mallory, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    assert "redis-secret-cache" in release_names(helm, NS_A)


def test_namespace_scoped_role(helm: Cluster, alice: Path) -> None:
    wait_for(lambda: kubectl(helm, "get", "redises", "-n", NS_A, kubeconfig=alice, check=False).returncode == 0,
             "alice can list in A")
    kubectl(helm, "apply", "-f", "-", input=manifest("alices", NS_A, {"replicas": 3}), kubeconfig=alice)
    app = json.loads(kubectl(helm, "get", "redis", "alices", "-n", NS_A, "-o", "json", kubeconfig=alice).stdout)
    assert app["spec"]["replicas"] == 3
    names = {i["metadata"]["name"]
             for i in json.loads(kubectl(helm, "get", "redises", "-n", NS_A, "-o", "json",
                                         kubeconfig=alice).stdout)["items"]}
    assert "alices" in names
    kubectl(helm, "patch", "redis", "alices", "-n", NS_A, "--type=merge", "-p", '{"spec":{"replicas":4}}',
            kubeconfig=alice)
    # The HelmRelease was written with the service's identity: alice has no rights on it ...
    result = kubectl(helm, "get", HR, "redis-alices", "-n", NS_A, kubeconfig=alice, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    # ... yet it exists and carries her change.
    release = json.loads(kubectl(helm, "get", HR, "redis-alices", "-n", NS_A, "-o", "json").stdout)
    assert release["spec"]["values"]["replicas"] == 4

    # Namespace B: neither write nor read, and B's Applications stay invisible.
    kubectl(helm, "apply", "-f", "-", input=manifest("bees", NS_B))
    result = kubectl(helm, "apply", "-f", "-", input=manifest("alices", NS_B), kubeconfig=alice, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    assert "redis-alices" not in release_names(helm, NS_B)
    for args in (("get", "redises", "-n", NS_B), ("get", "redis", "bees", "-n", NS_B), ("get", "redises", "-A")):
        result = kubectl(helm, *args, "-o", "json", kubeconfig=alice, check=False)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (args, result.stderr)
        assert "bees" not in result.stdout
    result = kubectl(helm, "delete", "redis", "bees", "-n", NS_B, kubeconfig=alice, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    assert "redis-bees" in release_names(helm, NS_B)

    kubectl(helm, "delete", "redis", "alices", "-n", NS_A, kubeconfig=alice)
    wait_for(lambda: "redis-alices" not in release_names(helm, NS_A), "alice's HelmRelease deleted")
