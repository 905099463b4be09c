"""tofu_agl.plan: where tofu-controller keeps a readable plan, the summary, and redaction (pure)."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from tofu_agl import plan
from tofu_agl.definition import TofuApplicationDefinition
from tofu_agl.project import to_application

# The shape of `tofu show -no-color` (OpenTofu 1.10) for a second plan of tests/data/modules/preview.
HUMAN = """
OpenTofu used the selected providers to generate the following execution
plan. Resource actions are indicated with the following symbols:
  ~ update in-place
  - destroy
-/+ destroy and then create replacement

OpenTofu will perform the following actions:

  # terraform_data.dns will be updated in-place
  ~ resource "terraform_data" "dns" {
      ~ input  = "web.example.org" -> "api.example.org"
    }

  # terraform_data.replica[0] must be replaced
-/+ resource "terraform_data" "replica" {
      ~ triggers_replace = [
          - "web",
          + "api",
        ]
    }

  # terraform_data.replica[1] will be destroyed
  # (because index [1] is out of range for count)
  - resource "terraform_data" "replica" {
      - input            = "web" -> null
    }

  # terraform_data.server will be updated in-place
  ~ resource "terraform_data" "server" {
      ~ output = {
          - password = "hunter2-long"
        } -> (known after apply)
    }

  # module.net.terraform_data.zone["a b"] will be created
  + resource "terraform_data" "zone" {
      + password = (sensitive value)
    }

Plan: 2 to add, 2 to change, 2 to destroy.
"""

SUMMARY = {
    "add": 2, "change": 2, "destroy": 2,
    "resources": [{"address": address, "action": action} for address, action in (
        ("terraform_data.dns", "update"),
        ("terraform_data.replica[0]", "replace"),
        ("terraform_data.replica[1]", "delete"),
        ("terraform_data.server", "update"),
        ('module.net.terraform_data.zone["a b"]', "create"),
    )],
}


def change(address: str, *actions: str, **fields: Any) -> dict[str, Any]:
    return {"address": address, "mode": "managed", "change": {"actions": list(actions), **fields}}


JSON_PLAN: dict[str, Any] = {
    "format_version": "1.2",
    "terraform_version": "1.10.10",
    "variables": {"db_password": {"value": "hunter2-long"}, "name": {"value": "api"}},
    "planned_values": {"root_module": {"resources": [{"values": {"password": "hunter2-long"}}]}},
    "resource_changes": [
        change("terraform_data.dns", "update", before={"input": "web"}, after={"input": "api"},
               before_sensitive={}, after_sensitive={}),
        change("terraform_data.replica[0]", "delete", "create"),
        change("terraform_data.replica[1]", "delete"),
        change("terraform_data.server", "update",
               before={"input": {"name": "web", "password": "hunter2-long"}, "output": {"password": "hunter2-long"}},
               after={"input": {"name": "api", "password": "hunter2-long"}, "list": ["a", "hunter2-long"]},
               before_sensitive={"input": {"password": True}, "output": {}},
               after_sensitive={"input": {"password": True}, "list": [False, True]}),
        change("terraform_data.unchanged", "no-op"),
        change("data.terraform_remote_state.x", "read"),
        change("terraform_data.new", "create"),
    ],
    "output_changes": {"token": {"actions": ["update"], "before": "old", "after": "new",
                                 "before_sensitive": True, "after_sensitive": True}},
    "configuration": {"root_module": {"variables": {"db_password": {"sensitive": True}, "name": {}}}},
}


# ------------------------------------------------------------------------------------ summary


def test_human_summary_counts_and_addresses() -> None:
    assert plan.summary_from_human(HUMAN) == SUMMARY


def test_human_plan_without_changes() -> None:
    text = "\nNo changes. Your infrastructure matches the configuration.\n"
    assert plan.summary_from_human(text) == {"add": 0, "change": 0, "destroy": 0, "resources": []}


def test_human_counts_with_imports_keep_add_change_destroy() -> None:
    text = "Plan: 1 to import, 3 to add, 0 to change, 1 to destroy.\n"
    assert plan.summary_from_human(text)["add"] == 3 and plan.summary_from_human(text)["destroy"] == 1


def test_json_summary_counts_as_opentofu_does() -> None:
    """A replacement adds one and destroys one; no-op and read are not changes."""
    got = plan.summary_from_json(JSON_PLAN)
    assert (got["add"], got["change"], got["destroy"]) == (2, 2, 2)
    assert [(r["address"], r["action"]) for r in got["resources"]] == [
        ("terraform_data.dns", "update"), ("terraform_data.replica[0]", "replace"),
        ("terraform_data.replica[1]", "delete"), ("terraform_data.server", "update"), ("terraform_data.new", "create"),
    ]


def test_summary_masks_secrets_in_addresses() -> None:
    text = '  # terraform_data.x["hunter2-long"] will be created\nPlan: 1 to add, 0 to change, 0 to destroy.\n'
    assert plan.summary(text, plan.HUMAN, ["hunter2-long"])["resources"] == [
        {"address": "terraform_data.x[(sensitive value)]", "action": "create"}]


# ------------------------------------------------------------------------------------ where it is kept


def terraform(readable: str | None = "human", name: str = "site-shop", workspace: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if readable is not None:
        spec["storeReadablePlan"] = readable
    if workspace:
        spec["workspace"] = workspace
    return {"metadata": {"name": name, "namespace": "t"}, "spec": spec}


def test_location_follows_store_readable_plan() -> None:
    human = plan.plan_location(terraform("human"))
    assert human == plan.PlanLocation("human", "configmaps", "tfplan-default-site-shop")
    as_json = plan.plan_location(terraform("json", workspace="prod"))
    assert as_json == plan.PlanLocation("json", "secrets", "tfplan-prod-site-shop.json")
    assert plan.chunk_name(as_json, 2) == "tfplan-prod-site-shop.json-2"
    assert plan.plan_location(terraform("none")) is None
    assert plan.plan_location(terraform(None)) is None


def test_long_names_become_tofu_controllers_safe_label_values() -> None:
    assert plan.safe_label_value("a" * 63) == "a" * 63
    long = plan.safe_label_value("a" * 70)
    assert len(long) == 63 and long.startswith("a" * 46 + "-") and long != plan.safe_label_value("a" * 71)


def stored(data: str, plan_id: str = "plan-main-1", chunk: int | None = None) -> dict[str, Any]:
    annotations = {plan.SAVED_PLAN_ANNOTATION: plan_id}
    if chunk is not None:
        annotations[plan.CHUNK_ANNOTATION] = str(chunk)
    return {"metadata": {"annotations": annotations}, "data": {"tfplan": data}}


def test_assemble_joins_chunks_in_order_and_ignores_other_plans() -> None:
    objects = [stored("two", chunk=1), stored("one", chunk=0), stored("stale", plan_id="plan-main-0")]
    assert plan.assemble(objects, "plan-main-1", plan.HUMAN) == "onetwo"
    assert plan.assemble(objects, "plan-main-2", plan.HUMAN) is None
    assert plan.assemble([stored("two", chunk=1)], "plan-main-1", plan.HUMAN) is None  # a chunk is missing


def test_assemble_decodes_a_gzip_json_secret() -> None:
    encoded = gzip.compress(b'{"format_version": "1.2"}')
    half = len(encoded) // 2
    chunks = [stored(base64.b64encode(encoded[:half]).decode(), chunk=0),
              stored(base64.b64encode(encoded[half:]).decode(), chunk=1)]
    assert json.loads(plan.assemble(chunks, "plan-main-1", plan.JSON_PLAN) or "") == {"format_version": "1.2"}


# ------------------------------------------------------------------------------------ redaction


def test_json_plan_redacts_marked_values_sensitive_variables_and_drops_repeats() -> None:
    out = plan.redact_json_plan(JSON_PLAN)
    assert set(out) == {"format_version", "terraform_version", "variables", "resource_changes", "output_changes"}
    assert out["variables"] == {"db_password": {"value": plan.REDACTED}, "name": {"value": "api"}}
    server = out["resource_changes"][3]["change"]
    assert server["before"]["input"] == {"name": "web", "password": plan.REDACTED}
    assert server["after"]["list"] == ["a", plan.REDACTED]
    assert server["before"]["output"] == {"password": "hunter2-long"}  # not marked: masking is the second line
    assert out["output_changes"]["token"]["before"] == plan.REDACTED == out["output_changes"]["token"]["after"]


def test_readable_json_masks_unmarked_copies_of_secrets() -> None:
    body, content_type = plan.readable(json.dumps(JSON_PLAN), plan.JSON_PLAN, ["hunter2-long"])
    assert content_type == "application/json"
    assert b"hunter2-long" not in body
    assert json.loads(body)["resource_changes"][3]["change"]["before"]["output"] == {"password": plan.REDACTED}


def test_readable_human_masks_quoted_and_bare_secrets() -> None:
    body, content_type = plan.readable(HUMAN + "bare: hunter2-long\n", plan.HUMAN, ["hunter2-long"])
    assert content_type.startswith("text/plain")
    text = body.decode()
    assert "hunter2-long" not in text
    assert "- password = (sensitive value)" in text and "bare: (sensitive value)" in text


def test_short_secrets_are_masked_only_as_whole_quoted_strings() -> None:
    text = plan.mask_text('a = "ab"\nlabel = "tab"\n', ["ab"])
    assert text == 'a = (sensitive value)\nlabel = "tab"\n'


@pytest.mark.parametrize(("spec", "want"), [
    ({"db_password": "pw-1234", "name": "api"}, ["pw-1234"]),
    ({"db_password": {"user": "u", "keys": ["k-long-1", ""]}}, ["k-long-1", "u"]),
    ({"name": "api"}, []),
])
def test_sensitive_values_come_from_marked_properties(spec: dict[str, Any], want: list[str]) -> None:
    schema = {"properties": {"db_password": {"x-cozystack-sensitive": True}, "name": {"type": "string"}}}
    assert plan.sensitive_values(schema, spec) == want


# ------------------------------------------------------------------------------------ status


def definition(readable: str | None) -> TofuApplicationDefinition:
    terraform: dict[str, Any] = {"sourceRef": {"kind": "GitRepository", "name": "m", "namespace": "s"},
                                 "path": ".", "approvePlan": "manual"}
    if readable:
        terraform["storeReadablePlan"] = readable
    return TofuApplicationDefinition.from_object({
        "apiVersion": "cozystack.io/v1alpha1", "kind": "TofuApplicationDefinition", "metadata": {"name": "site"},
        "spec": {"application": {"kind": "Site", "plural": "sites", "singular": "site",
                                 "openAPISchema": '{"type":"object"}'},
                 "release": {"prefix": "site-"}, "terraform": terraform},
    })


def pending_terraform() -> dict[str, Any]:
    labels = {"apps.cozystack.io/application.kind": "Site", "apps.cozystack.io/application.group": "g.example.io",
              "apps.cozystack.io/application.name": "shop"}
    return {"metadata": {"name": "site-shop", "namespace": "t", "labels": labels},
            "spec": {"approvePlan": ""}, "status": {"plan": {"pending": "plan-main-1"}}}


def test_status_carries_the_summary_and_the_condition_points_at_both() -> None:
    app = to_application(definition("human"), pending_terraform(), group="g.example.io", plan_summary=SUMMARY)
    assert app is not None
    assert app["status"]["plan"] == {"pending": "plan-main-1", "summary": SUMMARY}
    awaiting = next(c for c in app["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert awaiting["message"] == (
        'Plan "plan-main-1" is waiting for approval; review its summary in status.plan.summary '
        "(kubectl describe sites shop -n t) and the whole plan with: kubectl get --raw "
        "/apis/g.example.io/v1alpha1/namespaces/t/sites/shop/plan; approve it with: kubectl annotate sites shop "
        "-n t --overwrite tofu.apps.cozystack.io/approve-plan=plan-main-1")


def test_without_a_readable_plan_the_condition_only_tells_how_to_approve() -> None:
    app = to_application(definition(None), pending_terraform(), group="g.example.io")
    assert app is not None
    awaiting = next(c for c in app["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert "get --raw" not in awaiting["message"] and "summary" not in app["status"]["plan"]


def test_summaries_are_remembered_per_plan_and_bounded() -> None:
    from tofu_agl.plan_read import PlanSummaries

    cache = PlanSummaries(capacity=2)
    tf = {"metadata": {"uid": "u1"}, "spec": {"storeReadablePlan": "human"},
          "status": {"plan": {"pending": "plan-main-1"}, "lastPlanAt": "t1"}}
    replanned = {**tf, "status": {"plan": {"pending": "plan-main-1"}, "lastPlanAt": "t2"}}
    assert PlanSummaries.key(tf) != PlanSummaries.key(replanned)  # same id, new plan: read again
    cache.put(PlanSummaries.key(tf), SUMMARY)
    assert cache.get(PlanSummaries.key(tf)) == SUMMARY
    cache.put(("b",), SUMMARY)
    cache.get(PlanSummaries.key(tf))  # used last: ("b",) is now the oldest
    cache.put(("c",), SUMMARY)
    assert cache.get(("b",)) is None and cache.get(PlanSummaries.key(tf)) == SUMMARY
