"""``python -m tofu_agl``: the Tofu-backed AGL aggregated API server and reconciler."""

from __future__ import annotations

from shared import lazy_imports

DESCRIPTION = ("Serve tofu.apps.cozystack.io (or --group) kinds from TofuApplicationDefinitions, backed by "
               "tofu-controller Terraforms, and roll definition changes out to existing instances.")


def main(argv: list[str] | None = None) -> None:
    # First, before anything imports kubernetes_asyncio (the runtime, the app and kopf do): see shared.lazy_imports.
    lazy_imports.install()
    # Next, the lists its kinds will need, sent while the rest is imported (see shared.client.early).
    from shared.client import early

    from .names import DEFINITIONS_PATH, lists_ahead

    ahead = early.start(argv, DEFINITIONS_PATH, lists_ahead, flags=("--group",))
    from shared.service import memory

    with memory.imported_frozen():
        from shared.service import runtime

        from .app import COMPONENT, arguments, wiring

    runtime.main(DESCRIPTION, COMPONENT, wiring, extra_arguments=arguments, argv=argv, listed_ahead=ahead)


if __name__ == "__main__":
    main()
