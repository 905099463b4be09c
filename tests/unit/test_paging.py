"""A list page's continue token read from its tail (:mod:`shared.client.paging`), without a cluster.

The integration tier reads real pages of kube-apiserver; these pin what the tail reader must refuse, where a
wrong token would silently skip or repeat objects.
"""

from __future__ import annotations

import orjson
import pytest

from shared.client.paging import UNKNOWN, continue_token


def page(meta: dict[str, object], items: list[object] | None = None) -> bytes:
    # The order kube-apiserver writes a custom resource's list in: sorted keys.
    return orjson.dumps({"apiVersion": "x/v1", "items": items or [], "kind": "XList", "metadata": meta})


def test_the_token_and_the_last_page() -> None:
    assert continue_token(page({"continue": "abc", "remainingItemCount": 3, "resourceVersion": "7"})) == "abc"
    assert continue_token(page({"resourceVersion": "7"})) is None
    assert continue_token(page({"continue": "", "resourceVersion": "7"})) is None


@pytest.mark.parametrize("raw", [
    # A built-in kind's order: the list metadata first, the last item's metadata at the end.
    orjson.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"continue": "abc"},
                  "items": [{"metadata": {"name": "x", "resourceVersion": "1"}}]}),
    # The tail is an object's metadata, not the list's: it has other keys.
    orjson.dumps({"items": [], "spec": {"x": 1}, "metadata": {"name": "n", "continue": "abc"}}),
    b"", b"{}", b'{"metadata":{"continue":"abc"}', b'[1, ,"metadata":{}]',
])
def test_anything_but_a_list_metadata_tail_is_unknown(raw: bytes) -> None:
    assert continue_token(raw) is UNKNOWN
