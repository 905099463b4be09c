"""Pinned versions of everything the local control plane is built from.

Bumping Kubernetes means changing ``KUBERNETES``: the staging-module ``replace`` block is
derived from the go.mod that the module proxy serves for that release, never kept by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

KUBERNETES = "v1.35.4"
ETCD = "v3.6.5"
#: Newest helm v3 on the module proxy that builds with the Go toolchain here (v3.22 needs Go >= 1.26);
#: used by the chart checks of the integration tier (``helm template``) and put on PATH by ``up``.
HELM = "v3.22.0"

#: Flux's controllers, run as local processes by ``up`` and the flux test tier. helm-controller
#: v1.6.3 does not build from the module proxy (its helm fork ``github.com/fluxcd/helm/v4
#: v4.2.4-flux.1`` is not served), so v1.6.2 is the newest that does; source-controller v1.10.x
#: needs a newer Go than the one here, v1.9.6 is the newest v1.9.
HELM_CONTROLLER = "v1.6.2"
SOURCE_CONTROLLER = "v1.9.6"
#: kustomize-controller, the GitOps client that applies Applications from git (``up`` and the flux
#: tier's ``test_gitops``). The v1.9.x line is the one released with source-controller v1.9.x and
#: helm-controller v1.6.x (same ``fluxcd/pkg`` and source API); v1.9.3 is the newest the module
#: proxy serves (v1.9.0 to v1.9.3). Its go.mod's replaces are carried over, notably
#: ``github.com/opencontainers/go-digest`` (without it blake3 does not compile).
KUSTOMIZE_CONTROLLER = "v1.9.3"
#: Modules raised above source-controller v1.9.6's go.mod: ``github.com/fluxcd/pkg/artifact
#: v0.18.3`` is not served by the module proxy (403 "not available"); v0.20.0 is the nearest that is
#: and that source-controller compiles against.
SOURCE_CONTROLLER_RAISES = {"github.com/fluxcd/pkg/artifact": "v0.20.0"}
#: OpenTofu, the oracle of the Tofu stack's variables (``tofu plan``/``apply`` on the sample modules);
#: the newest 1.10.x release the module proxy serves.
OPENTOFU = "v1.10.10"
#: tofu-controller, run as a local process by ``up`` and the flux tier. Its main module is served by
#: the module proxy; its nested modules ``/api`` and ``/tfctl`` are not (at any version), so they come
#: from a directory (see :func:`build.tofu_controller_modules`). v0.16.5 is the release whose
#: Terraform CRD the stack emits against (``TERRAFORM_CRD``).
TOFU_CONTROLLER = "v0.16.5"


@dataclass(frozen=True)
class UpstreamCRD:
    """A CRD file taken from a Go module of the upstream controller, checked by digest."""

    module: str
    version: str
    path: str
    sha256: str


HELMRELEASE_CRD = UpstreamCRD(
    module="github.com/fluxcd/helm-controller",
    version=HELM_CONTROLLER,
    path="config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml",
    sha256="aa8638ac68465ceac1f93a617baf5be833c589c51fd78a7384a4a274c252becc",
)
TERRAFORM_CRD = UpstreamCRD(
    module="github.com/flux-iac/tofu-controller",
    version=TOFU_CONTROLLER,
    path="config/crd/bases/infra.contrib.fluxcd.io_terraforms.yaml",
    sha256="8562f1a62ab932dd34e84baa0a5163da92751cf9fabaf25d60308df500d97fe4",
)
#: source-controller's CRDs: it watches every one of its kinds at start, so all are installed; the
#: sample Helm definitions reach their charts through HelmRepository + HelmChart.
SOURCE_CRDS = tuple(
    UpstreamCRD(module="github.com/fluxcd/source-controller", version=SOURCE_CONTROLLER,
                path=f"config/crd/bases/source.toolkit.fluxcd.io_{plural}.yaml", sha256=digest)
    for plural, digest in (
        ("buckets", "7be598fad94f7b81d99c196a649f55c70edf5b4ab9de32c13e8eda31c14f46ef"),
        ("externalartifacts", "f4939240c967e4da1208c7203cd8edd0cd1ff62cabc9a767e7293dedd2f50b91"),
        ("gitrepositories", "bd0c08183287b2eea0d885751fc686bc4b2b583e919de6bd57859170b8d1727f"),
        ("helmcharts", "413fe7367bdb81324b978091abc9081fe2241bb49e3aabf06aff83c86c95a4e3"),
        ("helmrepositories", "0f3c34df4a25c88c7ad7825ada26d696aa53d92ec2c0ca540e1f9a05db247fa9"),
        ("ocirepositories", "80c7c6e5c8de0764cc83acd4de5c74bea8e51186085304d22cecc5f2eb35500e"),
    )
)
#: The Kustomization kind that kustomize-controller reconciles (``KUSTOMIZE_CONTROLLER``).
KUSTOMIZATION_CRD = UpstreamCRD(
    module="github.com/fluxcd/kustomize-controller",
    version=KUSTOMIZE_CONTROLLER,
    path="config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml",
    sha256="da23ca0e6b4c80d3d26a91583137491e147ef4ef1e2208aece0d0af4ef851974",
)
UPSTREAM_CRDS = (HELMRELEASE_CRD, TERRAFORM_CRD, *SOURCE_CRDS, KUSTOMIZATION_CRD)
#: prometheus-operator's ServiceMonitor CRD (monitoring.coreos.com/v1), the schema the chart's optional
#: ServiceMonitor is checked against by the integration tier; not installed by default.
SERVICEMONITOR_CRD = UpstreamCRD(
    module="github.com/prometheus-operator/prometheus-operator",
    version="v0.85.0",
    path="example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
    sha256="1dae27b7189b5ce7b9ab764656c18b4c75a45cde1e6f3af6a5e84c4317628919",
)

#: CoreDNS, the node's cluster DNS (``up --node``): v1.15.0 is the newest release the module proxy serves; its go.mod
#: asks for Go 1.26.0 and has no ``replace`` directives, so its main package (the module root) builds as it is.
COREDNS = "v1.15.0"

#: The OCI registry (CNCF distribution) that serves OCIRepository sources locally (:mod:`ociregistry`).
#: The module proxy serves v3.0.0, v3.1.1 and v3.1.2 of ``github.com/distribution/distribution/v3``;
#: v3.1.2 is the newest, its go.mod asks for Go 1.26.0 (which is installed) and has no ``replace``
#: directives, so ``cmd/registry`` builds from the proxy as it is.
DISTRIBUTION = "v3.1.2"

#: The S3-compatible server behind the local ``Bucket`` source (:mod:`bucketserver`): gofakes3's
#: ``cmd/gofakes3``, v1.2.0 being the newest tag the module proxy serves (v1.0.0, v1.1.0, v1.2.0).
#: Chosen over moto's server because moto needs botocore, which pins python-dateutil<3 while the
#: ``kubernetes`` client of the test extra needs >=3: both cannot be in one environment.
GOFAKES3 = "v1.2.0"

#: kstatus, the library that decides whether an object is healthy for Flux's kustomize-controller (``wait:
#: true``, health checks) and for cli-utils' appliers. kustomize-controller v1.9.3's go.mod requires Flux's
#: fork of ``sigs.k8s.io/cli-utils`` at this version, so the verdict tool (``kstatus.kstatus_target``) is
#: compiled against exactly the rules that controller applies to Applications and definitions.
KSTATUS_MODULE = "github.com/fluxcd/cli-utils"
KSTATUS = "v1.2.2"
