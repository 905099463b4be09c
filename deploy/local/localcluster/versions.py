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


@dataclass(frozen=True)
class UpstreamCRD:
    """A CRD file taken from a Go module of the upstream controller, checked by digest."""

    module: str
    version: str
    path: str
    sha256: str


HELMRELEASE_CRD = UpstreamCRD(
    module="github.com/fluxcd/helm-controller",
    version="v1.6.3",
    path="config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml",
    sha256="aa8638ac68465ceac1f93a617baf5be833c589c51fd78a7384a4a274c252becc",
)
TERRAFORM_CRD = UpstreamCRD(
    module="github.com/flux-iac/tofu-controller",
    version="v0.16.5",
    path="config/crd/bases/infra.contrib.fluxcd.io_terraforms.yaml",
    sha256="8562f1a62ab932dd34e84baa0a5163da92751cf9fabaf25d60308df500d97fe4",
)
UPSTREAM_CRDS = (HELMRELEASE_CRD, TERRAFORM_CRD)
