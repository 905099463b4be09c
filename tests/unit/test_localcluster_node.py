"""The local node's configuration, its port forwarder and its host clean-up, without starting a node.

The node tier (tests/node) runs all of it for real; these pin the settings whose absence only shows on this kind of
machine (no CAP_SYS_RESOURCE, cgroup v1, nothing pulled) and the forwarder's crossing of namespaces, which needs only
a namespace of its own.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml
from localcluster import chartinstall, netns, nodeconfig, nodehost, portforward
from localcluster.nodeconfig import Layout


def test_containerd_config_for_this_machine(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    config = tomllib.loads(nodeconfig.containerd_config(layout, "localhost/agl-pause:abc"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    # Without it every sandbox fails after ~12 s here: root lacks CAP_SYS_RESOURCE.
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "localhost/agl-pause:abc"
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    # Everything of containerd's under the node's own directory (its default would be /var/lib and /run).
    for key in ("root", "state"):
        assert Path(config[key]).is_relative_to(tmp_path)
    assert Path(config["plugins"]["io.containerd.internal.v1.opt"]["path"]).is_relative_to(tmp_path)


def test_kubelet_config_for_cgroup_v1_and_no_pulls(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    config = yaml.safe_load(nodeconfig.kubelet_config(layout, client_ca=tmp_path / "ca.crt",
                                                      serving=(tmp_path / "k.crt", tmp_path / "k.key"),
                                                      healthz_port=10248))
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["failSwapOn"] is False
    assert config["imageGCHighThresholdPercent"] == 100  # an image removed could not be pulled back
    assert config["address"] == netns.NODE_IP
    assert config["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    assert Path(config["podLogsDir"]).is_relative_to(tmp_path)
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["clusterDNS"] == [nodeconfig.DNS_IP]


def test_cni_network_uses_the_nodes_bridge(tmp_path: Path) -> None:
    conflist = json.loads(nodeconfig.cni_conflist(Layout(tmp_path)))
    bridge = conflist["plugins"][0]
    assert bridge["bridge"] == netns.BRIDGE and bridge["isGateway"] is True
    (rng,) = bridge["ipam"]["ranges"][0:1]
    assert rng[0]["gateway"] == netns.NODE_IP and rng[0]["subnet"] == netns.POD_SUBNET
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(tmp_path)


def test_chart_values_only_what_a_local_cluster_must_set() -> None:
    values = chartinstall.local_values("localhost/agl-parallel:0123abcd")
    assert values == ["image.repository=localhost/agl-parallel", "image.tag=0123abcd", "image.pullPolicy=Never",
                      "tls.mode=generate"]
    args = chartinstall.install_args("localhost/agl-parallel:t", chartinstall.TOFU_ONLY)
    assert args[args.index("--set", args.index("tls.mode=generate")) + 1:].count("helmAgl.enabled=false") == 1
    assert "--wait" in args


@pytest.mark.parametrize("text", ["host:127.0.0.1:1", "vm:127.0.0.1:1=node:127.0.0.1:2", "host:a:b=node:c:d", ""])
def test_a_malformed_forward_rule_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="not a rule"):
        portforward.parse_rule(text)


def test_mounts_are_found_under_their_prefixes_deepest_first(tmp_path: Path) -> None:
    base = tmp_path / "node"
    info = tmp_path / "mountinfo"
    info.write_text("\n".join([
        f"36 25 0:32 / {base}/kubelet/pods/x/volumes/tok rw - tmpfs tmpfs rw",
        f"37 25 0:33 / {base}/kubelet rw - tmpfs tmpfs rw",
        f"38 25 0:34 / {base}-other rw - tmpfs tmpfs rw",
        f"39 25 0:35 / {base}/with\\040space rw - tmpfs tmpfs rw",
        "40 25 0:36 / /proc rw - proc proc rw",
    ]) + "\n")
    found = nodehost.mounts_under([base], info)
    assert found[0] == base / "kubelet" / "pods/x/volumes/tok"  # before the mount it lies in
    assert set(found) == {base / "kubelet" / "pods/x/volumes/tok", base / "kubelet", base / "with space"}


def test_the_forwarder_connects_inside_the_namespace() -> None:
    """A listener on the machine's loopback reaches a server that exists only inside a network namespace (and
    only there: the same port on the machine's loopback has nobody listening)."""
    name = f"agl-unit-{uuid.uuid4().hex[:6]}"
    path = Path("/run/netns") / name
    subprocess.run(["ip", "netns", "add", name], check=True)
    server = forwarder = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        port = _free_port()
        server = subprocess.Popen(["nsenter", f"--net={path}", "--", sys.executable, "-c",
                                   "import socket;s=socket.socket();"
                                   "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                                   f"s.bind(('127.0.0.1',{port}));s.listen();c,_=s.accept();c.sendall(c.recv(64)[::-1])"])
        outside = _free_port()
        forwarder = subprocess.Popen([sys.executable, "-m", "localcluster.portforward", "--netns", str(path),
                                      f"host:127.0.0.1:{outside}=node:127.0.0.1:{port}"])
        answer = asyncio.run(_ask(outside, b"namespace"))
        assert answer == b"ecapseman"
        with socket.socket() as probe:  # the server is not on the machine's own loopback
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        for proc in (server, forwarder):
            if proc is not None:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "delete", name], check=False)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _ask(port: int, data: bytes) -> bytes:
    for _ in range(100):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(64), timeout=5)
            writer.close()
            if answer:
                return answer
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing answered through the forwarder on 127.0.0.1:{port}")
