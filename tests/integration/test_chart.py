"""The Helm chart (deploy/chart): rendered by a real helm, applied to the real control plane.

Rendering checks prove the feature flags add and remove exactly one service's objects, the
certificates and RBAC are what the services need, and bad values are refused by the chart's
schema.  Applying the rendered objects with server-side apply and strict field validation proves
kube-apiserver accepts every one of them as written (CRDs, RBAC, Deployments, Services, Secrets);
SubjectAccessReviews then prove the RBAC grants each service exactly its calls and that tenants
bound to the built-in roles get the published kinds but not the backing objects.

Nothing runs the pods here (no kubelet, no controller-manager), and the APIServices are only
validated with a server-side dry run: registering them would route our groups to a Service
without endpoints while the services under test in the same session serve those groups.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from localcluster import aggregation, build, crds, services, versions
from localcluster.cluster import Cluster, free_port

from tests.kube import ROOT, wait_for
from tests.recorded import load_recorded

CHART = ROOT / "deploy" / "chart"
RELEASE = "chart"
NS = "agl-chart"
HELM_GROUP = "apps.cozystack.io"
DEFAULT_TOFU_GROUP = "tofu.apps.cozystack.io"
#: The applied render uses its own Tofu group so nothing it creates can shadow the services under test.
TOFU_GROUP = "tofu-chart.apps.cozystack.io"
HELM_SVC = f"{RELEASE}-helm-agl"
TOFU_SVC = f"{RELEASE}-tofu-agl"
FIELD_MANAGER = "agl-chart-test"

Doc = dict[str, Any]


# ----------------------------------------------------------------------------------- helpers


class Helm:
    """The pinned helm built from the module proxy, with its own empty config/cache/data homes."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = dict(os.environ, HELM_CONFIG_HOME=str(home / "config"), HELM_CACHE_HOME=str(home / "cache"),
                        HELM_DATA_HOME=str(home / "data"))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=self.env,
                                timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def template(self, *sets: str, extra: tuple[str, ...] = ()) -> list[Doc]:
        flags = [arg for s in sets for arg in ("--set", s)]
        out = self.run("template", RELEASE, str(CHART), "--namespace", NS, *flags, *extra).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(build.ensure_helm(), tmp_path_factory.mktemp("helm-home"))


def index(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def names(docs: list[Doc], kind: str) -> set[str]:
    return {doc["metadata"]["name"] for doc in of_kind(docs, kind)}


def component(doc: Doc) -> str | None:
    labels: dict[str, str] = doc["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/component")


def container(workload: Doc) -> Doc:
    """The one container of a Deployment or a Pod."""
    pod = workload["spec"] if workload["kind"] == "Pod" else workload["spec"]["template"]["spec"]
    containers: list[Doc] = pod["containers"]
    assert len(containers) == 1
    return containers[0]


def pem(secret: Doc, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


# What each service calls, written out independently of the templates: the chart must grant exactly this.
def expected_rules(backing_group: str, backing: str, definitions: str, apiservice: str) -> list[Doc]:
    return [
        {"apiGroups": [backing_group], "resources": [backing],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["cozystack.io"], "resources": [definitions], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["cozystack.io"], "resources": [f"{definitions}/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings",
                       "mutatingwebhookconfigurations", "validatingwebhookconfigurations"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
        {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"], "resourceNames": [apiservice],
         "verbs": ["patch"]},
    ]


def kind_role_rules(group: str, *extra_verbs: str) -> list[Doc]:
    """Writing the per-kind ClusterRoles: its own ones, and (escalation prevention) what they grant."""
    return [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "verbs": ["list", "create", "patch", "delete"]},
        {"apiGroups": [group], "resources": ["*"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", *extra_verbs]},
    ]


def helm_rules() -> list[Doc]:
    rules = expected_rules("helm.toolkit.fluxcd.io", "helmreleases", "applicationdefinitions",
                           f"v1alpha1.{HELM_GROUP}")
    return rules[:-1] + kind_role_rules(HELM_GROUP) + rules[-1:]


HELM_RULES = helm_rules()


def tofu_rules(group: str) -> list[Doc]:
    rules = expected_rules("infra.contrib.fluxcd.io", "terraforms", "tofuapplicationdefinitions", f"v1alpha1.{group}")
    # Plan preview: the readable plan tofu-controller keeps, read by its exact name; never listed.
    plans = {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]}
    return [*rules[:-1], plans, *kind_role_rules(group, "approve"), *rules[-1:]]


# ------------------------------------------------------------------------- rendering checks


def test_chart_lints_strictly(helm: Helm) -> None:
    for sets in ((), ("helmAgl.enabled=false",), ("tofuAgl.enabled=false",), ("tls.mode=generate",),
                 ("tls.mode=existingSecret", "helmAgl.tls.secretName=h", "tofuAgl.tls.secretName=t"),
                 ("serviceMonitor.enabled=true", "networkPolicy.enabled=true",
                  "networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24")):
        flags = [arg for s in sets for arg in ("--set", s)]
        result = helm.run("lint", "--strict", str(CHART), *flags, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_both_services_by_default(helm: Helm) -> None:
    docs = helm.template()
    assert names(docs, "Deployment") == {HELM_SVC, TOFU_SVC}
    assert names(docs, "Service") == {HELM_SVC, TOFU_SVC}
    assert names(docs, "ServiceAccount") == {HELM_SVC, TOFU_SVC, f"{HELM_SVC}-test", f"{TOFU_SVC}-test"}
    assert not of_kind(docs, "Secret")  # cert-manager writes them (tls.mode certManager, the default)
    assert names(docs, "Certificate") == {f"{HELM_SVC}-ca", f"{HELM_SVC}-serving", f"{TOFU_SVC}-ca",
                                          f"{TOFU_SVC}-serving"}
    assert names(docs, "PodDisruptionBudget") == {HELM_SVC, TOFU_SVC}
    assert names(docs, "Pod") == {f"{HELM_SVC}-test", f"{TOFU_SVC}-test"}
    assert names(docs, "APIService") == {f"v1alpha1.{HELM_GROUP}", f"v1alpha1.{DEFAULT_TOFU_GROUP}"}
    assert names(docs, "CustomResourceDefinition") == {"applicationdefinitions.cozystack.io",
                                                       "tofuapplicationdefinitions.cozystack.io"}
    # No tenant roles: the services keep them per kind (tests/integration/test_tenant_rbac.py).
    assert names(docs, "ClusterRole") == {HELM_SVC, f"{HELM_SVC}:aggregator-openapi", f"{HELM_SVC}:test", TOFU_SVC,
                                          f"{TOFU_SVC}:aggregator-openapi", f"{TOFU_SVC}:test"}
    assert names(docs, "ClusterRoleBinding") == {HELM_SVC, f"{HELM_SVC}:auth-delegator",
                                                 f"{HELM_SVC}:aggregator-openapi", f"{HELM_SVC}:test", TOFU_SVC,
                                                 f"{TOFU_SVC}:auth-delegator", f"{TOFU_SVC}:aggregator-openapi",
                                                 f"{TOFU_SVC}:test"}
    assert names(docs, "RoleBinding") == {f"{NS}:{HELM_SVC}:auth-reader", f"{NS}:{TOFU_SVC}:auth-reader",
                                          f"{HELM_SVC}:leader-election", f"{TOFU_SVC}:leader-election"}
    assert names(docs, "Role") == {f"{HELM_SVC}:leader-election", f"{TOFU_SVC}:leader-election"}
    for doc in docs:
        namespaced = doc["kind"] in {"Deployment", "Service", "ServiceAccount", "Secret", "Role", "Certificate",
                                     "Issuer", "PodDisruptionBudget", "Pod"}
        if namespaced:
            assert doc["metadata"]["namespace"] == NS, doc["metadata"]
    # Optional extras stay off unless asked for.
    assert not of_kind(docs, "ServiceMonitor") and not of_kind(docs, "NetworkPolicy")


@pytest.mark.parametrize(("flag", "kept", "dropped"), [
    ("tofuAgl.enabled=false", "helm-agl", "tofu-agl"),
    ("helmAgl.enabled=false", "tofu-agl", "helm-agl"),
])
def test_each_service_alone(helm: Helm, flag: str, kept: str, dropped: str) -> None:
    docs = helm.template(flag)
    assert docs and all(component(doc) == kept for doc in docs), {(d["kind"], component(d)) for d in docs}
    assert len(of_kind(docs, "Deployment")) == len(of_kind(docs, "APIService")) == 1
    assert len(of_kind(docs, "CustomResourceDefinition")) == 1
    text = yaml.safe_dump_all(docs)
    # Nothing of the other service, not even a rule or a reference.
    other = {"tofu-agl": ("terraforms", "tofuapplicationdefinitions", "tofu_agl", DEFAULT_TOFU_GROUP),
             "helm-agl": ("helmreleases", "applicationdefinitions.cozystack.io", "helm_agl",
                          f"v1alpha1.{HELM_GROUP}")}[dropped]
    for word in other:
        assert not re.search(rf"(?<![a-z]){re.escape(word)}", text), word


def test_nothing_enabled_renders_nothing(helm: Helm) -> None:
    assert helm.template("helmAgl.enabled=false", "tofuAgl.enabled=false") == []


def test_crds_are_the_repository_files(helm: Helm) -> None:
    docs = helm.template()
    for crd in of_kind(docs, "CustomResourceDefinition"):
        source = yaml.safe_load((ROOT / "crds" / f"cozystack.io_{crd['spec']['names']['plural']}.yaml").read_text())
        assert crd["spec"] == source["spec"]
        assert crd["metadata"]["name"] == source["metadata"]["name"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "helm.sh/resource-policy" not in yaml.safe_dump_all(helm.template("crds.keep=false"))
    assert not of_kind(helm.template("crds.install=false"), "CustomResourceDefinition")


def test_generated_certificates(helm: Helm) -> None:
    docs = helm.template("tls.mode=generate")
    objs = index(docs)
    for svc, group in ((HELM_SVC, HELM_GROUP), (TOFU_SVC, DEFAULT_TOFU_GROUP)):
        secret = objs[("Secret", f"{svc}-tls")]
        assert secret["type"] == "kubernetes.io/tls"
        apiservice = objs[("APIService", f"v1alpha1.{group}")]
        # The APIService trusts exactly the CA that signed the certificate the pod serves.
        assert base64.b64decode(apiservice["spec"]["caBundle"]) == pem(secret, "ca.crt")
        ca = x509.load_pem_x509_certificate(pem(secret, "ca.crt"))
        cert = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
        assert f"{svc}.{NS}.svc" in sans and f"{svc}.{NS}.svc.cluster.local" in sans
        deployment = objs[("Deployment", svc)]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/tls"] == hashlib.sha256(pem(secret, "tls.crt")).hexdigest()
        assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == f"{svc}-tls"
    # Each service has its own CA.
    assert pem(objs[("Secret", f"{HELM_SVC}-tls")], "ca.crt") != pem(objs[("Secret", f"{TOFU_SVC}-tls")], "ca.crt")


def test_cert_manager(helm: Helm) -> None:
    """cert-manager is the default mode: nothing random in the render, renewals by cert-manager."""
    docs = helm.template()
    assert docs == helm.template("tls.mode=certManager")
    objs = index(docs)
    assert not of_kind(docs, "Secret")
    for svc, group in ((HELM_SVC, HELM_GROUP), (TOFU_SVC, DEFAULT_TOFU_GROUP)):
        apiservice = objs[("APIService", f"v1alpha1.{group}")]
        assert "caBundle" not in apiservice["spec"]
        assert apiservice["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NS}/{svc}-serving"}
        serving = objs[("Certificate", f"{svc}-serving")]
        assert serving["metadata"]["namespace"] == NS
        assert serving["spec"]["secretName"] == f"{svc}-tls"
        assert f"{svc}.{NS}.svc" in serving["spec"]["dnsNames"]
        # serving <- CA Issuer <- CA Certificate's Secret <- self-signed Issuer.
        ca_issuer = objs[("Issuer", serving["spec"]["issuerRef"]["name"])]
        ca_cert = next(c for c in of_kind(docs, "Certificate")
                       if c["spec"].get("secretName") == ca_issuer["spec"]["ca"]["secretName"])
        assert ca_cert["spec"]["isCA"] is True
        assert "selfSigned" in objs[("Issuer", ca_cert["spec"]["issuerRef"]["name"])]["spec"]
        deployment = objs[("Deployment", svc)]
        assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == f"{svc}-tls"
        assert "checksum/tls" not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})
    # An existing CA issuer replaces the chart's own.
    docs = helm.template("certManager.issuerRef.kind=ClusterIssuer",
                         "certManager.issuerRef.name=platform-ca")
    assert not of_kind(docs, "Issuer")
    assert {c["metadata"]["name"] for c in of_kind(docs, "Certificate")} == {f"{HELM_SVC}-serving",
                                                                             f"{TOFU_SVC}-serving"}
    assert all(c["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "platform-ca"}
               for c in of_kind(docs, "Certificate"))


def test_custom_tofu_group(helm: Helm) -> None:
    docs = helm.template(f"tofuAgl.group={TOFU_GROUP}", "helmAgl.enabled=false")
    objs = index(docs)
    apiservice = objs[("APIService", f"v1alpha1.{TOFU_GROUP}")]
    assert apiservice["spec"]["group"] == TOFU_GROUP and apiservice["spec"]["version"] == "v1alpha1"
    assert apiservice["spec"]["service"] == {"name": TOFU_SVC, "namespace": NS, "port": 443}
    args = container(objs[("Deployment", TOFU_SVC)])["args"]
    assert args[args.index("--group") + 1] == TOFU_GROUP
    assert objs[("ClusterRole", TOFU_SVC)]["rules"] == tofu_rules(TOFU_GROUP)
    # (The CRD's prose mentions the default group; no object refers to it.)
    assert DEFAULT_TOFU_GROUP not in yaml.safe_dump_all(
        [doc for doc in docs if doc["kind"] != "CustomResourceDefinition"])


def test_deployments_are_hardened(helm: Helm) -> None:
    objs = index(helm.template("helmAgl.replicas=3"))
    for svc, module in ((HELM_SVC, "helm_agl"), (TOFU_SVC, "tofu_agl")):
        deployment = objs[("Deployment", svc)]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == svc
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
        c = container(deployment)
        assert c["command"] == ["python", "-m", module]
        assert c["args"][:3] == ["--secure-port=8443", "--tls-cert-file=/tls/tls.crt",
                                 "--tls-private-key-file=/tls/tls.key"]
        # Leader election is always on: only one replica writes, whatever the replica count.
        assert c["args"][4:7] == ["--leader-elect", f"--leader-elect-namespace={NS}",
                                  f"--leader-elect-lease-name={svc}-reconciler"]
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["runAsNonRoot"] is True and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
            assert c[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
        assert c["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        assert c["image"] == "ghcr.io/cozystack/agl-parallel:0.1.0"
        # The replica's identity (Lease holder, kopf) is its pod's name: uid 65532 has no passwd entry to ask.
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAME"] == {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        assert env["POD_NAMESPACE"] == {"name": "POD_NAMESPACE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
        assert "POD_ID" not in env  # kopf's own variable: the service hands kopf its identity itself
        service = objs[("Service", svc)]
        assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert objs[("Deployment", HELM_SVC)]["spec"]["replicas"] == 3
    assert objs[("Deployment", TOFU_SVC)]["spec"]["replicas"] == 2
    image = container(index(helm.template("image.tag=dev", "image.repository=registry.local/agl"))[
        ("Deployment", HELM_SVC)])["image"]
    assert image == "registry.local/agl:dev"


def test_rbac_is_exactly_what_the_services_call(helm: Helm) -> None:
    objs = index(helm.template())
    assert objs[("ClusterRole", HELM_SVC)]["rules"] == HELM_RULES
    assert objs[("ClusterRole", TOFU_SVC)]["rules"] == tofu_rules(DEFAULT_TOFU_GROUP)
    for svc in (HELM_SVC, TOFU_SVC):
        subject = [{"kind": "ServiceAccount", "name": svc, "namespace": NS}]
        delegator = objs[("ClusterRoleBinding", f"{svc}:auth-delegator")]
        assert delegator["roleRef"]["name"] == "system:auth-delegator" and delegator["subjects"] == subject
        reader = objs[("RoleBinding", f"{NS}:{svc}:auth-reader")]
        assert reader["metadata"]["namespace"] == "kube-system"
        assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                     "name": "extension-apiserver-authentication-reader"}
        assert reader["subjects"] == subject
        election = objs[("Role", f"{svc}:leader-election")]
        assert election["metadata"]["namespace"] == NS
        assert election["rules"] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [f"{svc}-reconciler"], "verbs": ["get", "update"]},
        ]
        election_binding = objs[("RoleBinding", f"{svc}:leader-election")]
        assert election_binding["metadata"]["namespace"] == NS
        assert election_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                               "name": f"{svc}:leader-election"}
        assert election_binding["subjects"] == subject
    # No group-wide tenant roles (a tenant editor could otherwise use every kind, present and future).
    assert not [doc for doc in of_kind(list(objs.values()), "ClusterRole")
                if any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in doc["metadata"]["labels"])]


def test_non_resource_url_roles(helm: Helm) -> None:
    """kube-apiserver's aggregator may read OpenAPI; /metrics readers only when asked for."""
    objs = index(helm.template())
    for svc in (HELM_SVC, TOFU_SVC):
        role = objs[("ClusterRole", f"{svc}:aggregator-openapi")]
        assert role["rules"] == [{"nonResourceURLs": ["/openapi", "/openapi/*"], "verbs": ["get"]}]
        binding = objs[("ClusterRoleBinding", f"{svc}:aggregator-openapi")]
        assert binding["roleRef"]["name"] == f"{svc}:aggregator-openapi"
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                        "name": "system:aggregator"}]
        assert (("ClusterRole", f"{svc}:metrics-reader")) not in objs
    prometheus = {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    opted = index(helm.template("rbac.metricsReader.enabled=true"))
    unbound = index(helm.template(extra=("--set-json", f"rbac.metricsReader.subjects=[{json.dumps(prometheus)}]")))
    assert not any(name.endswith(":metrics-reader") for _, name in unbound)  # subjects alone do nothing
    bound = index(helm.template("rbac.metricsReader.enabled=true",
                                extra=("--set-json", f"rbac.metricsReader.subjects=[{json.dumps(prometheus)}]")))
    for svc in (HELM_SVC, TOFU_SVC):
        assert opted[("ClusterRole", f"{svc}:metrics-reader")]["rules"] == [
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
        assert ("ClusterRoleBinding", f"{svc}:metrics-reader") not in opted
        binding = bound[("ClusterRoleBinding", f"{svc}:metrics-reader")]
        assert binding["roleRef"]["name"] == f"{svc}:metrics-reader" and binding["subjects"] == [prometheus]


@pytest.mark.parametrize(("setting", "message"), [
    ("helmAgl.replicas=-1", "/helmAgl/replicas"),
    ("tofuAgl.group=Not_A_Group", "/tofuAgl/group"),
    ("tofuAgl.logLevel=LOUD", "/tofuAgl/logLevel"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("helmAgl.enabeld=true", "enabeld"),
    ("tofuAgl.group=apps.cozystack.io", "must differ from apps.cozystack.io"),
    ("rbac.metricsReader.enabled=maybe", "/rbac/metricsReader/enabled"),
    # The fields of issue 24, each with a value the schema or the chart must refuse.
    ("image.digest=latest", "/image/digest"),
    ("tls.mode=selfSigned", "/tls/mode"),
    ("certManager.enabled=true", "enabled"),  # replaced by tls.mode: an old values file is told so
    ("helmAgl.priorityClassName=Not_A_Class", "/helmAgl/priorityClassName"),
    ("helmAgl.podDisruptionBudget.maxUnavailable=0", "/helmAgl/podDisruptionBudget/maxUnavailable"),
    ("tofuAgl.podDisruptionBudget.enabled=yes", "/tofuAgl/podDisruptionBudget/enabled"),
    ("tofuAgl.topologySpreadConstraints[0].whenUnsatisfiable=Maybe", "/tofuAgl/topologySpreadConstraints/0"),
    ("helmAgl.tls.secretName=Not_A_Name", "/helmAgl/tls/secretName"),
    ("helmAgl.tls.cert=not-a-certificate", "/helmAgl/tls/cert"),
    ("tofuAgl.tls.key=not-a-key", "/tofuAgl/tls/key"),
    ("serviceMonitor.enabled=maybe", "/serviceMonitor/enabled"),
    ("serviceMonitor.labels.release=5", "/serviceMonitor/labels/release"),
    ("serviceMonitor.interval=soon", "/serviceMonitor/interval"),
    ("serviceMonitor.scrapeTimeout=later", "/serviceMonitor/scrapeTimeout"),
    ("networkPolicy.enabled=maybe", "/networkPolicy/enabled"),
    ("networkPolicy.extraFrom[0].namespace=monitoring", "/networkPolicy/extraFrom/0"),
    ("helmAgl.tls.caBundle=not-a-certificate", "/helmAgl/tls/caBundle"),
    ("tls.validityDays=0", "/tls/validityDays"),
    ("serviceMonitor.bearerTokenSecret.name=token", "/serviceMonitor/bearerTokenSecret"),
    ("networkPolicy.apiServer[0].cidr=10.0.0.0/8", "/networkPolicy/apiServer/0"),
    ("tests.enabled=perhaps", "/tests/enabled"),
    # Rules across fields, enforced by the templates.
    ("tls.mode=existingSecret", "tls.mode existingSecret needs helmAgl.tls.secretName"),
    ("tls.mode=values", "tls.mode values needs helmAgl.tls.caBundle, .cert and .key"),
    ("networkPolicy.enabled=true", "networkPolicy.enabled needs networkPolicy.apiServer"),
])
def test_bad_values_are_refused(helm: Helm, setting: str, message: str) -> None:
    result = helm.run("template", RELEASE, str(CHART), "--set", setting, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_chart_metadata(helm: Helm) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://") and all(s.startswith("https://") for s in chart["sources"])
    assert chart["maintainers"] and all(m["name"] for m in chart["maintainers"])
    assert not (CHART / "files" / "crds").is_symlink()


def test_kube_version_is_what_the_services_need(helm: Helm) -> None:
    """>=1.30: the ValidatingAdmissionPolicy watches (admissionregistration.k8s.io/v1) need it
    (tests/unit/test_chart_kube_version.py derives the minimum from the code)."""
    too_old = helm.run("template", RELEASE, str(CHART), "--kube-version", "1.29.9", check=False)
    assert too_old.returncode != 0 and "kubeVersion" in too_old.stderr, too_old.stderr
    assert helm.run("template", RELEASE, str(CHART), "--kube-version", "1.30.0").stdout


def test_availability_defaults(helm: Helm) -> None:
    """Two replicas, a PodDisruptionBudget, spread over nodes (hard) and zones (soft), a critical priority."""
    objs = index(helm.template())
    for svc in (HELM_SVC, TOFU_SVC):
        deployment = objs[("Deployment", svc)]
        selector = deployment["spec"]["selector"]["matchLabels"]
        pod = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["replicas"] == 2
        pdb = objs[("PodDisruptionBudget", svc)]["spec"]
        assert pdb == {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                       "selector": {"matchLabels": selector}}
        assert pod["priorityClassName"] == "system-cluster-critical"
        spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
        assert set(spread) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
        assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
        for constraint in spread.values():
            assert constraint["maxSkew"] == 1
            assert constraint["labelSelector"] == {"matchLabels": selector}
            assert constraint["matchLabelKeys"] == ["pod-template-hash"]
    # Each is a value: changed or turned off for one service, the other keeps the defaults.
    own = {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway",
           "labelSelector": {"matchLabels": {"team": "x"}}}
    objs = index(helm.template("helmAgl.priorityClassName=", "tofuAgl.priorityClassName=agl-critical",
                               "helmAgl.podDisruptionBudget.enabled=false",
                               "tofuAgl.podDisruptionBudget.maxUnavailable=50%",
                               extra=("--set-json", "helmAgl.topologySpreadConstraints=[]",
                                      "--set-json", f"tofuAgl.topologySpreadConstraints=[{json.dumps(own)}]")))
    helm_pod = objs[("Deployment", HELM_SVC)]["spec"]["template"]["spec"]
    tofu_pod = objs[("Deployment", TOFU_SVC)]["spec"]["template"]["spec"]
    assert "priorityClassName" not in helm_pod and "topologySpreadConstraints" not in helm_pod
    assert ("PodDisruptionBudget", HELM_SVC) not in objs
    assert tofu_pod["priorityClassName"] == "agl-critical"
    assert objs[("PodDisruptionBudget", TOFU_SVC)]["spec"]["maxUnavailable"] == "50%"
    assert tofu_pod["topologySpreadConstraints"] == [{**own, "matchLabelKeys": ["pod-template-hash"]}]


def test_image_digest_wins_over_tag(helm: Helm) -> None:
    digest = "sha256:" + "ab" * 32
    objs = index(helm.template("image.repository=registry.local/agl", "image.tag=dev", f"image.digest={digest}"))
    for name in (HELM_SVC, TOFU_SVC):
        assert container(objs[("Deployment", name)])["image"] == f"registry.local/agl@{digest}"
        assert container(objs[("Pod", f"{name}-test")])["image"] == f"registry.local/agl@{digest}"


# ---- certificate modes


@dataclass(frozen=True)
class Material:
    """A CA and a serving certificate for both services, as PEM files (what an operator keeps in values)."""

    ca: Path
    cert: Path
    key: Path

    def sets(self) -> tuple[str, ...]:
        return tuple(arg for svc in ("helmAgl", "tofuAgl")
                     for field, path in (("caBundle", self.ca), ("cert", self.cert), ("key", self.key))
                     for arg in ("--set-file", f"{svc}.tls.{field}={path}"))


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    import datetime

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "agl-chart-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    sans = [x509.DNSName(f"{svc}.{NS}.svc") for svc in (HELM_SVC, TOFU_SVC)]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "agl")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca_key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    out = Material(folder / "ca.crt", folder / "tls.crt", folder / "tls.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return out


def certificate_modes(material: Material) -> dict[str, tuple[str, ...]]:
    """Flags of each mode whose render must not change between runs (every optional object on)."""
    extras = ("--set", "serviceMonitor.enabled=true", "--set", "networkPolicy.enabled=true",
              "--set", "networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24")
    return {
        "certManager": extras,
        "existingSecret": ("--set", "tls.mode=existingSecret", "--set", "helmAgl.tls.secretName=helm-serving",
                           "--set", "tofuAgl.tls.secretName=tofu-serving", *extras),
        "existingSecret+caBundle": ("--set", "tls.mode=existingSecret", "--set", "helmAgl.tls.secretName=helm-serving",
                                    "--set", "tofuAgl.tls.secretName=tofu-serving",
                                    "--set-file", f"helmAgl.tls.caBundle={material.ca}",
                                    "--set-file", f"tofuAgl.tls.caBundle={material.ca}", *extras),
        "values": ("--set", "tls.mode=values", *material.sets(), *extras),
    }


@pytest.mark.parametrize("mode", ["certManager", "existingSecret", "existingSecret+caBundle", "values"])
def test_render_twice_is_byte_identical(helm: Helm, material: Material, mode: str) -> None:
    """What Argo CD does on every sync: render without a cluster. Same values, same bytes, so no pod rolls."""
    flags = certificate_modes(material)[mode]
    first = helm.run("template", RELEASE, str(CHART), "--namespace", NS, *flags).stdout
    second = helm.run("template", RELEASE, str(CHART), "--namespace", NS, *flags).stdout
    assert first and first == second


def test_generate_mode_changes_with_every_offline_render(helm: Helm) -> None:
    """The documented caveat of tls.mode generate (why it is not the default): nothing to look up, new CA."""
    first = index(helm.template("tls.mode=generate"))
    second = index(helm.template("tls.mode=generate"))
    assert first[("Secret", f"{HELM_SVC}-tls")]["data"]["ca.crt"] != second[("Secret", f"{HELM_SVC}-tls")]["data"][
        "ca.crt"]


def test_values_mode(helm: Helm, material: Material) -> None:
    docs = helm.template("tls.mode=values", extra=material.sets())
    objs = index(docs)
    assert not of_kind(docs, "Certificate") and not of_kind(docs, "Issuer")
    for svc, group in ((HELM_SVC, HELM_GROUP), (TOFU_SVC, DEFAULT_TOFU_GROUP)):
        secret = objs[("Secret", f"{svc}-tls")]
        assert pem(secret, "ca.crt") == material.ca.read_bytes()
        assert pem(secret, "tls.crt") == material.cert.read_bytes()
        assert pem(secret, "tls.key") == material.key.read_bytes()
        apiservice = objs[("APIService", f"v1alpha1.{group}")]
        assert base64.b64decode(apiservice["spec"]["caBundle"]) == material.ca.read_bytes()
        assert "annotations" not in apiservice["metadata"]
        deployment = objs[("Deployment", svc)]
        assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/tls"] == hashlib.sha256(
            material.cert.read_bytes()).hexdigest()
        assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == f"{svc}-tls"


def test_existing_secret_mode(helm: Helm, material: Material) -> None:
    """The chart only refers to the operator's Secret: it writes no Secret and no certificate of its own."""
    base = ("tls.mode=existingSecret", "helmAgl.tls.secretName=helm-serving", "tofuAgl.tls.secretName=tofu-serving",
            "serviceMonitor.enabled=true")
    for given_ca in (False, True):
        extra = ("--set-file", f"helmAgl.tls.caBundle={material.ca}") if given_ca else ()
        docs = helm.template(*base, extra=extra)
        objs = index(docs)
        assert not of_kind(docs, "Secret") and not of_kind(docs, "Certificate") and not of_kind(docs, "Issuer")
        for svc, group, secret in ((HELM_SVC, HELM_GROUP, "helm-serving"), (TOFU_SVC, DEFAULT_TOFU_GROUP,
                                                                            "tofu-serving")):
            deployment = objs[("Deployment", svc)]
            assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == secret
            assert "checksum/tls" not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})
            assert objs[("ServiceMonitor", svc)]["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"] == secret
            apiservice = objs[("APIService", f"v1alpha1.{group}")]
            if given_ca and svc == HELM_SVC:
                assert base64.b64decode(apiservice["spec"]["caBundle"]) == material.ca.read_bytes()
                assert "annotations" not in apiservice["metadata"]
            else:
                # No CA given: cert-manager's CA injector copies the Secret's ca.crt into caBundle.
                assert "caBundle" not in apiservice["spec"]
                assert apiservice["metadata"]["annotations"] == {
                    "cert-manager.io/inject-ca-from-secret": f"{NS}/{secret}"}


# ---- optional objects


def test_service_monitor(helm: Helm) -> None:
    docs = helm.template("serviceMonitor.enabled=true", "serviceMonitor.labels.release=kube-prometheus",
                         "serviceMonitor.interval=1m")
    objs = index(docs)
    for svc in (HELM_SVC, TOFU_SVC):
        monitor = objs[("ServiceMonitor", svc)]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == NS
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
        service = objs[("Service", svc)]
        assert all(service["metadata"]["labels"][k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}
        assert monitor["spec"]["endpoints"] == [{
            "port": "https", "scheme": "https", "path": "/metrics", "interval": "1m", "scrapeTimeout": "10s",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"serverName": f"{svc}.{NS}.svc", "ca": {"secret": {"name": f"{svc}-tls", "key": "ca.crt"}}},
        }]
    endpoint = index(helm.template("serviceMonitor.enabled=true", "serviceMonitor.bearerTokenSecret.name=scrape",
                                   "serviceMonitor.bearerTokenSecret.key=token"))[("ServiceMonitor", HELM_SVC)][
        "spec"]["endpoints"][0]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "scrape", "key": "token"}}
    assert "bearerTokenFile" not in endpoint


def test_network_policy(helm: Helm) -> None:
    apiserver = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objs = index(helm.template("networkPolicy.enabled=true", extra=(
        "--set-json", f"networkPolicy.apiServer={json.dumps(apiserver)}",
        "--set-json", f"networkPolicy.extraFrom={json.dumps(prometheus)}")))
    for svc in (HELM_SVC, TOFU_SVC):
        policy = objs[("NetworkPolicy", svc)]["spec"]
        deployment = objs[("Deployment", svc)]
        assert policy["podSelector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
        assert policy["policyTypes"] == ["Ingress"]  # egress stays open: kube-apiserver and webhooks
        port = container(deployment)["ports"][0]["containerPort"]
        assert policy["ingress"] == [{"from": apiserver + prometheus, "ports": [{"port": port, "protocol": "TCP"}]}]


def test_helm_test_hooks(helm: Helm) -> None:
    docs = helm.template()
    objs = index(docs)
    for svc, group in ((HELM_SVC, HELM_GROUP), (TOFU_SVC, DEFAULT_TOFU_GROUP)):
        pod = objs[("Pod", f"{svc}-test")]
        assert pod["metadata"]["annotations"] == {"helm.sh/hook": "test",
                                                  "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
        spec = pod["spec"]
        assert spec["serviceAccountName"] == f"{svc}-test" and spec["restartPolicy"] == "Never"
        c = container(pod)
        assert c["image"] == container(objs[("Deployment", svc)])["image"]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env == {"AGL_TEST_PATH": f"/apis/{group}/v1alpha1", "AGL_TEST_GROUP_VERSION": f"{group}/v1alpha1"}
        assert c["command"][:2] == ["python", "-c"]
        compile(c["command"][2], f"{svc}-test", "exec")  # the script at least parses
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert objs[("ClusterRole", f"{svc}:test")]["rules"] == [
            {"nonResourceURLs": [f"/apis/{group}/v1alpha1"], "verbs": ["get"]}]
        binding = objs[("ClusterRoleBinding", f"{svc}:test")]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{svc}-test", "namespace": NS}]
    off = helm.template("tests.enabled=false")
    assert not of_kind(off, "Pod") and not [d for d in off if d["metadata"]["name"].endswith(("-test", ":test"))]


# ------------------------------------------------------------------ applied to kube-apiserver


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True,
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(*args, input=input, check=check, kubeconfig=kubeconfig)


def manifest(docs: list[Doc]) -> str:
    return "\n---\n".join(json.dumps(doc) for doc in docs)


def _matches(labels: dict[str, str], selector: Doc) -> bool:
    assert not selector.get("matchExpressions"), "only matchLabels selectors are emulated"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def aggregate_builtin_roles(cluster: Cluster) -> dict[str, list[Doc]]:
    """Do what kube-controller-manager's clusterrole-aggregation controller would (it does not run here).

    The selectors come from the real built-in roles, so this only proves our labels match them; the
    order view, edit, admin follows the built-in chain (view aggregates into edit, edit into admin).
    Returns the previous rules so the test can put them back.
    """
    previous: dict[str, list[Doc]] = {}
    for role in ("view", "edit", "admin"):
        everything = json.loads(kubectl(cluster, "get", "clusterroles", "-o", "json").stdout)["items"]
        target = next(cr for cr in everything if cr["metadata"]["name"] == role)
        previous[role] = target.get("rules") or []
        selectors = target["aggregationRule"]["clusterRoleSelectors"]
        rules: list[Doc] = []
        for cr in sorted(everything, key=lambda c: c["metadata"]["name"]):
            labels = cr["metadata"].get("labels") or {}
            if cr["metadata"]["name"] != role and any(_matches(labels, s) for s in selectors):
                rules += [r for r in cr.get("rules") or [] if r not in rules]
        kubectl(cluster, "patch", "clusterrole", role, "--type=merge", "-p", json.dumps({"rules": rules}))
    return previous


def allowed(cluster: Cluster, user: str, groups: list[str], verb: str, group: str, resource: str,
            namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> bool:
    """A SubjectAccessReview, as kube-apiserver's authorizer answers it."""
    attributes = {"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": name,
                  "subresource": subresource}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": groups,
                       "resourceAttributes": {k: v for k, v in attributes.items() if v}}}
    out = kubectl(cluster, "create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout
    return bool(json.loads(out)["status"].get("allowed"))


PROMETHEUS = {"kind": "ServiceAccount", "name": "prometheus", "namespace": NS}


def allowed_path(cluster: Cluster, user: str, groups: list[str], path: str) -> bool:
    """A SubjectAccessReview for ``get`` on a non-resource URL."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": groups, "nonResourceAttributes": {"path": path, "verb": "get"}}}
    out = kubectl(cluster, "create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout
    return bool(json.loads(out)["status"].get("allowed"))


#: The applied render: every optional object on (its Tofu group, generated certificates so the Secrets are
#: objects of the render, a Prometheus allowed /metrics, ServiceMonitor, NetworkPolicy, the helm test objects).
APPLIED_VALUES = (f"tofuAgl.group={TOFU_GROUP}", "tls.mode=generate", "rbac.metricsReader.enabled=true",
                  "serviceMonitor.enabled=true", "networkPolicy.enabled=true",
                  "networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24")
#: Objects only validated with a server dry run (see the module docstring; the helm test Pod would stay Pending).
DRY_RUN_ONLY = ("APIService", "Pod")


@pytest.fixture(scope="module")
def servicemonitor_crd(control_plane: Cluster) -> Iterator[None]:
    """prometheus-operator's own ServiceMonitor CRD, from its Go module (pinned by digest), for this module only."""
    path = crds.upstream_crd_file(versions.SERVICEMONITOR_CRD)
    kubectl(control_plane, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", str(path))
    kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com")
    yield
    kubectl(control_plane, "delete", "crd", "servicemonitors.monitoring.coreos.com", "--ignore-not-found",
            "--wait=false", check=False)


@pytest.fixture(scope="module")
def applied(control_plane: Cluster, helm: Helm, servicemonitor_crd: None) -> Iterator[list[Doc]]:
    """Both services rendered with every optional object and applied; the APIServices and the helm test Pods
    only as a server dry run."""
    docs = helm.template(*APPLIED_VALUES,
                         extra=("--set-json", f"rbac.metricsReader.subjects=[{json.dumps(PROMETHEUS)}]"))
    kubectl(control_plane, "create", "namespace", NS, check=False)
    apiservices = of_kind(docs, "APIService")
    rest = [doc for doc in docs if doc["kind"] not in DRY_RUN_ONLY]
    kubectl(control_plane, "apply", "--server-side", "--validate=strict", f"--field-manager={FIELD_MANAGER}",
            "-f", "-", input=manifest(rest))
    # The test Pods after their ServiceAccounts exist (admission checks them).
    pods = of_kind(docs, "Pod")
    dry_pods = kubectl(control_plane, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                       f"--field-manager={FIELD_MANAGER}", "-o", "json", "-f", "-", input=manifest(pods))
    assert dry_pods.returncode == 0 and len(pods) == 2
    # A dry run: it takes nothing from the APIServices the session's services registered before (when an
    # earlier test module started them), hence --force-conflicts.
    dry = kubectl(control_plane, "apply", "--server-side", "--dry-run=server", "--force-conflicts", "--validate=strict",
                  f"--field-manager={FIELD_MANAGER}", "-o", "json", "-f", "-", input=manifest(apiservices))
    answered = json.loads(dry.stdout)
    answered = answered.get("items", [answered]) if answered.get("kind") == "List" else [answered]
    assert {a["metadata"]["name"] for a in answered} == {a["metadata"]["name"] for a in apiservices}
    yield docs
    # The CRDs stay: the services under test in this session use them.
    leftovers = [doc for doc in rest if doc["kind"] != "CustomResourceDefinition"]
    kubectl(control_plane, "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=manifest(leftovers),
            check=False)


def test_rendered_objects_accepted_by_kube_apiserver(control_plane: Cluster, applied: list[Doc]) -> None:
    for doc in applied:
        if doc["kind"] == "Pod":
            assert not kubectl(control_plane, "get", "pod", doc["metadata"]["name"], "-n", NS, "--ignore-not-found",
                               "-o", "name").stdout.strip(), "the helm test Pod is only dry-run"
            continue
        if doc["kind"] == "APIService":
            # Validated by the dry run only: it must not exist, or (registered by a service an earlier test
            # module started) must not have been touched by the chart's field manager.
            result = kubectl(control_plane, "get", "apiservice", doc["metadata"]["name"], "-o", "json", check=False)
            if result.returncode == 0:
                fields = json.loads(result.stdout)["metadata"].get("managedFields") or []
                assert FIELD_MANAGER not in {entry.get("manager") for entry in fields}
            continue
        ns = doc["metadata"].get("namespace")
        args = ["get", f"{doc['kind'].lower()}.{doc['apiVersion'].split('/')[0]}"
                if "/" in doc["apiVersion"] else doc["kind"].lower(), doc["metadata"]["name"], "-o", "json"]
        live = json.loads(kubectl(control_plane, *args, *(["-n", ns] if ns else [])).stdout)
        assert live["metadata"]["labels"]["app.kubernetes.io/part-of"] == "cozystack-agl"
    kinds = {doc["kind"] for doc in applied}
    assert kinds >= {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "RoleBinding",
                     "ServiceAccount", "Secret", "Service", "Deployment", "APIService", "PodDisruptionBudget",
                     "NetworkPolicy", "ServiceMonitor", "Pod"}
    # Server defaulting kept the hardening as rendered.
    live = json.loads(kubectl(control_plane, "get", "deployment", HELM_SVC, "-n", NS, "-o", "json").stdout)
    sc = live["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]


def test_apiservice_dry_run_rejects_what_is_invalid(control_plane: Cluster, applied: list[Doc]) -> None:
    """The dry run is a real check: the same APIService with an unknown field is refused."""
    bad = json.loads(json.dumps(next(doc for doc in applied if doc["kind"] == "APIService")))
    bad["spec"]["bogusField"] = True
    result = kubectl(control_plane, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                     f"--field-manager={FIELD_MANAGER}", "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode != 0 and "bogusField" in result.stderr


def test_generated_certificate_survives_upgrade(control_plane: Cluster, helm: Helm, applied: list[Doc]) -> None:
    """With the Secret in the cluster, rendering again (as helm upgrade does) reuses it via lookup."""
    docs = helm.template(f"tofuAgl.group={TOFU_GROUP}", "tls.mode=generate",
                         extra=("--dry-run=server", "--kubeconfig", str(control_plane.kubeconfig)))
    before, after = index(applied), index(docs)
    for svc, group in ((HELM_SVC, HELM_GROUP), (TOFU_SVC, TOFU_GROUP)):
        assert after[("Secret", f"{svc}-tls")]["data"] == before[("Secret", f"{svc}-tls")]["data"]
        assert after[("APIService", f"v1alpha1.{group}")]["spec"]["caBundle"] == \
            before[("Secret", f"{svc}-tls")]["data"]["ca.crt"]


def sa(name: str) -> tuple[str, list[str]]:
    return f"system:serviceaccount:{NS}:{name}", ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                                                   "system:authenticated"]


@pytest.mark.parametrize(("svc", "backing_group", "backing", "definitions", "other_backing", "group"), [
    (HELM_SVC, "helm.toolkit.fluxcd.io", "helmreleases", "applicationdefinitions", "terraforms", HELM_GROUP),
    (TOFU_SVC, "infra.contrib.fluxcd.io", "terraforms", "tofuapplicationdefinitions", "helmreleases", TOFU_GROUP),
])
def test_service_account_least_privilege(control_plane: Cluster, applied: list[Doc], svc: str, backing_group: str,
                                         backing: str, definitions: str, other_backing: str, group: str) -> None:
    user, groups = sa(svc)

    def can(verb: str, api_group: str, resource: str, **kw: Any) -> bool:
        return allowed(control_plane, user, groups, verb, api_group, resource, **kw)

    wait_for(lambda: can("get", backing_group, backing, namespace="tenant-x"), f"{svc}'s RBAC to take effect")
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        assert can(verb, backing_group, backing, namespace="tenant-x"), verb
    assert not can("deletecollection", backing_group, backing, namespace="tenant-x")
    assert not can("update", backing_group, backing, namespace="tenant-x", subresource="status")
    other_group = "infra.contrib.fluxcd.io" if other_backing == "terraforms" else "helm.toolkit.fluxcd.io"
    assert not can("get", other_group, other_backing, namespace="tenant-x")
    assert can("watch", "cozystack.io", definitions)
    assert can("patch", "cozystack.io", definitions, name="x", subresource="status")
    assert not can("update", "cozystack.io", definitions, name="x")
    assert not can("patch", "cozystack.io", definitions, name="x")
    assert can("create", "", "events", namespace="tenant-x") and can("patch", "", "events", namespace="tenant-x")
    # The Event relay: the backend controller's Events about backing objects, in every namespace; never deleted.
    assert can("list", "", "events") and can("watch", "", "events")
    assert not can("delete", "", "events", namespace="tenant-x")
    assert can("patch", "apiregistration.k8s.io", "apiservices", name=f"v1alpha1.{group}")
    assert not can("patch", "apiregistration.k8s.io", "apiservices", name="v1.apps")
    assert not can("delete", "apiregistration.k8s.io", "apiservices", name=f"v1alpha1.{group}")
    # Delegated authentication/authorization, and the front-proxy settings in kube-system.
    assert can("create", "authorization.k8s.io", "subjectaccessreviews")
    assert can("create", "authentication.k8s.io", "tokenreviews")
    assert can("get", "", "configmaps", namespace="kube-system", name="extension-apiserver-authentication")
    # Only tofu_agl reads ConfigMaps and Secrets (the readable plans tofu-controller keeps), by exact name:
    # nobody lists, watches or writes them.
    # Which names is not known in advance, so get holds in every namespace (docs/operating.md says so).
    reads_plans = svc == TOFU_SVC
    for resource in ("configmaps", "secrets"):
        assert can("get", "", resource, namespace="tenant-x", name="tfplan-default-x.json") == reads_plans, resource
        assert can("get", "", resource, namespace="kube-system", name="x") == reads_plans, resource
        for verb in ("list", "watch", "create", "update", "delete"):
            assert not can(verb, "", resource, namespace="tenant-x"), (verb, resource)
            assert not can(verb, "", resource), (verb, resource)
    # Per-kind tenant roles: it writes ClusterRoles, holding what they grant on its own group (so no escalate),
    # and nothing else in RBAC.
    for verb in ("list", "create", "patch", "delete"):
        assert can(verb, "rbac.authorization.k8s.io", "clusterroles", name="x"), verb
    for verb in ("escalate", "bind"):
        assert not can(verb, "rbac.authorization.k8s.io", "clusterroles", name="x"), verb
    for resource in ("clusterrolebindings", "rolebindings", "roles"):
        assert not can("create", "rbac.authorization.k8s.io", resource, namespace="tenant-x"), resource
    assert can("approve", group, "chartprobes", namespace="tenant-x") == reads_plans
    assert can("deletecollection", group, "chartprobes", namespace="tenant-x")
    assert not can("get", "apps.cozystack.io" if group != HELM_GROUP else TOFU_GROUP, "chartprobes",
                   namespace="tenant-x")
    assert can("watch", "apiextensions.k8s.io", "customresourcedefinitions")
    # Admission: the policies, bindings and webhook configurations read, never written; namespaces and the
    # Services of webhooks read one at a time.
    for resource in ("validatingadmissionpolicies", "validatingadmissionpolicybindings",
                     "mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert can("list", "admissionregistration.k8s.io", resource) and can("watch", "admissionregistration.k8s.io",
                                                                             resource)
        assert not can("create", "admissionregistration.k8s.io", resource)
    assert can("get", "", "namespaces", name="tenant-x") and not can("list", "", "namespaces")
    assert not can("delete", "", "namespaces", name="tenant-x")
    assert can("get", "", "services", namespace="tenant-x", name="hooks") and not can("list", "", "services")
    assert not can("update", "", "services", namespace="tenant-x", name="hooks")
    # Leader election: its own Lease in the release namespace, nothing else.
    assert can("create", "coordination.k8s.io", "leases", namespace=NS)
    for verb in ("get", "update"):
        assert can(verb, "coordination.k8s.io", "leases", namespace=NS, name=f"{svc}-reconciler"), verb
    assert not can("update", "coordination.k8s.io", "leases", namespace=NS, name="kube-controller-manager")
    assert not can("get", "coordination.k8s.io", "leases", namespace="kube-system", name=f"{svc}-reconciler")
    assert not can("delete", "coordination.k8s.io", "leases", namespace=NS, name=f"{svc}-reconciler")
    assert not can("update", "apiextensions.k8s.io", "customresourcedefinitions", name=f"{definitions}.cozystack.io")


def test_non_resource_urls_granted_as_rendered(control_plane: Cluster, applied: list[Doc]) -> None:
    """The bound Prometheus reads /metrics and nothing else new; the services' own accounts do not."""
    prometheus = sa(PROMETHEUS["name"])
    wait_for(lambda: allowed_path(control_plane, *prometheus, "/metrics"), "the metrics-reader binding to take effect")
    assert not allowed_path(control_plane, prometheus[0], [], "/openapi/v2")
    for svc in (HELM_SVC, TOFU_SVC):
        assert not allowed_path(control_plane, *sa(svc), "/metrics")
    assert allowed_path(control_plane, "system:aggregator", [], "/openapi/v3/apis/apps.cozystack.io/v1alpha1")
    assert not allowed_path(control_plane, "system:aggregator", [], "/metrics")


def test_helm_test_account_may_read_exactly_its_discovery(control_plane: Cluster, applied: list[Doc]) -> None:
    """The helm test Pod's ServiceAccount, asked without its groups (so the built-in system:discovery binding to
    system:authenticated does not count), may get its service's discovery path and nothing else."""
    for svc, group, other in ((HELM_SVC, HELM_GROUP, TOFU_GROUP), (TOFU_SVC, TOFU_GROUP, HELM_GROUP)):
        user, path = sa(f"{svc}-test")[0], f"/apis/{group}/v1alpha1"
        wait_for(lambda user=user, path=path: allowed_path(control_plane, user, [], path),
                 f"{svc}-test's binding to take effect")
        for path in (f"/apis/{other}/v1alpha1", f"/apis/{group}", "/metrics", "/openapi/v2"):
            assert not allowed_path(control_plane, user, [], path), path
        groups = sa(f"{svc}-test")[1]
        assert not allowed(control_plane, user, groups, "list", group, "chartprobes", namespace="tenant-x")
        assert not allowed(control_plane, user, groups, "get", "", "secrets", namespace=NS)
        assert not allowed(control_plane, user, groups, "list", "", "pods", namespace=NS)


def test_service_monitor_schema_checks(control_plane: Cluster, applied: list[Doc], helm: Helm) -> None:
    """The token-Secret variant is valid too, and the CRD's schema really checks: a wrong field is refused."""
    monitor = index(helm.template("serviceMonitor.enabled=true", "serviceMonitor.bearerTokenSecret.name=scrape",
                                  "serviceMonitor.bearerTokenSecret.key=token"))[("ServiceMonitor", HELM_SVC)]

    def dry_run(doc: Doc) -> subprocess.CompletedProcess[str]:
        return kubectl(control_plane, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                       f"--field-manager={FIELD_MANAGER}", "-f", "-", input=json.dumps(doc), check=False)

    assert dry_run(monitor).returncode == 0
    bad = json.loads(json.dumps(monitor))
    bad["spec"]["endpoints"][0]["scheme"] = "gopher"
    refused = dry_run(bad)
    assert refused.returncode != 0 and "scheme" in refused.stderr, refused.stderr


# ------------------------------------------------- the service itself, under the chart's RBAC


ADMIN = ("admin", "system:masters")


def _direct(port: int, method: str, path: str, body: Doc | None, cluster: Cluster, user: tuple[str, str] = ADMIN,
            content_type: str = "application/json") -> tuple[int, Any]:
    """HTTPS straight to the service as kube-apiserver's front proxy would call it, for ``user`` (name, group)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    proxy = cluster.pki_dir / "front-proxy-client"
    ctx.load_cert_chain(str(proxy.with_suffix(".crt")), str(proxy.with_suffix(".key")))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": content_type, "Accept": "application/json",
                                          "X-Remote-User": user[0], "X-Remote-Group": user[1]})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            raw = resp.read()
            text = raw.decode(errors="replace")
            try:
                return resp.status, json.loads(raw) if resp.headers.get_content_type() == "application/json" else text
            except ValueError:
                return resp.status, text  # a watch: one JSON event per line
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


@dataclass(frozen=True)
class Probe:
    """One service run under its chart identity, and what it is asked to do."""

    svc: str
    module: str
    group: str
    definition_kind: str
    definitions: str
    backing: str
    definition_spec: Doc


_PROBE_SCHEMA = json.dumps({"type": "object", "properties": {"size": {"type": "integer", "default": 1}}})
_PROBE_APP = {"kind": "ChartProbe", "singular": "chartprobe", "plural": "chartprobes", "openAPISchema": _PROBE_SCHEMA}
PROBES = [
    Probe(HELM_SVC, "helm_agl", HELM_GROUP, "ApplicationDefinition", "applicationdefinitions",
          "helmreleases.helm.toolkit.fluxcd.io",
          {"application": _PROBE_APP,
           "release": {"prefix": "chartprobe-", "chartRef": {"kind": "OCIRepository", "name": "probe"}}}),
    Probe(TOFU_SVC, "tofu_agl", TOFU_GROUP, "TofuApplicationDefinition",
          "tofuapplicationdefinitions",
          "terraforms.infra.contrib.fluxcd.io",
          {"application": _PROBE_APP, "release": {"prefix": "chartprobe-"},
           "terraform": {"sourceRef": {"kind": "GitRepository", "name": "probe"}, "path": "./",
                         "approvePlan": "manual"}}),
]


def kind_roles(cluster: Cluster, group: str) -> set[str]:
    """The per-kind ClusterRoles the service of ``group`` keeps (shared/service/kindroles.py)."""
    out = kubectl(cluster, "get", "clusterroles", "-l", f"cozystack.io/kind-role-of={group}", "-o", "json").stdout
    return {item["metadata"]["name"] for item in json.loads(out)["items"]}


def deployment_of(applied: list[Doc], probe: Probe) -> Doc:
    return index(applied)[("Deployment", probe.svc)]


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.module)
def test_service_works_with_only_the_chart_rbac(control_plane: Cluster, applied: list[Doc], probe: Probe) -> None:
    """The service running as the chart's ServiceAccount (a client certificate with its user name and groups), with
    the rendered Deployment's command, args and env, does every normal operation and never meets a 403: it accepts a
    definition, keeps the kind's ClusterRoles (and removes them with the definition), serves create, get, list,
    update, patch, watch and delete, rolls a definition change out, writes Events, and (Tofu) lets an approver
    approve a plan while an editor gets 403. Requests go straight to its port as the front proxy would send them
    (no APIService is registered). What the chart does not grant stays refused to the service's identity."""
    ns, name = f"chart-rbac-{probe.module.replace('_', '-')}", f"chart-probe-{probe.module.replace('_', '-')}"
    definition = {"apiVersion": "cozystack.io/v1alpha1", "kind": probe.definition_kind, "metadata": {"name": name},
                  "spec": probe.definition_spec}
    roles = {f"cozystack:chartprobes.{probe.group}:{r}" for r in ("view", "edit", "admin")}
    if probe.module == "tofu_agl":
        roles.add(f"cozystack:chartprobes.{probe.group}:approver")
    # Any other service of the same definitions would write their status and roll them out as well (helm_agl's in
    # this very group), and what is read back below would not be this identity's work (conftest.FIRST_MODULES).
    others = [s.name for s in services.ALL if services.running(control_plane, s) is not None]
    assert not others, f"{others} running: this test must run before the session's services start"
    kubectl(control_plane, "create", "namespace", ns, check=False)
    with service_as_chart_identity(control_plane, probe, deployment_of(applied, probe)) as port, \
            contextlib.ExitStack() as cleanup:
        cleanup.callback(kubectl, control_plane, "delete", probe.definitions, name, "--ignore-not-found", check=False)
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition))
        base = f"/apis/{probe.group}/v1alpha1/namespaces/{ns}/chartprobes"
        wait_for(lambda: _direct(port, "GET", base, None, control_plane)[0] == 200, "ChartProbe served", 60)
        wait_for(lambda: kind_roles(control_plane, probe.group) >= roles, "the kind's ClusterRoles", 30)
        app = {"apiVersion": f"{probe.group}/v1alpha1", "kind": "ChartProbe",
               "metadata": {"name": "one", "namespace": ns}, "spec": {}}
        code, body = _direct(port, "POST", base, app, control_plane)
        assert code == 201, body
        backing = json.loads(kubectl(control_plane, "get", probe.backing, "chartprobe-one", "-n", ns,
                                     "-o", "json").stdout)
        assert backing["metadata"]["name"] == "chartprobe-one"
        # A watch starts with the existing objects (503 while the watch cache first lists).
        code, events = wait_for(lambda: (r := _direct(port, "GET", f"{base}?watch=true&timeoutSeconds=2", None,
                                                      control_plane))[0] != 503 and r, "the watch cache", 30)
        text = events if isinstance(events, str) else json.dumps(events)  # one event parses as one JSON object
        assert code == 200 and '"ADDED"' in text and '"one"' in text, text
        code, body = _direct(port, "GET", f"{base}/one", None, control_plane)
        assert code == 200, body
        body["spec"] = {"size": 2}
        code, body = _direct(port, "PUT", f"{base}/one", body, control_plane)
        assert code == 200 and body["spec"]["size"] == 2, body
        code, body = _direct(port, "PATCH", f"{base}/one", {"metadata": {"labels": {"patched": "yes"}}},
                             control_plane, content_type="application/merge-patch+json")
        assert code == 200 and body["metadata"]["labels"]["patched"] == "yes", body
        # A definition change rolls out to the existing instance.
        changed = json.loads(json.dumps(definition))
        changed["spec"]["release"]["labels"] = {"rolled": "out"}
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(changed))
        generation = json.loads(kubectl(control_plane, "get", probe.definitions, name, "-o", "json").stdout)[
            "metadata"]["generation"]
        rollout = wait_for(lambda: (r := json.loads(kubectl(control_plane, "get", probe.definitions, name, "-o",
                                                            "json").stdout).get("status", {}).get("rollout", {}))
                           .get("observedGeneration") == generation and r.get("complete") and r, "rolled out", 60)
        assert rollout["rolledOut"] == 1, rollout
        labels = json.loads(kubectl(control_plane, "get", probe.backing, "chartprobe-one", "-n", ns, "-o",
                                    "json").stdout)["metadata"].get("labels") or {}
        assert labels.get("rolled") == "out", labels
        if probe.module == "tofu_agl":
            _approve_under_chart_rbac(control_plane, port, probe, ns, base)
        code, body = _direct(port, "DELETE", f"{base}/one", None, control_plane)
        assert code in (200, 202), body
        accepted = wait_for(lambda: next((c for c in json.loads(kubectl(
            control_plane, "get", probe.definitions, name, "-o", "json").stdout).get(
            "status", {}).get("conditions", []) if c["type"] == "Accepted"), None), "definition status written")
        assert accepted["status"] == "True", accepted
        wait_for(lambda: "chartprobe" in kubectl(control_plane, "get", "events", "-n", ns, "-o", "json").stdout.lower(),
                 "an Event about the ChartProbe")
        # The definition goes: so do its roles.
        kubectl(control_plane, "delete", probe.definitions, name)
        wait_for(lambda: not kind_roles(control_plane, probe.group) & roles, "the kind's ClusterRoles removed", 30)
    # Beyond the chart's RBAC: the service's own identity may not grant what it does not hold, nor list Secrets.
    user, groups = sa(probe.svc)
    own = control_plane.user_kubeconfig(user, tuple(groups[:2]))
    escalating = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": {"name": f"{probe.svc}-escalation"},
                  "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}
    refused = kubectl(control_plane, "create", "-f", "-", input=json.dumps(escalating), kubeconfig=own, check=False)
    assert refused.returncode != 0 and "escalat" in refused.stderr, refused.stderr
    for args in (("get", "secrets", "-A"), ("get", "configmaps", "-n", ns)):
        refused = kubectl(control_plane, *args, kubeconfig=own, check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (args, refused.stderr)


def _approve_under_chart_rbac(cluster: Cluster, port: int, probe: Probe, ns: str, base: str) -> None:
    """A pending plan (tofu-controller's recorded status) approved by a user holding edit + approver; an editor's
    attempt is refused by the service's SubjectAccessReview, made with the chart's auth-delegator binding."""
    status = load_recorded("terraform-pending")["status"]
    plan_id = status["plan"]["pending"]
    kubectl(cluster, "patch", probe.backing, "chartprobe-one", "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))
    role = f"cozystack:chartprobes.{probe.group}"
    bindings = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": f"{who}-{suffix}", "namespace": ns},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": f"{role}:{suffix}"},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": who}]}
                for who, suffix in (("chart-editor", "edit"), ("chart-approver", "edit"),
                                    ("chart-approver", "approver"))]
    kubectl(cluster, "apply", "-f", "-", input=manifest(bindings))
    approve = {"metadata": {"annotations": {"tofu.apps.cozystack.io/approve-plan": plan_id}}}
    merge = "application/merge-patch+json"
    label = {"metadata": {"labels": {"edited": "yes"}}}
    editor = ("chart-editor", "tenants")
    wait_for(lambda: _direct(port, "PATCH", f"{base}/one", label, cluster, editor, merge)[0] == 200,
             "the editor's binding to take effect")
    code, body = _direct(port, "PATCH", f"{base}/one", approve, cluster, editor, merge)
    assert code == 403 and 'cannot approve resource "chartprobes"' in json.loads(body)["message"], (code, body)
    code, body = wait_for(lambda: (r := _direct(port, "PATCH", f"{base}/one", approve, cluster,
                                                ("chart-approver", "tenants"), merge))[0] == 200 and r,
                          "the approver's bindings to take effect")
    spec = json.loads(kubectl(cluster, "get", probe.backing, "chartprobe-one", "-n", ns, "-o", "json").stdout)["spec"]
    assert spec["approvePlan"] == plan_id, spec


@contextlib.contextmanager
def service_as_chart_identity(cluster: Cluster, probe: Probe, deployment: Doc,
                              served_as: tuple[str, str] = ("", NS)) -> Iterator[int]:
    """The service running as the chart's ServiceAccount (a client certificate with its user name and groups) on
    127.0.0.1, started with the rendered ``deployment``'s own command, args and env; yields its port once ready.

    What a pod would have that a local process cannot is stood in for: the interpreter running this test for
    ``python``, a free port for ``--secure-port``, the serving certificate's local files for the mounted ``/tls``
    ones, ``--kubeconfig`` (the ServiceAccount's identity) with ``--bind-address=127.0.0.1`` for the in-cluster
    configuration, and a pod's name and namespace for the env the Downward API fills in. Its serving certificate
    names the Service ``served_as`` (name, namespace; by default the chart's), as kube-apiserver checks when it
    proxies to it. Afterwards its log must show no 403: the chart's RBAC sufficed."""
    if importlib.util.find_spec(f"{probe.module}.__main__") is None:
        pytest.skip(f"{probe.module} has no entry point yet")
    user, groups = sa(probe.svc)
    kubeconfig = cluster.user_kubeconfig(user, tuple(groups[:2]))
    _, serving = aggregation.serving_cert(cluster, served_as[0] or probe.svc, served_as[1])
    port = free_port()
    log_file = cluster.logs_dir / f"chart-rbac-{probe.svc}.log"
    start = log_file.stat().st_size if log_file.exists() else 0
    spec = container(deployment)
    assert spec["command"][0] == "python", spec["command"]
    local = {"--secure-port": str(port), "--tls-cert-file": str(serving.cert),
             "--tls-private-key-file": str(serving.key)}
    args = [f"{flag}={local[flag]}" if flag in local else arg
            for arg in spec["args"] for flag in [arg.split("=", 1)[0]]]
    assert [a for a in args if a.split("=", 1)[0] in local] == [f"{k}={v}" for k, v in local.items()], args
    # The Downward API's fields, as the kubelet would fill them in for a pod of this Deployment.
    downward = {"metadata.name": f"{probe.svc}-chart-rbac", "metadata.namespace": deployment["metadata"]["namespace"]}
    env = dict(os.environ, **{e["name"]: e["value"] if "value" in e
                              else downward[e["valueFrom"]["fieldRef"]["fieldPath"]] for e in spec.get("env") or []})
    with log_file.open("ab") as out:
        proc = subprocess.Popen([sys.executable, *spec["command"][1:], *args, "--kubeconfig", str(kubeconfig),
                                 "--bind-address=127.0.0.1"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: _direct(port, "GET", "/readyz", None, cluster)[0] == 200, "service ready", 60)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    log = log_file.read_text(errors="replace")
    assert "forbidden" not in log[start:].lower(), log[-3000:]
