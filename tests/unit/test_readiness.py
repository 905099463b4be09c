"""shared.api.readiness: a backend's report -> observedGeneration and Ready/Reconciling/Stalled that kstatus
reads with the backend's meaning.  The verdicts of the real kstatus on these conditions are checked in
tests/flux/test_kstatus.py; here each rule of the derivation, on plain data."""

from __future__ import annotations

from typing import Any

from shared.api.readiness import BackendReport, Signal, condition_signal, latest_transition, readiness

T0, T1 = "2026-11-26T10:00:00Z", "2026-11-26T11:00:00Z"
READY_TRUE = {"type": "Ready", "status": "True", "reason": "InstallSucceeded", "message": "installed",
              "lastTransitionTime": T1, "observedGeneration": 2}
READY_FALSE = {**READY_TRUE, "status": "False", "reason": "InstallFailed", "message": "the chart refused it"}


def report(observed: int | None, **fields: Any) -> BackendReport:
    return BackendReport(controller="a-controller", observed_generation=observed, **fields)


def view(generation: int | None, rep: BackendReport) -> dict[str, tuple[str, str]]:
    derived = readiness(generation, rep, since=T0)
    assert [c["type"] for c in derived.conditions] == ["Ready", "Reconciling", "Stalled"]
    return {c["type"]: (c["status"], c["reason"]) for c in derived.conditions}


def true_ones(generation: int | None, rep: BackendReport) -> list[str]:
    return [c["type"] for c in readiness(generation, rep).conditions if c["status"] == "True"]


def test_never_observed_has_no_observed_generation_and_is_reconciling() -> None:
    derived = readiness(1, report(None), since=T0)
    assert derived.observed_generation is None
    ready, reconciling, stalled = derived.conditions
    assert (reconciling["status"], reconciling["reason"]) == ("True", "LatestGenerationNotObserved")
    assert reconciling["message"] == "waiting for a-controller to observe generation 1"
    assert reconciling["lastTransitionTime"] == T0 and reconciling["observedGeneration"] == 1
    assert (ready["status"], stalled["status"]) == ("Unknown", "False")


def test_never_observed_keeps_the_backends_own_progress() -> None:
    working = Signal("Progressing", "installing", T1)
    assert view(1, report(None, reconciling=working))["Reconciling"] == ("True", "Progressing")


def test_a_newer_generation_hides_the_older_ready_and_any_stall() -> None:
    rep = report(1, ready={**READY_TRUE, "observedGeneration": 1}, stalled=Signal("RetriesExceeded", "gave up"))
    derived = readiness(2, rep, since=T0)
    assert derived.observed_generation == 1
    assert view(2, rep) == {"Ready": ("Unknown", "LatestGenerationNotObserved"),
                            "Reconciling": ("True", "LatestGenerationNotObserved"),
                            "Stalled": ("False", "NotStalled")}
    assert "has not finished generation 2 yet (last finished: 1)" in derived.conditions[1]["message"]


def test_the_crds_minus_one_is_kept_and_read_as_not_observed() -> None:
    """The HelmRelease and Terraform CRDs default status.observedGeneration to -1 until a first run ends."""
    derived = readiness(1, report(-1), since=T0)
    assert derived.observed_generation == -1
    assert derived.conditions[1]["message"] == "waiting for a-controller to observe generation 1"
    assert view(1, report(-1)) == view(1, report(None))


def test_a_minus_one_while_working_keeps_a_ready_written_for_this_generation() -> None:
    """While their first run is under way the controllers' conditions are already about the current
    generation, and observedGeneration is still -1."""
    progressing = {**READY_TRUE, "status": "Unknown", "reason": "Progressing", "observedGeneration": 2}
    derived = readiness(2, report(-1, ready=progressing, reconciling=Signal("Progressing", "installing")))
    assert derived.observed_generation == -1
    assert derived.conditions[0] == progressing
    assert true_ones(2, report(-1, ready=progressing, reconciling=Signal("Progressing", "installing"))) == [
        "Reconciling"]


def test_ready_true_on_the_current_generation_is_the_only_current_state() -> None:
    derived = readiness(2, report(2, ready=READY_TRUE), since=T0)
    assert derived.observed_generation == 2
    assert derived.conditions[0] == READY_TRUE
    assert view(2, report(2, ready=READY_TRUE)) == {"Ready": ("True", "InstallSucceeded"),
                                                   "Reconciling": ("False", "Succeeded"),
                                                   "Stalled": ("False", "NotStalled")}


def test_stalled_is_failed_with_ready_false_and_not_reconciling() -> None:
    stall = Signal("RetriesExceeded", "gave up after 3 attempts", T1)
    assert view(2, report(2, ready=READY_TRUE, stalled=stall)) == {
        "Ready": ("False", "RetriesExceeded"), "Reconciling": ("False", "Stalled"),
        "Stalled": ("True", "RetriesExceeded")}
    # the backend's own Ready False is kept as it wrote it
    assert readiness(2, report(2, ready=READY_FALSE, stalled=stall)).conditions[0] == READY_FALSE


def test_reconciling_wins_over_a_ready_true() -> None:
    rep = report(2, ready=READY_TRUE, reconciling=Signal("AwaitingApproval", "approve it with: kubectl ..."))
    assert view(2, rep)["Ready"] == ("True", "InstallSucceeded")
    assert view(2, rep)["Reconciling"] == ("True", "AwaitingApproval")
    assert true_ones(2, rep) == ["Ready", "Reconciling"]


def test_a_ready_false_the_backend_neither_retries_nor_gave_up_on_is_reconciling() -> None:
    """A controller that has not given up retries: Ready's own words become the reason kstatus reports."""
    derived = readiness(2, report(2, ready=READY_FALSE))
    reconciling = derived.conditions[1]
    assert (reconciling["status"], reconciling["reason"], reconciling["message"]) == (
        "True", "InstallFailed", "the chart refused it")
    assert reconciling["lastTransitionTime"] == T1


def test_observed_without_any_ready_is_reconciling() -> None:
    assert view(2, report(2)) == {"Ready": ("Unknown", "LatestGenerationNotObserved"),
                                  "Reconciling": ("True", "LatestGenerationNotObserved"),
                                  "Stalled": ("False", "NotStalled")}


def test_reconciling_and_stalled_are_never_true_together() -> None:
    for observed in (None, -1, 1, 2):
        for ready in (None, READY_TRUE, READY_FALSE):
            for working in (None, Signal("Progressing", "")):
                for stall in (None, Signal("RetriesExceeded", "")):
                    rep = report(observed, ready=ready, reconciling=working, stalled=stall)
                    assert {"Reconciling", "Stalled"} - set(true_ones(2, rep)), rep


def test_without_a_generation_messages_name_the_object() -> None:
    derived = readiness(None, report(None))
    assert derived.conditions[1]["message"] == "waiting for a-controller to observe the object"
    assert all("observedGeneration" not in c for c in derived.conditions[1:])


def test_latest_transition_and_condition_signal() -> None:
    assert latest_transition([{"lastTransitionTime": T0}, {"lastTransitionTime": T1}, {}], "x") == T1
    assert latest_transition([], "2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert latest_transition(None, None) is None
    assert condition_signal({"type": "Stalled", "status": "True", "reason": "R", "message": "m",
                             "lastTransitionTime": T1}) == Signal("R", "m", T1)
    assert condition_signal({"type": "Stalled", "status": "False"}) is None
    assert condition_signal(None) is None
