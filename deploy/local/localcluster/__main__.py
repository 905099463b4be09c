"""Command line of the local control plane: ``python -m localcluster {build,up,down,status,user}``."""

from __future__ import annotations

import argparse
import sys

from . import build, crds, kstatus
from .build import BuildError, log
from .cluster import Cluster, ClusterError


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    parser.add_argument("--name", default="default", help="cluster name (state directory); default: %(default)s")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build (or reuse) kube-apiserver, kubectl, etcd, helm and the kstatus "
                                                    "verdict tool")
    build_cmd.add_argument("--flux", action="store_true",
                           help="also the Flux controllers, tofu-controller and tofu (minutes each when cold)")
    up = sub.add_parser("up", help="start the control plane, install CRDs, the services and the Flux controllers")
    up.add_argument("--no-services", action="store_true", help="only the control plane and CRDs")
    up.add_argument("--no-flux", action="store_true",
                    help="skip the Flux controllers, tofu-controller and the source servers")
    sub.add_parser("down", help="stop the services and the control plane")
    sub.add_parser("status", help="say whether the cluster runs")
    user = sub.add_parser("user", help="print the path of a kubeconfig for a client-certificate user")
    user.add_argument("username")
    user.add_argument("--group", action="append", default=[])
    return parser


def build_all(flux: bool) -> None:
    build.ensure_binaries()
    build.ensure_helm()
    kstatus.ensure_kstatus()
    if flux:
        build.ensure_tofu()
        build.ensure_flux()


def up(cluster: Cluster, *, with_services: bool, with_flux: bool) -> None:
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
    cluster = Cluster(args.name)
    try:
        if args.command == "build":
            build_all(args.flux)
        elif args.command == "up":
            up(cluster, with_services=not args.no_services, with_flux=not args.no_flux)
        elif args.command == "down":
            down(cluster)
        elif args.command == "status":
            running = cluster.is_running()
            print(f"cluster {args.name!r}: {'running at ' + cluster.server if running else 'stopped'}")
            return 0 if running else 3
        elif args.command == "user":
            print(cluster.user_kubeconfig(args.username, tuple(args.group)))
    except (BuildError, ClusterError) as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
