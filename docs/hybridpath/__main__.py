"""``python -m docs.hybridpath``: write ``docs/design/hybrid-path.md``."""

from __future__ import annotations

from docs.hybridpath.sections import OUTPUT, render


def main() -> None:
    OUTPUT.write_text(render())


if __name__ == "__main__":
    main()
