"""``python -m tofu_agl``: the Tofu-backed AGL aggregated API server and reconciler."""

from __future__ import annotations

from shared.service import runtime

from .app import COMPONENT, arguments, wiring

DESCRIPTION = ("Serve tofu.apps.cozystack.io (or --group) kinds from TofuApplicationDefinitions, backed by "
               "tofu-controller Terraforms, and roll definition changes out to existing instances.")


def main(argv: list[str] | None = None) -> None:
    runtime.main(DESCRIPTION, COMPONENT, wiring, extra_arguments=arguments, argv=argv)


if __name__ == "__main__":
    main()
