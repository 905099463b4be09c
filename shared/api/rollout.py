"""What both stacks' rollouts share: the labels a definition may set on existing backing objects, and
the guarded merge patch that carries a rollout's changes.

A rollout is a merge patch (:func:`shared.api.patch.merge_diff` computes its spec part) that names the
backing object's ``resourceVersion``, so it fails with 409 if the object changed since it was read and
the caller re-reads and recomputes.  Labels are where the two stacks drifted apart once (one protected
the identity labels on rollout, the other did not), so the rule is written here, once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from shared.bodies import JSON


@dataclass(frozen=True)
class Settled:
    """What a rollout keeps of an instance it found up to date as the page listing it arrived, instead of
    the object: a round over 50 000 instances then holds only those it must patch, not all of them
    decoded at once (``ObjectClient.list_all``'s ``keep``). ``note``: what the round still reports of
    it (tofu_agl: a state location that was not rolled out)."""

    note: JSON | None = None


def definition_labels(release_labels: Mapping[str, str], *, reserved: Collection[str],
                      user_prefix: str) -> dict[str, str]:
    """The definition's release labels it may set on a backing object, on create and on rollout alike.

    The identity labels (``reserved``) and the users' own labels (``user_prefix``) are not the
    definition's to set: a definition naming them would rename whose object it is, or put words in a
    user's mouth that read back as the user's own labels.
    """
    return {key: value for key, value in release_labels.items()
            if key not in reserved and not key.startswith(user_prefix)}


def release_label_patch(release_labels: Mapping[str, str], have: Mapping[str, Any], *,
                        reserved: Collection[str], user_prefix: str) -> JSON:
    """The definition's release labels (:func:`definition_labels`) that differ on the backing object.
    Other labels on the object are left alone."""
    allowed = definition_labels(release_labels, reserved=reserved, user_prefix=user_prefix)
    return {key: value for key, value in allowed.items() if have.get(key) != value}


def guarded_patch(metadata: Mapping[str, Any], spec_patch: JSON, label_patch: JSON) -> JSON | None:
    """The rollout's merge patch, with the object's resourceVersion as its precondition; None when
    there is nothing to change."""
    if not spec_patch and not label_patch:
        return None
    meta_patch: JSON = {}
    if metadata.get("resourceVersion"):
        meta_patch["resourceVersion"] = metadata["resourceVersion"]
    if label_patch:
        meta_patch["labels"] = label_patch
    patch: JSON = {"metadata": meta_patch} if meta_patch else {}
    if spec_patch:
        patch["spec"] = spec_patch
    return patch
