"""The configuration files of a local node: containerd, the CNI network, kubelet and kube-proxy.

Pure functions from a :class:`Layout` to file contents, so what the node runs with can be read (and tested) without
starting anything. What this machine needs and why each setting is there:

- containerd 1.6 (Debian's): ``restrict_oom_score_adj``, because root has no CAP_SYS_RESOURCE here and runc cannot
  lower a process's OOM score (every sandbox fails with ``can't get final child's PID from pipe: EOF``); the sandbox
  image is the project's own (nothing can be pulled); network namespaces of pods under containerd's state directory,
  so a crashed run's are found and removed with it.
- kubelet 1.35 on cgroup v1: ``failCgroupV1: false`` (it refuses v1 otherwise), ``cgroupDriver: cgroupfs`` (no
  systemd), ``failSwapOn: false``; image garbage collection off (an image removed could not be pulled back); eviction
  thresholds low, so the machine's own disk use does not evict the pods.
- kube-proxy in iptables mode with ``masqueradeAll``: a pod reaching a Service whose endpoint is a pod on the same
  bridge gets its answer back through the node instead of straight over the bridge, past conntrack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import netns

NODE_NAME = "agl-node"
CLUSTER_DOMAIN = "cluster.local"
#: The cluster DNS Service's address (in ``cluster.SERVICE_CIDR``); kubelet writes it into pods' resolv.conf.
DNS_IP = "10.0.0.10"
CNI_BIN_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class Layout:
    """Where one node keeps its files: everything under ``base`` (the cluster's state directory)."""

    base: Path

    @property
    def containerd_dir(self) -> Path:
        return self.base / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.base / "cni" / "ipam"

    @property
    def kubelet_dir(self) -> Path:
        return self.base / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.base / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.base / "resolv.conf"


def containerd_config(layout: Layout, sandbox_image: str) -> str:
    """containerd's ``config.toml`` (format version 2, what 1.6 reads)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    d = layout.containerd_dir
    lines = [
        "version = 2",
        f'root = "{d / "root"}"',
        f'state = "{d / "state"}"',
        'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", '
        '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", '
        '"io.containerd.tracing.processor.v1.otlp"]',
        "",
        "[grpc]",
        f'  address = "{layout.containerd_socket}"',
        "",
        '[plugins."io.containerd.internal.v1.opt"]',
        f'  path = "{d / "opt"}"',
        "",
        f"[{cri}]",
        f'  sandbox_image = "{sandbox_image}"',
        "  restrict_oom_score_adj = true",
        "  netns_mounts_under_state_dir = true",
        "  disable_apparmor = true",
        '  stream_server_address = "127.0.0.1"',
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"[{cri}.cni]",
        f'  bin_dir = "{CNI_BIN_DIR}"',
        f'  conf_dir = "{layout.cni_conf_dir}"',
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def cni_conflist(layout: Layout) -> str:
    """The pods' network: a veth per pod on the node's bridge (which already holds the node's address, the pods'
    gateway), addresses from the pod range, and portmap for hostPorts."""
    first, last = netns.POD_RANGE
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "agl-pods",
        "plugins": [
            {"type": "bridge", "bridge": netns.BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(layout.cni_ipam_dir),
                      "ranges": [[{"subnet": netns.POD_SUBNET, "rangeStart": first, "rangeEnd": last,
                                   "gateway": netns.NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=1)


def kubelet_config(layout: Layout, *, client_ca: Path, serving: tuple[Path, Path], healthz_port: int) -> str:
    cert, key = serving
    return yaml.safe_dump({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": netns.NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(layout.resolv_conf),
        "podLogsDir": str(layout.pod_logs_dir),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "maxPods": 60,
    })


def kube_proxy_config(kubeconfig: Path, *, healthz_port: int, metrics_port: int) -> str:
    return yaml.safe_dump({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": netns.POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "iptables": {"masqueradeAll": True},
        # 0: leave the conntrack table's size as it is (it is the machine's, not the namespace's).
        "conntrack": {"maxPerCore": 0},
    })


def resolv_conf() -> str:
    """The resolv.conf a pod with ``dnsPolicy: Default`` gets: no name server, since there is none it may ask
    outside the namespace (cluster DNS answers the pods with ``ClusterFirst``)."""
    return "# local node: no upstream name server\noptions ndots:1\n"
