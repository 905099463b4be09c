"""Durations render the way Go's time.Duration prints them."""

from __future__ import annotations

import pytest

from shared.api.durations import go_duration


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("10m", "10m0s"),
        ("10m0s", "10m0s"),
        ("1h", "1h0m0s"),
        ("90s", "1m30s"),
        ("1.5h", "1h30m0s"),
        ("2h45m30s", "2h45m30s"),
        ("1.5s", "1.5s"),
        ("0.5s", "500ms"),
        ("500ms", "500ms"),
        ("1500ms", "1.5s"),
        ("0s", "0s"),
        ("30s", "30s"),
    ],
)
def test_go_duration(text: str, want: str) -> None:
    assert go_duration(text) == want


@pytest.mark.parametrize("text", ["10 minutes", "bogus", "", "10"])
def test_go_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        go_duration(text)
