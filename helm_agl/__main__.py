"""``python -m helm_agl``: the Helm-backed AGL aggregated API server and reconciler."""

from __future__ import annotations

from shared import lazy_imports

DESCRIPTION = ("Serve apps.cozystack.io kinds from ApplicationDefinitions, backed by Flux HelmReleases, "
               "and roll definition changes out to existing releases.")


def main(argv: list[str] | None = None) -> None:
    # First, before anything imports kubernetes_asyncio (the runtime, the app and kopf do): see shared.lazy_imports.
    lazy_imports.install()
    # Next, the lists its kinds will need, sent while the rest is imported (see shared.client.early).
    from shared.client import early

    from .names import DEFINITIONS_PATH, lists_ahead

    ahead = early.start(argv, DEFINITIONS_PATH, lists_ahead)
    from shared.service import memory

    with memory.imported_frozen():
        from shared.service import runtime

        from .app import COMPONENT, wiring

    runtime.main(DESCRIPTION, COMPONENT, wiring, argv=argv, listed_ahead=ahead)


if __name__ == "__main__":
    main()
