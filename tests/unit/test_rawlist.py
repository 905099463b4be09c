"""A list's page decoded only down to its items' fields (shared.client.kube.rawlist), and a cache's shape applied
to such an item (``CacheShape.encoded``): the same object the decoded path keeps, only never decoded whole."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from shared.api.errors import ApiError
from shared.bodies import loads
from shared.client.informer import keeping_spec, without_managed_fields
from shared.client.informer.transforms import CacheShape
from shared.client.kube import rawlist

MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:path": {}}}}]


def _item(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "infra.contrib.fluxcd.io/v1alpha2", "kind": "Terraform",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7", "managedFields": MANAGED,
                         "annotations": {"note": "<a & b> é"}},
            "spec": {"interval": "10m", "path": "./m", "vars": [{"name": "n", "value": 1.5}]},
            "status": {"conditions": []}, **extra}


def _page(items: list[dict[str, Any]]) -> bytes:
    """As kube-apiserver writes it: Go escapes <, > and & in strings."""
    page = {"apiVersion": "infra.contrib.fluxcd.io/v1alpha2", "kind": "TerraformList",
            "metadata": {"resourceVersion": "9", "continue": "token"}, "items": items}
    text = json.dumps(page, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


ITEMS = [
    _item("whole"),
    _item("no-spec-fields-dropped", spec={"interval": "1m"}),
    {**_item("no-spec"), "spec": None},
    {k: v for k, v in _item("without-spec").items() if k != "spec"},
    _item("big", spec={"interval": "1m", "vars": [{"name": "n", "value": 2**70}]}),
    {**_item("no-managed-fields"), "metadata": {"name": "no-managed-fields", "namespace": "ns"}},
]


@pytest.mark.parametrize("shape", [without_managed_fields, keeping_spec(("interval", "path")), CacheShape(())],
                         ids=["without-managed-fields", "keeping-two", "keeping-none"])
def test_a_shape_keeps_of_an_encoded_item_what_it_keeps_of_the_decoded_one(shape: CacheShape) -> None:
    raw = _page(ITEMS)
    page = rawlist.decode_page(raw, "GET", "/x")
    assert page["metadata"] == {"resourceVersion": "9", "continue": "token"} and page["kind"] == "TerraformList"
    assert all(isinstance(value, msgspec.Raw) for item in page["items"] for value in item.values())
    decoded = loads(raw)["items"]
    for item, whole in zip(page["items"], decoded, strict=True):
        kept = shape.encoded(item, rawlist.fields(item.get("metadata")))
        assert loads(kept) == shape(whole), whole["metadata"]["name"]


def test_the_fields_read_from_an_encoded_item() -> None:
    item = rawlist.decode_page(_page([_item("a")]), "GET", "/x")["items"][0]
    meta = rawlist.fields(item["metadata"])
    assert rawlist.text(meta["name"]) == "a" and rawlist.text(meta.get("uid")) == ""
    assert rawlist.text(meta["managedFields"]) == ""  # not a string
    assert rawlist.fields(item["status"]) == {"conditions": msgspec.Raw(b"[]")}
    assert rawlist.fields(msgspec.Raw(b"null")) == {} and rawlist.fields(None) == {}
    assert rawlist.encode({"kind": rawlist.encoded("Terraform"), **item})[:18] == b'{"kind":"Terraform'


def test_an_empty_answer_is_no_page_and_a_malformed_one_is_kube_apiservers_fault() -> None:
    assert rawlist.decode_page(b"", "GET", "/x") == {}
    assert rawlist.decode_page(b'{"kind":"TerraformList","items":null}', "GET", "/x")["items"] == []
    with pytest.raises(ApiError) as caught:
        rawlist.decode_page(b'{"items":[{"a":', "GET", "/apis/x")
    assert caught.value.code == 500 and "malformed JSON" in caught.value.message
