"""The node tier: the chart installed with the real helm on a real node (kubelet, containerd, kube-proxy,
kube-controller-manager, kube-scheduler in a network namespace of the project's), the services running as pods
from the image built from the repository's Dockerfile.

Nothing here is skipped: where the node cannot start (a package or binary missing, the namespace taken), the
fixture's error fails every test of the tier with its reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from localcluster import chartinstall, crds, images, node, pauseimage
from localcluster.cluster import Cluster


@dataclass(frozen=True)
class Node:
    cluster: Cluster
    #: The project's image as the node's containerd knows it (``localhost/agl-parallel:<tag>``).
    image: str


@pytest.fixture(scope="package")
def node_cluster() -> Iterator[Node]:
    """A fresh node cluster (``AGL_NODE_CLUSTER``, default ``node-tier``) for this tier only, stopped after it, so
    that the machine's one node namespace is free again for whatever runs next."""
    cluster = Cluster(os.environ.get("AGL_NODE_CLUSTER", "node-tier"))
    cluster.destroy()
    cluster = Cluster(cluster.name)
    try:
        cluster.up(fresh=True, node=True)
        crds.install(cluster, ours=False)
        sandbox = pauseimage.ensure_pause_image()
        project = images.ensure_project_image(chartinstall.REPO_ROOT)
        node.start(cluster, [project], sandbox)
        yield Node(cluster, project.ref)
    finally:
        cluster.destroy()
