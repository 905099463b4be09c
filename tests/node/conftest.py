"""The node tier: the chart installed with the real helm on a real node (kubelet, containerd, kube-proxy,
kube-controller-manager, kube-scheduler in a network namespace of the project's), the services running as pods
from the image built from the repository's Dockerfile.

Nothing here is skipped: where the node cannot start (a package or binary missing, the namespace taken), the
fixture's error fails every test of the tier with its reason.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from localcluster import chartinstall, crds, images, node, pauseimage
from localcluster.cluster import Cluster

#: Where the tier leaves the node's logs.
LOGS = Path(tempfile.gettempdir()) / "agl-node-tier-logs"


@dataclass(frozen=True)
class Node:
    cluster: Cluster
    #: The project's image built from the Dockerfile, and the pods' sandbox image.
    project: images.ImageArchive
    sandbox: images.ImageArchive

    @property
    def image(self) -> str:
        """The project's image as the node's containerd knows it (``localhost/agl-parallel:<tag>``)."""
        return self.project.ref

    def start(self) -> None:
        """(Re)start the node's components against the running control plane."""
        node.start(self.cluster, [self.project], self.sandbox)


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
        found = Node(cluster, project, sandbox)
        found.start()
        yield found
    finally:
        # The node's logs (kubelet, containerd, kube-apiserver, ...) outlive the cluster, for whoever reads a failure.
        shutil.copytree(cluster.logs_dir, LOGS, dirs_exist_ok=True)
        cluster.destroy()
