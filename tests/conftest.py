"""Shared test helpers: paths to fixtures and to the reference statuses in ../shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Sample definitions: the demo applies them and the tests use them as realistic fixtures.
FIXTURES = ROOT / "deploy" / "samples"


def _reference_dir() -> Path:
    for candidate in (ROOT.parent / "shared" / "reference" / "status",):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("reference statuses not found next to the repository (../shared/reference/status)")


@pytest.fixture(scope="session")
def reference() -> Any:
    """Load a reference document by file stem, e.g. ``reference("tf-status-pending")``."""

    def load(stem: str) -> Any:
        return yaml.safe_load((_reference_dir() / f"{stem}.yaml").read_text())

    return load
