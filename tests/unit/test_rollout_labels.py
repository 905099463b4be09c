"""The rollout rules both stacks share (shared.api.rollout), on plain data."""

from __future__ import annotations

from shared.api.rollout import definition_labels, guarded_patch, release_label_patch

RESERVED = ("example.com/application.name", "example.com/application.kind")


def test_reserved_and_user_labels_are_never_rolled_out() -> None:
    wanted = {"example.com/application.name": "someone-else", "example.com-team": "b", "tier": "gold", "same": "x"}
    have = {"example.com/application.name": "mine", "example.com-team": "a", "same": "x"}
    assert release_label_patch(wanted, have, reserved=RESERVED, user_prefix="example.com-") == {"tier": "gold"}


def test_a_definition_sets_neither_reserved_nor_user_labels_on_create() -> None:
    wanted = {"example.com/application.name": "someone-else", "example.com-team": "b", "tier": "gold"}
    assert definition_labels(wanted, reserved=RESERVED, user_prefix="example.com-") == {"tier": "gold"}


def test_guarded_patch_names_the_resource_version_and_is_none_without_changes() -> None:
    meta = {"name": "a", "resourceVersion": "42", "labels": {"x": "1"}}
    assert guarded_patch(meta, {}, {}) is None
    assert guarded_patch(meta, {"path": "./b"}, {}) == {"metadata": {"resourceVersion": "42"}, "spec": {"path": "./b"}}
    labelled = guarded_patch(meta, {}, {"tier": "gold"})
    assert labelled == {"metadata": {"resourceVersion": "42", "labels": {"tier": "gold"}}}
