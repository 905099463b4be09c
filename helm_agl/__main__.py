"""``python -m helm_agl``: the Helm-backed AGL aggregated API server and reconciler."""

from __future__ import annotations

from shared.service import runtime

from .app import COMPONENT, wiring

DESCRIPTION = ("Serve apps.cozystack.io kinds from ApplicationDefinitions, backed by Flux HelmReleases, "
               "and roll definition changes out to existing releases.")


def main(argv: list[str] | None = None) -> None:
    runtime.main(DESCRIPTION, COMPONENT, wiring, argv=argv)


if __name__ == "__main__":
    main()
