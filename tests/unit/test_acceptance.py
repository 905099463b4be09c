"""shared.acceptance: schema check, name arbitration and the Accepted condition."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from shared.service.acceptance import (
    Claim,
    Verdict,
    arbitrate,
    condition,
    conditions_changed,
    decide,
    format_time,
    naming_conflict,
    set_condition,
    spec_schema_problem,
    status_conditions,
)

T1 = "2024-01-01T00:00:00Z"
T2 = "2024-02-01T00:00:00Z"
T3 = "2024-03-01T00:00:00Z"


def test_spec_schema_problem() -> None:
    assert spec_schema_problem('{"type": "object", "properties": {}}') is None
    assert "not valid JSON" in (spec_schema_problem("{nope") or "")
    assert "must be a JSON object" in (spec_schema_problem("[]") or "")
    assert '"type": "object"' in (spec_schema_problem('{"type": "string"}') or "")
    assert '"type": "object"' in (spec_schema_problem("{}") or "")
    assert "not a valid JSON schema" in (spec_schema_problem('{"type": "object", "properties": 3}') or "")


def test_naming_conflict_any_overlap() -> None:
    older = [Claim("pg", ("Postgres", "postgreses", "postgres"), T1)]
    assert naming_conflict(("Redis", "redises", "redis"), older) is None
    assert naming_conflict(("Postgres", "pgs", "pg"), older) is not None
    assert naming_conflict(("Pg", "postgreses", "pg"), older) is not None
    assert naming_conflict(("Pg", "pgs", "postgres"), older) is not None
    # kubectl matches kinds case-insensitively against plural/singular too
    message = naming_conflict(("Other", "others", "postgres"), older)
    assert message is not None and "'pg'" in message and "postgres" in message


def test_naming_conflict_same_plural_and_singular_within_one_object_is_fine() -> None:
    assert naming_conflict(("ExternalDNS", "externaldns", "externaldns"), []) is None


def test_arbitrate_older_wins_then_name() -> None:
    a = Claim("a", ("Db", "dbs", "db"), T2)
    b = Claim("b", ("Db", "dbs", "db"), T1)
    assert arbitrate(a, [(b, True)]) is not None
    assert arbitrate(b, [(a, True)]) is None
    same_time_x = Claim("x", ("Db", "dbs", "db"), T1)
    same_time_y = Claim("y", ("Db", "dbs", "db"), T1)
    assert arbitrate(same_time_x, [(same_time_y, True)]) is None
    assert arbitrate(same_time_y, [(same_time_x, True)]) is not None


def test_arbitrate_ignores_invalid_and_self() -> None:
    mine = Claim("a", ("Db", "dbs", "db"), T2)
    assert arbitrate(mine, [(Claim("b", ("Db", "dbs", "db"), T1), False)]) is None
    assert arbitrate(mine, [(Claim("a", ("Db", "dbs", "db"), T1), True)]) is None


def test_arbitrate_chain_loser_does_not_block() -> None:
    # a (oldest) beats b on the kind; b lost, so b's plural does not block c.
    a = Claim("a", ("Db", "dbs", "db"), T1)
    b = Claim("b", ("Db", "stores", "store"), T2)
    c = Claim("c", ("Store", "stores", "store"), T3)
    assert arbitrate(b, [(a, True), (c, True)]) is not None
    assert arbitrate(c, [(a, True), (b, True)]) is None


def test_arbitrate_missing_timestamp_sorts_last() -> None:
    new = Claim("a", ("Db", "dbs", "db"), None)
    old = Claim("z", ("Db", "dbs", "db"), T3)
    assert arbitrate(new, [(old, True)]) is not None
    assert arbitrate(old, [(new, True)]) is None


def test_decide_only_evaluates_relevant_peers() -> None:
    calls: list[str] = []

    def check(name: str, ok: bool) -> Callable[[], Verdict]:
        def run() -> Verdict:
            calls.append(name)
            return Verdict.ok() if ok else Verdict.reject("InvalidSchema", "bad")

        return run

    mine = Claim("c", ("Db", "dbs", "db"), T3)
    peers = [
        (Claim("a", ("Db", "dbs", "db"), T1), check("a", False)),
        (Claim("b", ("Other", "others", "other"), T1), check("b", True)),
        (Claim("d", ("Db", "dbs", "db"), "2025-01-01T00:00:00Z"), check("d", True)),
    ]
    verdict = decide(mine, Verdict.ok("served"), peers)
    assert verdict == Verdict.ok("served")
    assert calls == ["a"]


def test_decide_keeps_intrinsic_rejection() -> None:
    bad = Verdict.reject("InvalidSchema", "nope")
    assert decide(Claim("a", ("A", "as", "a")), bad, []) is bad


def test_decide_conflict() -> None:
    mine = Claim("c", ("Db", "dbs", "db"), T2)
    other = Claim("a", ("Db", "dbs", "db"), T1)
    verdict = decide(mine, Verdict.ok(), [(other, Verdict.ok)])
    assert not verdict.accepted and verdict.reason == "KindConflict"
    assert "'a'" in verdict.message


def test_condition_new_and_transition() -> None:
    now = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
    cond = condition(Verdict.ok("fine"), 3, None, now)
    assert cond == {
        "type": "Accepted",
        "status": "True",
        "reason": "Accepted",
        "message": "fine",
        "lastTransitionTime": "2024-05-01T10:00:00Z",
        "observedGeneration": 3,
    }
    later = condition(Verdict.ok("still fine"), 4, [cond], "2024-06-01T00:00:00Z")
    assert later["lastTransitionTime"] == "2024-05-01T10:00:00Z"
    assert later["observedGeneration"] == 4 and later["message"] == "still fine"
    flipped = condition(Verdict.reject("KindConflict", "taken"), 5, [later], "2024-06-01T00:00:00Z")
    assert flipped["status"] == "False" and flipped["lastTransitionTime"] == "2024-06-01T00:00:00Z"
    assert flipped["reason"] == "KindConflict"


def test_condition_without_generation_and_long_message() -> None:
    cond = condition(Verdict.reject("InvalidSchema", "x" * 40000), None, [], T1)
    assert "observedGeneration" not in cond and len(cond["message"]) == 32768


def test_set_condition_replaces_in_place() -> None:
    ready = {"type": "Ready", "status": "True"}
    old = {"type": "Accepted", "status": "False"}
    new = {"type": "Accepted", "status": "True"}
    assert set_condition([ready, old], new) == [ready, new]
    assert set_condition(None, new) == [new]
    assert set_condition([ready], new) == [ready, new]


def test_format_time() -> None:
    assert format_time("2024-05-01T10:00:00+02:00") == "2024-05-01T08:00:00Z"
    assert format_time(datetime(2024, 5, 1, 10, 0, 0)) == "2024-05-01T10:00:00Z"


def kstatus_view(conditions: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in conditions}


def test_an_accepted_and_served_definition_is_ready() -> None:
    conds = status_conditions(Verdict.ok("the kind Db is served"), True, 3, None, T1)
    assert [c["type"] for c in conds] == ["Accepted", "Ready", "Reconciling", "Stalled"]
    assert kstatus_view(conds) == {"Accepted": ("True", "Accepted"), "Ready": ("True", "Served"),
                                   "Reconciling": ("False", "Served"), "Stalled": ("False", "Accepted")}
    assert all(c["observedGeneration"] == 3 and c["lastTransitionTime"] == T1 for c in conds)


def test_an_accepted_definition_not_served_yet_is_reconciling() -> None:
    conds = status_conditions(Verdict.ok(), False, 3, None, T1)
    assert kstatus_view(conds)["Ready"] == ("False", "NotServedYet")
    assert kstatus_view(conds)["Reconciling"] == ("True", "NotServedYet")
    assert kstatus_view(conds)["Stalled"][0] == "False"


def test_a_rejected_definition_is_stalled_with_the_reason() -> None:
    conds = status_conditions(Verdict.reject("KindConflict", "dbs already served by 'a'"), False, 4, None, T1)
    assert kstatus_view(conds) == {"Accepted": ("False", "KindConflict"), "Ready": ("False", "KindConflict"),
                                   "Reconciling": ("False", "KindConflict"), "Stalled": ("True", "KindConflict")}
    stalled = next(c for c in conds if c["type"] == "Stalled")
    assert stalled["message"] == "dbs already served by 'a'"


def test_definition_conditions_keep_others_order_and_unchanged_transitions() -> None:
    first = status_conditions(Verdict.ok(), True, 1, [{"type": "Custom", "status": "True"}], T1)
    assert [c["type"] for c in first] == ["Custom", "Accepted", "Ready", "Reconciling", "Stalled"]
    again = status_conditions(Verdict.ok(), True, 2, first, T2)
    assert {c["type"]: c.get("lastTransitionTime") for c in again if c["type"] != "Custom"} == dict.fromkeys(
        ("Accepted", "Ready", "Reconciling", "Stalled"), T1)
    assert conditions_changed(first, again)  # the generation moved on
    assert not conditions_changed(again, status_conditions(Verdict.ok(), True, 2, again, T2))
    flipped = status_conditions(Verdict.reject("InvalidSchema", "bad"), False, 3, again, T2)
    assert next(c for c in flipped if c["type"] == "Stalled")["lastTransitionTime"] == T2
