"""The rights of the local stack's kustomize-controller, asked of kube-apiserver's own authorizer.

kustomize-controller applies whatever git holds, so its own identity may apply nothing: it impersonates the
service account ``gitops-applier``, which may manage Applications and nothing else (``localcluster.flux``).
Each question is a SubjectAccessReview answered by kube-apiserver's RBAC authorizer (not ``kubectl auth can-i``,
which cannot name the group of a kind discovery does not list yet); no controller needs to run, so this lives
in the integration tier.
"""

from __future__ import annotations

import json

import pytest
from localcluster import flux
from localcluster.cluster import Cluster

from tests.kube import kubectl

CONTROLLER = "agl:kustomize-controller"
APPLIER = f"system:serviceaccount:{flux.SOURCES_NAMESPACE}:{flux.GITOPS_APPLIER}"
APPLICATIONS = ("redises.apps.cozystack.io", "vpcs.tofu.apps.cozystack.io")


@pytest.fixture(scope="module")
def rights(control_plane: Cluster) -> Cluster:
    kubectl(control_plane, "create", "namespace", flux.SOURCES_NAMESPACE, check=False)
    flux.identity(control_plane, "kustomize-controller")
    flux.gitops_applier(control_plane, flux.SOURCES_NAMESPACE)
    return control_plane


def can(cluster: Cluster, user: str, verb: str, resource: str, namespace: str = "tenant-any", name: str = "") -> bool:
    """``resource`` is ``plural[.group][/subresource]``; a service account's username brings its groups."""
    plural_group, _, subresource = resource.partition("/")
    plural, _, group = plural_group.partition(".")
    groups = ["system:authenticated"]
    if user.startswith("system:serviceaccount:"):
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"]
    attributes = {"group": group, "resource": plural, "verb": verb, "namespace": namespace}
    if subresource:
        attributes["subresource"] = subresource
    if name:
        attributes["name"] = name
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
    answer = json.loads(kubectl(cluster, "create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout)
    return bool(answer["status"].get("allowed"))


@pytest.mark.parametrize("resource", APPLICATIONS)
def test_the_controller_itself_applies_no_application(rights: Cluster, resource: str) -> None:
    for verb in ("create", "patch", "delete", "get"):
        assert not can(rights, CONTROLLER, verb, resource), f"{CONTROLLER} may {verb} {resource}"


@pytest.mark.parametrize("resource", APPLICATIONS)
def test_the_applier_account_manages_applications_in_any_namespace(rights: Cluster, resource: str) -> None:
    for verb in ("create", "patch", "delete", "get", "list", "watch"):
        assert can(rights, APPLIER, verb, resource), f"{APPLIER} may not {verb} {resource}"


def test_the_applier_account_manages_nothing_else(rights: Cluster) -> None:
    for resource in ("secrets", "namespaces", "helmreleases.helm.toolkit.fluxcd.io",
                     "terraforms.infra.contrib.fluxcd.io", "clusterroles.rbac.authorization.k8s.io"):
        assert not can(rights, APPLIER, "create", resource), f"{APPLIER} may create {resource}"


def test_the_controller_impersonates_the_applier_and_reads_its_sources(rights: Cluster) -> None:
    assert can(rights, CONTROLLER, "impersonate", "serviceaccounts", flux.SOURCES_NAMESPACE, flux.GITOPS_APPLIER)
    assert can(rights, CONTROLLER, "get", "gitrepositories.source.toolkit.fluxcd.io", flux.SOURCES_NAMESPACE)
    assert can(rights, CONTROLLER, "patch", "kustomizations.kustomize.toolkit.fluxcd.io", flux.SOURCES_NAMESPACE)
    # Its watch of labelled ConfigMaps and Secrets is off, so it may not list them.
    assert not can(rights, CONTROLLER, "list", "secrets", flux.SOURCES_NAMESPACE)
