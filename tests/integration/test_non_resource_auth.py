"""/metrics and /openapi/* are authorized like kube-apiserver's own non-resource paths, in both services;
and the privileged group is allowed without asking, as kube-apiserver allows it.

The oracle is kube-apiserver itself: the same user asking kube-apiserver's own ``/metrics`` gets
the same 403 Status, and RBAC's ``nonResourceURLs`` grant both alike.  Identities reach the
services the two ways they can: as kube-apiserver's front proxy (its real client certificate and
identity headers), and as a direct caller with a ServiceAccount token (how Prometheus scrapes).
kube-apiserver's own aggregation of the services' OpenAPI (user ``system:aggregator``) must keep
working: ``kubectl explain`` depends on it (its tests are in each stack's module).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api, kubectl, load_fixture, served_requests, wait_for
from tests.kube import call_service as call

PATHS = ("/metrics", "/openapi/v2", "/openapi/v3")
FIXTURES = {"helm-agl": "redis.yaml", "tofu-agl": "vpc.yaml"}
NAMESPACE = "agl-nonresource"


@pytest.fixture(scope="module", params=["helm", "tofu"])
def service(request: pytest.FixtureRequest, control_plane: Cluster) -> services.Running:
    """The service serving now: an earlier module may have replaced the session's with a new process on a new
    port (test_leader_election does), so ask for the one that runs rather than trust the session fixture's."""
    running: services.Running = request.getfixturevalue(f"{request.param}_service")
    return services.start(control_plane, running.service)


@pytest.fixture(scope="module")
def port(service: services.Running) -> int:
    return service.port


@pytest.fixture(scope="module")
def front_proxy(control_plane: Cluster) -> tuple[Path, Path]:
    return control_plane.pki_dir / "front-proxy-client.crt", control_plane.pki_dir / "front-proxy-client.key"


def as_user(user: str, group: str | None = None) -> dict[str, str]:
    return {"X-Remote-User": user, **({"X-Remote-Group": group} if group else {})}


@pytest.fixture(scope="module")
def scraper_role(control_plane: Cluster) -> Iterator[None]:
    """What the chart's opt-in metrics-reader grants, bound to a user and to a ServiceAccount; plus an
    unbound ServiceAccount."""
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}}
          for name in ("prometheus", "nobody")),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "agl-test-scraper"},
         "rules": [{"nonResourceURLs": ["/metrics", "/openapi", "/openapi/*"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "agl-test-scraper"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agl-test-scraper"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "scraper"},
                      {"kind": "ServiceAccount", "name": "prometheus", "namespace": NAMESPACE}]},
    ]
    kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(documents))
    yield


def token(cluster: Cluster, account: str) -> str:
    return kubectl(cluster, "create", "token", account, "-n", NAMESPACE, "--duration=1h").stdout.strip()


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_health_stays_open(port: int, path: str) -> None:
    assert call(port, path) == (200, "ok")


def test_anonymous_is_401(port: int) -> None:
    for path in PATHS:
        code, body = call(port, path)
        assert code == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized", (path, body)


def test_unprivileged_user_is_refused_as_kube_apiserver_refuses_it(
        control_plane: Cluster, port: int, front_proxy: tuple[Path, Path]) -> None:
    for path in PATHS:
        code, body = call(port, path, cert=front_proxy, headers=as_user("mallory"))
        assert code == 403, (path, code, body)
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f'forbidden: User "mallory" cannot get path "{path}"', "reason": "Forbidden",
                        "details": {}, "code": 403}
    # kube-apiserver's own answer to the same user for its own /metrics: the same Status.
    mallory = Api(control_plane, user="mallory")
    kubeconfig = yaml.safe_load(control_plane.user_kubeconfig("mallory").read_text())["users"][0]["user"]
    mallory.ctx.load_cert_chain(kubeconfig["client-certificate"], kubeconfig["client-key"])
    assert mallory.request("GET", "/metrics") == call(port, "/metrics", cert=front_proxy,
                                                      headers=as_user("mallory", "system:authenticated"))
    # Every authenticated user may read OpenAPI (system:discovery), on kube-apiserver and here alike.
    assert mallory.request("GET", "/openapi/v2")[0] == 200
    assert call(port, "/openapi/v2", cert=front_proxy, headers=as_user("mallory", "system:authenticated"))[0] == 200


def test_granted_non_resource_urls_are_served(port: int, front_proxy: tuple[Path, Path], scraper_role: None) -> None:
    for path in PATHS:
        wait_for(lambda path=path: call(port, path, cert=front_proxy, headers=as_user("scraper"))[0] == 200,
                 f"the scraper's binding to allow {path}")
    _, text = call(port, "/metrics", cert=front_proxy, headers=as_user("scraper"))
    assert "apiserver_request_total" in text


def test_service_account_token_scrapes_metrics(control_plane: Cluster, port: int, scraper_role: None) -> None:
    """Prometheus's way in: no client certificate, its ServiceAccount token, RBAC on /metrics."""
    prometheus = {"Authorization": f"Bearer {token(control_plane, 'prometheus')}"}
    wait_for(lambda: call(port, "/metrics", headers=prometheus)[0] == 200, "the bound ServiceAccount to scrape")
    assert "apiserver_request_total" in call(port, "/metrics", headers=prometheus)[1]
    nobody = f"system:serviceaccount:{NAMESPACE}:nobody"
    code, body = call(port, "/metrics", headers={"Authorization": f"Bearer {token(control_plane, 'nobody')}"})
    assert code == 403 and body["message"] == f'forbidden: User "{nobody}" cannot get path "/metrics"', body
    # A token is not a key to the served kinds: those still need RBAC on the resources.
    code, body = call(port, "/apis/apps.cozystack.io/v1alpha1/namespaces/default/redises", headers=prometheus)
    assert code in (403, 404), (code, body)
    code, body = call(port, "/metrics", headers={"Authorization": "Bearer not-a-token"})
    assert code == 401 and body["reason"] == "Unauthorized", body


def test_kube_apiserver_aggregates_the_openapi(control_plane: Cluster, service: services.Running) -> None:
    """kube-apiserver fetched the service's OpenAPI as system:aggregator: its merged v2 document has the kind."""
    group = service.service.group
    fixture = FIXTURES[service.service.name]
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture(fixture)))

    def aggregated() -> bool:
        v2 = json.loads(kubectl(control_plane, "get", "--raw", "/openapi/v2").stdout)
        return any(path.startswith(f"/apis/{group}/") for path in v2["paths"])

    wait_for(aggregated, f"kube-apiserver to aggregate the OpenAPI of {group}", timeout=120, interval=2)


def test_privileged_group_is_allowed_without_a_review(
        control_plane: Cluster, service: services.Running, front_proxy: tuple[Path, Path]) -> None:
    """kube-apiserver allows ``system:masters`` ahead of RBAC and webhooks, so asking it is a kube call whose answer
    is known (the generic apiserver's delegating authorizer skips it too). Counted by kube-apiserver: gets of names
    never asked about cost a SubjectAccessReview each for another user, and none for the privileged group."""
    definition = load_fixture(FIXTURES[service.service.name])
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition))
    kind = f"/apis/{service.service.group}/v1alpha1/namespaces/default/{definition['spec']['application']['plural']}"
    root, mallory = as_user("root", "system:masters"), as_user("mallory", "system:authenticated")
    wait_for(lambda: call(service.port, f"{kind}/warm-up", cert=front_proxy, headers=root)[0] == 404,
             "the kind to be served")

    def reviews() -> int:
        return served_requests(control_plane, "authorization.k8s.io", "subjectaccessreviews")["POST"]

    def spent(user: dict[str, str], expected: int, prefix: str) -> int:
        before = reviews()
        for n in range(20):
            code, body = call(service.port, f"{kind}/{prefix}-{n}", cert=front_proxy, headers=user)
            assert code == expected, (code, body)
        return reviews() - before

    assert spent(mallory, 403, "unreviewed") >= 20
    # Not 0: kube-apiserver fetches the services' OpenAPI in the background as another user, which is reviewed.
    assert spent(root, 404, "unreviewed-too") < 5
