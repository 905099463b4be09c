"""The common conditions both stacks derive from their controller (shared.api.readiness): ``observedGeneration``
and ``Ready``/``Reconciling``/``Stalled``, read the same whatever the backend.

No controller runs in this tier: the backing object's status is what its controller wrote in a recorded run
(tests/data/status, written onto the status subresource as the controller writes it), so each step is the
controller's own words about a generation of our choosing.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.contract.stack import JSON, Contract, Stack
from tests.recorded import load_recorded

#: Reason of ``Reconciling`` while the controller has not observed the current generation (kstatus' word).
NOT_OBSERVED = "LatestGenerationNotObserved"
#: The generation fields of a recorded status, rewritten to the generation the test says was finished.
GENERATION_FIELDS = ("observedGeneration", "lastAttemptedGeneration", "lastPlannedGeneration")


def common(app: JSON) -> tuple[Any, dict[str, tuple[str, str]]]:
    """(status.observedGeneration or None, {condition type: (status, reason)} for the three common ones)."""
    status = app.get("status") or {}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []
                  if c["type"] in ("Ready", "Reconciling", "Stalled")}
    return status.get("observedGeneration"), conditions


def finished(stack: Stack, generation: int) -> JSON:
    """The recorded status of a successfully finished run, as if it had been for ``generation``."""
    status: JSON = copy.deepcopy(load_recorded(stack.finished_status)["status"])
    for node in [status, *(status.get("conditions") or [])]:
        for field in GENERATION_FIELDS:
            if field in node:
                node[field] = generation
    return status


def test_a_new_application_is_reconciling_until_its_controller_observes_it(contract: Contract, stack: Stack) -> None:
    created = contract.create("unobserved", {"size": 1})
    assert created["metadata"]["generation"] == 1
    # -1: what the HelmRelease and Terraform CRDs default observedGeneration to until their controller's first run.
    assert common(created) == (-1, {"Ready": ("Unknown", NOT_OBSERVED), "Reconciling": ("True", NOT_OBSERVED),
                                      "Stalled": ("False", "NotStalled")}), created.get("status")
    assert common(contract.get("unobserved")) == common(created)


def test_a_finished_generation_is_ready_and_the_next_one_is_reconciling(contract: Contract, stack: Stack) -> None:
    contract.create("observed", {"size": 1})
    backing = contract.backing("observed") or {}
    backing["status"] = finished(stack, backing["metadata"]["generation"])
    code, body = contract.api.request("PUT", stack.backing_path("observed") + "/status", backing)
    assert code == 200, body
    app = contract.get("observed")
    assert common(app) == (1, {"Ready": ("True", common_ready_reason(backing)), "Reconciling": ("False", "Succeeded"),
                               "Stalled": ("False", "NotStalled")}), app["status"]

    contract.patch("observed", {"spec": {"size": 2}})
    app = contract.get("observed")
    assert app["metadata"]["generation"] == 2
    # The controller finished generation 1, not 2: still observed 1, working, and Ready is no longer known.
    assert common(app) == (1, {"Ready": ("Unknown", NOT_OBSERVED), "Reconciling": ("True", NOT_OBSERVED),
                               "Stalled": ("False", "NotStalled")}), app["status"]


def common_ready_reason(backing: JSON) -> str:
    """The controller's own ``Ready`` reason: a finished Application shows the controller's Ready as it is."""
    return str(next(c["reason"] for c in backing["status"]["conditions"] if c["type"] == "Ready"))
