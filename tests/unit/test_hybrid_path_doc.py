"""docs/design/hybrid-path.md is generated: the committed file must equal what the generator writes now.

The document quotes measured sizes and likeness and names real functions, so any change to helm_agl,
tofu_agl or shared/ can make it stale; this test is what keeps it true.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "design" / "hybrid-path.md"


def _fresh(name: str) -> ModuleType:
    """Import ``docs.hybridpath.<name>`` anew (new caches), so two renders share no state."""
    for loaded in [m for m in sys.modules if m.startswith("docs.hybridpath")]:
        del sys.modules[loaded]
    return importlib.import_module(f"docs.hybridpath.{name}")


def _generator() -> ModuleType:
    return _fresh("sections")


@pytest.fixture(scope="module")
def rendered() -> str:
    text: str = _generator().render()
    return text


def test_document_is_up_to_date(rendered: str) -> None:
    committed = DOCUMENT.read_text() if DOCUMENT.exists() else ""
    assert rendered == committed, (
        "docs/design/hybrid-path.md is stale: regenerate it with `python -m docs.hybridpath` (or `nox -s docs`) "
        "and commit the result"
    )


def test_generation_is_deterministic(rendered: str) -> None:
    """A fresh load (new caches, new imports of the generator) writes the same bytes."""
    assert _generator().render() == rendered


def test_document_has_every_section(rendered: str) -> None:
    for heading in ("## (a)", "## (b)", "## (c)", "## (d)"):
        assert heading in rendered
    for method in ("Type", "TargetGVK", "TargetName", "Build", "ProjectStatus", "Reconcile"):
        assert f"### {method}\n" in rendered
    assert "class Backend(Protocol[Definition]):" in rendered
    for leak in ("Plan approval", "Outputs", "Runner identity", "Extra columns", "Pinned fields never rolled out"):
        assert f"**{leak}.**" in rendered
    assert "type: Terraform" in rendered and "spec.backend.terraform" in rendered


def test_shape_lines_normalize_names_strings_numbers() -> None:
    source = '"""Module doc."""\n\n\ndef f(a):\n    """Doc\n    more."""\n    return g(a, "x", 3)  # note\n'
    shapes, rows, doc_lines = _fresh("measure").shape_lines(source)
    assert shapes == ["def N ( N ) :", "return N ( N , S , 0 )"]
    assert rows == [4, 7]
    assert doc_lines == 3


def test_likeness_counts_matching_lines_on_both_sides() -> None:
    gen = _fresh("measure")
    a = gen.Module("x", "a", DOCUMENT, "", 0, ("def N ( N ) :", "return N"), (1, 2), ())
    b = gen.Module("y", "a", DOCUMENT, "", 0, ("def N ( N ) :", "return N", "pass"), (1, 2, 3), ())
    pair = gen.likeness(a, b)
    assert pair.alike == 2
    assert pair.share(pair.alike) == 0.8
