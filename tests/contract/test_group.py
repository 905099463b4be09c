"""Everything a user sees names the group the service serves: answers, lists, watch events, Status errors,
Events and discovery.

Each stack is handed its group once (``app.py``) and passes it down; a module that named a group of its
own would show here as a wrong ``apiVersion`` or ``details.group`` on one of these surfaces.
"""

from __future__ import annotations

import json
import urllib.request

from tests.contract.stack import KIND, PLURAL, Contract, Stack
from tests.kube import wait_for


def _watched(contract: Contract, query: str) -> list[dict[str, object]]:
    """The objects of the watch events a watch with ``query`` streams until its timeoutSeconds ends it."""
    url = f"{contract.api.cluster.server}{contract.stack.collection}?watch=1&{query}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30, context=contract.api.ctx) as response:
        lines = response.read().decode().splitlines()
    return [json.loads(line)["object"] for line in lines if line.strip()]


def test_answers_lists_and_watch_events_name_the_served_group(contract: Contract, stack: Stack) -> None:
    created = contract.create("grouped", {"size": 1}, labels={"batch": "grouped"})
    assert created["apiVersion"] == stack.api_version, created
    contract.patch("grouped", {"spec": {"size": 2}})
    code, got = contract.api.request("GET", stack.path("grouped"))
    assert code == 200 and (got["apiVersion"], got["kind"]) == (stack.api_version, KIND), got
    code, listed = contract.list_apps("labelSelector=batch%3Dgrouped")
    assert code == 200 and listed["apiVersion"] == stack.api_version, listed
    assert [(i["apiVersion"], i["metadata"]["name"]) for i in listed["items"]] == [(stack.api_version, "grouped")]
    objects = _watched(contract, f"labelSelector=batch%3Dgrouped&timeoutSeconds=2"
                                 f"&resourceVersion={created['metadata']['resourceVersion']}")
    assert objects and all(o["apiVersion"] == stack.api_version for o in objects), objects


def test_status_errors_name_the_served_group(contract: Contract, stack: Stack) -> None:
    missing = contract.refused("GET", stack.path("nowhere"), None, 404, "NotFound")
    assert (missing["details"]["group"], missing["details"]["kind"]) == (stack.group, PLURAL), missing
    contract.create("grouped-twice", {"size": 1})
    exists = contract.refused("POST", stack.collection, stack.manifest("grouped-twice", {"size": 1}), 409,
                              "AlreadyExists")
    assert (exists["details"]["group"], exists["details"]["kind"]) == (stack.group, PLURAL), exists
    invalid = contract.refused("POST", stack.collection, stack.manifest("grouped-bad", {"size": 0}), 422, "Invalid")
    assert (invalid["details"]["group"], invalid["details"]["kind"]) == (stack.group, KIND), invalid
    code, deleted = contract.api.request("DELETE", stack.path("grouped-twice"))
    assert code == 200 and deleted["details"]["group"] == stack.group, deleted


def test_events_and_discovery_name_the_served_group(contract: Contract, stack: Stack) -> None:
    contract.create("grouped-events", {"size": 1})
    contract.patch("grouped-events", {"spec": {"size": 2}})  # a create records no Event; an update does
    updated = wait_for(lambda: next((e for e in contract.events_of("grouped-events", stack.namespace)
                                     if e["reason"] == "Updated"), None), "the Updated event")
    assert (updated["involvedObject"]["apiVersion"], updated["involvedObject"]["kind"]) == (stack.api_version, KIND)
    code, resources = contract.api.request("GET", f"/apis/{stack.api_version}")
    assert code == 200 and resources["groupVersion"] == stack.api_version, resources
    assert PLURAL in [r["name"] for r in resources["resources"]], resources
    code, groups = contract.api.request("GET", "/apis")
    assert code == 200
    served = next(g for g in groups["groups"] if g["name"] == stack.group)
    assert served["preferredVersion"]["groupVersion"] == stack.api_version, served
