"""A node that crashed: everything killed at once and its state file lost. The next start clears what was left, and
``down`` then leaves the machine as it was: no process in the namespace, no mount under the node's directories or
kubelet's, no ``kubepods`` cgroup, no namespace.

CI runs on the same machine right after a stop, so this is what stands between a crashed run and the next one.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from localcluster import chartinstall, netns, nodehost

from tests.kube import kubectl, wait_for
from tests.node.conftest import Node
from tests.node.test_install import assert_serving


def leftovers(base: Path) -> dict[str, object]:
    """What a node can leave on the machine, as the machine itself shows it."""
    return {
        "netns": netns.exists(),
        "processes": nodehost.processes_in_netns(),
        "mounts": nodehost.mounts_under([base, *nodehost.HOST_DIRS]),
        "cgroups": [p for p in (nodehost.CGROUP_ROOT / "memory").glob("kubepods*")],
        "host dirs": [d for d in nodehost.HOST_DIRS if d.exists()],
    }


def test_a_start_after_a_crash_clears_first(node_cluster: Node) -> None:
    cluster = node_cluster.cluster
    chartinstall.install(cluster, node_cluster.image, wait="120s")
    base = cluster.node_layout.base
    assert leftovers(base)["mounts"], "a running node has mounts (the pods' volumes and root file systems)"
    # The crash: every process of the node and of its pods killed at once, and the state file gone with them.
    victims = [*nodehost.processes_in_netns(), *nodehost.processes_in_cgroups(nodehost.cgroup_dirs())]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):  # a process that ended on its own meanwhile
            os.kill(pid, signal.SIGKILL)
    cluster.state_file.unlink()
    assert not cluster.is_running()
    assert leftovers(base)["netns"] and leftovers(base)["mounts"]

    cluster.up(node=True)
    node_cluster.start()
    # The chart's objects are still in etcd: the new kubelet runs their pods again.
    wait_for(lambda: kubectl(cluster, "rollout", "status", "deploy/agl-helm-agl", "-n", chartinstall.NAMESPACE,
                             "--timeout=5s", check=False).returncode == 0, "helm_agl's pods again", timeout=180)
    kubectl(cluster, "rollout", "status", "deploy/agl-tofu-agl", "-n", chartinstall.NAMESPACE, "--timeout=120s")
    wait_for(lambda: _available(node_cluster), "both APIServices Available again", timeout=120)
    assert_serving(node_cluster, "helm-agl", restarts_allowed=True)

    cluster.down()
    assert leftovers(base) == {"netns": False, "processes": [], "mounts": [], "cgroups": [], "host dirs": []}
    # The fixture's node for the modules after this one.
    cluster.up(node=True)
    node_cluster.start()
    chartinstall.install(cluster, node_cluster.image, wait="180s")


def _available(node_cluster: Node) -> bool:
    out = kubectl(node_cluster.cluster, "get", "apiservices", "v1alpha1.apps.cozystack.io",
                  "v1alpha1.tofu.apps.cozystack.io", "-o", "jsonpath={.items[*].status.conditions[0].status}").stdout
    return out.split() == ["True", "True"]
