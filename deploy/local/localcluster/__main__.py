"""Command line of the local control plane: ``python -m localcluster {build,up,down,status,user}``."""

from __future__ import annotations

import argparse
import sys

from . import build, crds, kstatus
from .build import BuildError, log
from .cluster import Cluster, ClusterError
from .netns import NetnsError


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    parser.add_argument("--name", default=None,
                        help="cluster name (state directory); default: 'default', or 'node' with --node")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build (or reuse) kube-apiserver, kubectl, etcd, helm and the kstatus "
                                                    "verdict tool")
    build_cmd.add_argument("--flux", action="store_true",
                           help="also the Flux controllers, tofu-controller and tofu (minutes each when cold)")
    build_cmd.add_argument("--node", action="store_true",
                           help="also kubelet, kube-proxy, kube-controller-manager, kube-scheduler and the images")
    up = sub.add_parser("up", help="start the control plane, install CRDs, the services and the Flux controllers")
    up.add_argument("--no-services", action="store_true", help="only the control plane and CRDs")
    up.add_argument("--no-flux", action="store_true",
                    help="skip the Flux controllers, tofu-controller and the source servers")
    up.add_argument("--node", action="store_true",
                    help="a real node (containerd, kubelet, kube-proxy, controller manager, scheduler) in a network "
                         "namespace of its own, the image built from the Dockerfile and the chart installed with helm")
    down_cmd = sub.add_parser("down", help="stop the services and the control plane")
    down_cmd.add_argument("--node", action="store_true",
                          help="only the node cluster (name 'node'); without a name, down stops 'default' and 'node'")
    sub.add_parser("status", help="say whether the cluster runs")
    user = sub.add_parser("user", help="print the path of a kubeconfig for a client-certificate user")
    user.add_argument("username")
    user.add_argument("--group", action="append", default=[])
    return parser


def build_all(flux: bool, node: bool = False) -> None:
    build.ensure_binaries()
    build.ensure_helm()
    kstatus.ensure_kstatus()
    if flux:
        build.ensure_tofu()
        build.ensure_flux()
    if node:
        from . import chartinstall, clusterdns, hostpackages, images, pauseimage

        hostpackages.ensure()
        build.ensure_node_binaries()
        clusterdns.ensure_image()
        pauseimage.ensure_pause_image()
        images.ensure_project_image(chartinstall.REPO_ROOT)


def node_with_chart(cluster: Cluster) -> None:
    """The control plane and a real node in its network namespace, the project's image built from its Dockerfile
    and imported into the node, and the chart installed with ``helm install --wait`` (both services)."""
    from . import chartinstall, hostpackages, images, node, pauseimage

    hostpackages.ensure()
    cluster.up(node=True)
    build.ensure_helm()
    # Upstream CRDs only: the chart installs the definition CRDs itself, as on any cluster.
    crds.install(cluster, ours=False)
    sandbox = pauseimage.ensure_pause_image()
    project = images.ensure_project_image(chartinstall.REPO_ROOT)
    node.start(cluster, [project], sandbox)
    log(node.describe(cluster))
    chartinstall.install(cluster, project.ref)


def up(cluster: Cluster, *, with_services: bool, with_flux: bool, node: bool = False) -> None:
    """The control plane, the services (as processes, or with ``node`` as the chart's pods on a real node), and
    the Flux controllers as processes beside it (they reach either through 127.0.0.1)."""
    if node:
        node_with_chart(cluster)
    else:
        cluster.up()
        build.ensure_helm()
        crds.install(cluster)
        if with_services:
            from . import services

            services.start_all(cluster)
    build.ensure_tofu()
    from . import flux, samples

    if with_flux:
        controllers = flux.start(cluster)
        log(f"{', '.join(reversed(flux.CONTROLLERS))} running; charts served at {controllers.chart_repository}")
    local = samples.local_definitions(cluster.dir / "samples" / "definitions", flux.state_kubeconfig(cluster))
    log(f"sample definitions for this cluster (Tofu state reached through a kubeconfig): {local}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(f"export PATH={build.kubectl_dir()}:$PATH")


def down(cluster: Cluster) -> None:
    from . import flux, services

    flux.stop(cluster)
    services.stop_all(cluster)
    cluster.down()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    node = getattr(args, "node", False)
    cluster = Cluster(args.name or ("node" if node and args.command != "build" else "default"))
    try:
        if args.command == "build":
            build_all(args.flux, node)
        elif args.command == "up":
            up(cluster, with_services=not args.no_services, with_flux=not args.no_flux, node=node)
        elif args.command == "down" and args.name is None and not node:
            # ``nox -s down`` after ``up`` or ``up --node``: both named clusters, whichever runs.
            for name in ("default", "node"):
                down(Cluster(name))
        elif args.command == "down":
            down(cluster)
        elif args.command == "status":
            running = cluster.is_running()
            print(f"cluster {args.name!r}: {'running at ' + cluster.server if running else 'stopped'}")
            return 0 if running else 3
        elif args.command == "user":
            print(cluster.user_kubeconfig(args.username, tuple(args.group)))
    except (BuildError, ClusterError, NetnsError) as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
