"""OpenAPI documents: what kubectl explain, apply and the field-validation check look for."""

from __future__ import annotations

from shared.api.rest import ResourceInfo
from shared.schema import openapi
from shared.schema.dialect import refs

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "description": "Desired state.",
            "properties": {
                "replicas": {"type": "integer", "default": 1, "description": "How many."},
                "port": {"x-kubernetes-int-or-string": True, "type": "string", "nullable": True},
                "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                # a property literally called "nullable" must survive the v2 conversion
                "nullable": {"type": "boolean"},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "metadata": {"type": "object"},
    },
}

INFO = ResourceInfo("apps.example.io", "v1alpha1", "Postgres", "postgreses", "postgres", SCHEMA)
OTHER = ResourceInfo("tofu.example.io", "v1alpha1", "VPC", "vpcs", "vpc", {"type": "object"})
GVK = {"group": "apps.example.io", "version": "v1alpha1", "kind": "Postgres"}


def test_definition_name() -> None:
    assert openapi.definition_name("apps.cozystack.io", "v1alpha1", "Postgres") == "io.cozystack.apps.v1alpha1.Postgres"


def test_v3_document_is_what_kubectl_explain_walks() -> None:
    doc = openapi.v3_document("apps.example.io", "v1alpha1", [INFO, OTHER])
    assert doc["openapi"].startswith("3.")
    # explain: the resource's path carries the GVK on its operations ...
    item = doc["paths"]["/apis/apps.example.io/v1alpha1/namespaces/{namespace}/postgreses/{name}"]
    for method in ("get", "put", "patch", "delete"):
        assert item[method]["x-kubernetes-group-version-kind"] == GVK
    # ... and exactly one component schema lists that GVK.
    schemas = doc["components"]["schemas"]
    matching = [name for name, s in schemas.items() if GVK in s.get("x-kubernetes-group-version-kind", [])]
    assert matching == ["io.example.apps.v1alpha1.Postgres"]
    kind_schema = schemas["io.example.apps.v1alpha1.Postgres"]
    assert kind_schema["properties"]["spec"]["properties"]["replicas"]["default"] == 1
    assert kind_schema["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert set(kind_schema["properties"]) >= {"apiVersion", "kind", "metadata", "spec", "status"}
    # other groups' kinds are not in this group version's document
    assert not any("tofu" in path for path in doc["paths"])
    # self-contained: every $ref resolves inside the document
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/")
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_v3_patch_operation_drives_kubectl_apply_and_validation() -> None:
    doc = openapi.v3_document("apps.example.io", "v1alpha1", [INFO])
    item = doc["paths"]["/apis/apps.example.io/v1alpha1/namespaces/{namespace}/postgreses/{name}"]
    content = item["patch"]["requestBody"]["content"]
    assert "application/strategic-merge-patch+json" not in content
    assert set(content) == {
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
    }
    query = {p["name"] for p in item["patch"]["parameters"] if p["in"] == "query"}
    assert {"fieldValidation", "fieldManager", "dryRun", "force"} <= query
    collection = doc["paths"]["/apis/apps.example.io/v1alpha1/namespaces/{namespace}/postgreses"]
    assert collection["post"]["x-kubernetes-action"] == "post"
    assert collection["get"]["x-kubernetes-action"] == "list"
    all_ns = doc["paths"]["/apis/apps.example.io/v1alpha1/postgreses"]
    assert all_ns["get"]["x-kubernetes-group-version-kind"] == GVK


def test_v3_list_schema() -> None:
    doc = openapi.v3_document("apps.example.io", "v1alpha1", [INFO])
    lst = doc["components"]["schemas"]["io.example.apps.v1alpha1.PostgresList"]
    assert lst["x-kubernetes-group-version-kind"] == [{**GVK, "kind": "PostgresList"}]
    assert lst["properties"]["items"]["items"] == {"$ref": "#/components/schemas/io.example.apps.v1alpha1.Postgres"}


def test_v3_document_does_not_mutate_info_schema() -> None:
    before = repr(INFO.schema)
    openapi.v3_document("apps.example.io", "v1alpha1", [INFO])
    openapi.v2_document([INFO])
    assert repr(INFO.schema) == before


def test_v3_index_hashes_follow_content() -> None:
    doc_a = openapi.v3_document("apps.example.io", "v1alpha1", [INFO])
    index = openapi.v3_index({("apps.example.io", "v1alpha1"): doc_a})
    url = index["paths"]["apis/apps.example.io/v1alpha1"]["serverRelativeURL"]
    assert url == f"/openapi/v3/apis/apps.example.io/v1alpha1?hash={openapi.content_hash(doc_a)}"
    doc_b = openapi.v3_document("apps.example.io", "v1alpha1", [INFO, OTHER])
    assert openapi.content_hash(doc_a) == openapi.content_hash(doc_b)  # other groups do not matter
    changed = ResourceInfo("apps.example.io", "v1alpha1", "Postgres", "postgreses", "postgres", {"type": "object"})
    doc_c = openapi.v3_document("apps.example.io", "v1alpha1", [changed])
    assert openapi.content_hash(doc_c) != openapi.content_hash(doc_a)


def test_v2_document() -> None:
    doc = openapi.v2_document([INFO, OTHER])
    assert doc["swagger"] == "2.0"
    defs = doc["definitions"]
    for ref in refs(doc):
        assert ref.startswith("#/definitions/")
        assert ref.removeprefix("#/definitions/") in defs, ref
    patch_op = doc["paths"]["/apis/apps.example.io/v1alpha1/namespaces/{namespace}/postgreses/{name}"]["patch"]
    assert patch_op["x-kubernetes-action"] == "patch"
    assert patch_op["x-kubernetes-group-version-kind"] == GVK
    assert "application/strategic-merge-patch+json" not in patch_op["consumes"]
    assert "application/merge-patch+json" in patch_op["consumes"]
    spec = defs["io.example.apps.v1alpha1.Postgres"]["properties"]["spec"]["properties"]
    assert "nullable" in spec  # the property, not the keyword
    assert "nullable" not in spec["port"]
    assert "type" not in spec["port"]  # int-or-string has no v2 type
    assert "oneOf" not in spec["choice"]
    meta = defs["io.example.apps.v1alpha1.Postgres"]["properties"]["metadata"]
    assert meta["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "io.example.tofu.v1alpha1.VPC" in defs


def test_to_v2_schema_leaves_data_keywords_alone() -> None:
    schema = {
        "type": "object",
        "default": {"nullable": True, "$ref": "#/components/schemas/x"},
        "enum": [None, 1],
    }
    assert openapi.to_v2_schema(schema) == schema
