"""shared.api.labels: a user's labels and annotations refused in kube-apiserver's words, then as stored.

tests/integration/test_patterns.py holds the words to kube-apiserver's on a CRD.
"""

from __future__ import annotations

from typing import Any

from shared.api.labels import label_and_annotation_causes, label_value_errors


def _stored(key: str) -> str:
    return "apps.cozystack.io-" + key.replace("/", "-")


def _causes(**meta: Any) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in label_and_annotation_causes(meta, _stored)]


def test_a_label_value_is_refused_in_kube_apiservers_words() -> None:
    [(field, message)] = _causes(labels={"app": "x\n"})
    assert field == "metadata.labels"
    assert message.startswith('Invalid value: "x\\n": a valid label must be an empty string or consist of ')
    assert message.endswith("regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    assert label_value_errors("") == [] and label_value_errors("v" * 63) == []
    assert label_value_errors("v" * 64) == ["must be no more than 63 bytes"]


def test_a_key_is_checked_as_written_before_it_is_checked_as_stored() -> None:
    [(_, written)] = _causes(labels={"app\n": "x"})
    assert written.startswith('Invalid value: "app\\n": name part must consist of alphanumeric characters')
    assert "stored as" not in written
    [(_, stored)] = _causes(labels={"k" * 50: "x"})  # valid as written, too long behind the prefix
    assert stored.endswith(f'(stored as "apps.cozystack.io-{"k" * 50}")')


def test_an_annotation_key_is_checked_in_lower_case_and_its_value_not_at_all() -> None:
    assert _causes(annotations={"Example.com/Note": "any text!\n"}) == []
    [(field, _)] = _causes(labels={"Example.com/Note": "x"})
    assert field == "metadata.labels"
