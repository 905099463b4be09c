"""Whether a kind-publishing object may be served: verdicts, name arbitration, the condition.

A server that publishes kinds from cluster objects must decide, for each object, whether its
kind is served, and tell the author why not.  The decision has to be a pure function of the
objects (so every replica and every restart agrees) and a broken object must only disable
itself.  This module holds the backend-agnostic parts of that decision: the :class:`Verdict`,
the schema check every published kind needs, deterministic arbitration between objects that
claim the same kind/plural/singular, and the ``Accepted`` condition written to their status.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.admission import CompiledSchema, compile_schema
from shared.schema.validation import parse_schema, schema_error

ACCEPTED = "Accepted"
INVALID_SCHEMA = "InvalidSchema"
KIND_CONFLICT = "KindConflict"

#: metav1.Condition caps messages at 32768 characters.
_MAX_MESSAGE = 32768


@dataclass(frozen=True)
class Verdict:
    """The outcome of acceptance; ``reason`` is a CamelCase condition reason."""

    accepted: bool
    reason: str
    message: str

    @classmethod
    def ok(cls, message: str = "the kind is served") -> Verdict:
        return cls(True, ACCEPTED, message)

    @classmethod
    def reject(cls, reason: str, message: str) -> Verdict:
        return cls(False, reason, message)


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class _Checked:
    problem: str | None
    #: The compiled ``x-kubernetes-validations`` rules; empty when there is a problem.
    rules: CompiledSchema


_NO_RULES = CompiledSchema({})


@functools.lru_cache(maxsize=512)
def _checked(text: str) -> _Checked:
    try:
        schema = parse_schema(text)
    except ValueError as exc:
        return _Checked(str(exc), _NO_RULES)
    problem = schema_error(schema)
    if problem is None and schema.get("type") != "object":
        problem = f'the top level of openAPISchema must have "type": "object", got {schema.get("type")!r}'
    if problem is not None:
        return _Checked(problem, _NO_RULES)
    rules, rule_errors = compile_schema(schema, "openAPISchema")
    if rule_errors:
        # As kube-apiserver refuses a CRD: every rule that cannot be used, by its schema path.
        return _Checked("; ".join(f"{error.path}: Invalid value: {error.message}" for error in rule_errors),
                        _NO_RULES)
    return _Checked(None, rules)


def spec_schema_problem(text: str) -> str | None:
    """Why ``text`` cannot be the schema of a kind's ``.spec``, or None.

    The schema must be a JSON object, a usable JSON schema, describe an object, and every
    ``x-kubernetes-validations`` rule in it must compile.  Results are cached by text:
    arbitration re-checks every competing object on each decision.
    """
    return _checked(text).problem


def spec_rules(text: str) -> CompiledSchema:
    """The compiled CEL rules of an acceptable schema, compiled once per schema text (none for a
    schema with a problem: its kind is not served)."""
    return _checked(text).rules


# --------------------------------------------------------------------------- arbitration

NameTriple = tuple[str, str, str]


@dataclass(frozen=True)
class Claim:
    """One object's claim on a (kind, plural, singular) triple, with its precedence data."""

    name: str
    names: NameTriple
    #: RFC 3339 ``metadata.creationTimestamp``; None sorts after every timestamp.
    created: str | None = None

    @property
    def precedence(self) -> tuple[int, datetime, str]:
        """Older objects win; equal timestamps are broken by object name."""
        if self.created:
            try:
                return (0, parse_time(self.created), self.name)
            except ValueError:
                pass
        return (1, datetime.max.replace(tzinfo=UTC), self.name)


def _tokens(names: NameTriple) -> set[str]:
    # kubectl resolves a kind by its lowercased name as well as by plural and singular, so any
    # overlap between the two sets makes a name ambiguous.
    kind, plural, singular = names
    return {t.lower() for t in (kind, plural, singular) if t}


def naming_conflict(name_triple: NameTriple, others: Iterable[Claim]) -> str | None:
    """A message when ``name_triple`` overlaps one of ``others`` (already accepted), else None."""
    mine = _tokens(name_triple)
    for other in others:
        clash = mine & _tokens(other.names)
        if clash:
            kind, plural, singular = other.names
            return (
                f"{', '.join(sorted(clash))} already served by {other.name!r} "
                f"(kind {kind}, plural {plural}, singular {singular})"
            )
    return None


def arbitrate(candidate: Claim, others: Iterable[tuple[Claim, bool]]) -> str | None:
    """Decide a name collision; a conflict message if ``candidate`` loses, else None.

    ``others`` pairs every other object's claim with whether it is valid apart from naming.
    Claims are taken in precedence order and one is granted when it is valid and does not
    overlap an already granted claim, so the result does not depend on the order objects are
    seen in, and an object that lost to an older one does not block a third.
    """
    granted: list[Claim] = []
    ordered = sorted(
        ((c, valid) for c, valid in others if c.name != candidate.name),
        key=lambda pair: pair[0].precedence,
    )
    for claim, valid in ordered:
        if claim.precedence >= candidate.precedence:
            break
        if valid and naming_conflict(claim.names, granted) is None:
            granted.append(claim)
    return naming_conflict(candidate.names, granted)


def decide(
    candidate: Claim,
    intrinsic: Verdict,
    others: Iterable[tuple[Claim, Callable[[], Verdict]]],
) -> Verdict:
    """Combine an object's own verdict with name arbitration against ``others``.

    ``others`` pairs each claim with a callable computing that object's own verdict; it is
    only called for objects that precede ``candidate`` and could collide with it.
    """
    if not intrinsic.accepted:
        return intrinsic
    mine = _tokens(candidate.names)
    # Only objects sharing a token with the candidate, directly or through a chain of older
    # objects, can affect the result; computing every verdict would be wasteful but correct.
    pairs = [(claim, check) for claim, check in others if claim.name != candidate.name]
    relevant = _connected(mine, [(c, c.precedence < candidate.precedence) for c, _ in pairs])
    evaluated = [(claim, check().accepted) for claim, check in pairs if claim.name in relevant]
    message = arbitrate(candidate, evaluated)
    if message is not None:
        return Verdict.reject(KIND_CONFLICT, message)
    return intrinsic


def _connected(seed: set[str], claims: Sequence[tuple[Claim, bool]]) -> set[str]:
    tokens = set(seed)
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for claim, older in claims:
            if not older or claim.name in names:
                continue
            if _tokens(claim.names) & tokens:
                names.add(claim.name)
                tokens |= _tokens(claim.names)
                changed = True
    return names


# --------------------------------------------------------------------------- condition


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 timestamp as Kubernetes writes it (``2024-05-01T10:00:00Z``)."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: datetime | str) -> str:
    """RFC 3339 with second precision and ``Z``, the form metav1.Time serializes to."""
    if isinstance(value, str):
        value = parse_time(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    verdict: Verdict,
    generation: int | None,
    previous_conditions: Iterable[Mapping[str, Any]] | None,
    now: datetime | str,
) -> dict[str, Any]:
    """The ``Accepted`` metav1.Condition for ``verdict``.

    ``lastTransitionTime`` is kept from the previous ``Accepted`` condition when its status
    did not change, so watchers can tell how long a kind has been (un)available.
    """
    return _condition(ACCEPTED, "True" if verdict.accepted else "False", verdict.reason, verdict.message,
                      generation, previous_conditions, now)


def _condition(kind: str, status: str, reason: str, message: str, generation: int | None,
               previous_conditions: Iterable[Mapping[str, Any]] | None, now: datetime | str) -> dict[str, Any]:
    transition = format_time(now)
    for prev in previous_conditions or ():
        if prev.get("type") == kind and prev.get("status") == status and prev.get("lastTransitionTime"):
            transition = str(prev["lastTransitionTime"])
            break
    out: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:_MAX_MESSAGE],
        "lastTransitionTime": transition,
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SERVED = "Served"
NOT_SERVED_YET = "NotServedYet"


def status_conditions(
    verdict: Verdict,
    served: bool,
    generation: int | None,
    previous_conditions: Iterable[Mapping[str, Any]] | None,
    now: datetime | str,
) -> list[dict[str, Any]]:
    """A definition's conditions: ``Accepted`` and the three kstatus reads (Flux's health checks, ``wait``).

    ``Ready`` is True only when the definition is accepted *and* its kind is ``served`` (registered in
    the running API server); a rejected definition is ``Stalled`` (kstatus ``Failed``): only its author
    can fix it, nothing is retried; an accepted one whose kind is not served yet is ``Reconciling``
    (``InProgress``).  With ``status.observedGeneration`` set to the generation decided on, kstatus also
    says ``InProgress`` until the reconciler has acted on a new generation.  Conditions of other types in
    ``previous_conditions`` are kept, in their order.
    """
    previous = list(previous_conditions or ())
    if not verdict.accepted:
        ready = ("False", verdict.reason, verdict.message)
        reconciling = ("False", verdict.reason, "not retried: the definition must change")
        stalled = ("True", verdict.reason, verdict.message)
    elif served:
        ready = ("True", SERVED, verdict.message)
        reconciling = ("False", SERVED, verdict.message)
        stalled = ("False", ACCEPTED, verdict.message)
    else:
        waiting = "accepted; the kind is not served yet"
        ready = ("False", NOT_SERVED_YET, waiting)
        reconciling = ("True", NOT_SERVED_YET, waiting)
        stalled = ("False", ACCEPTED, waiting)
    out: list[dict[str, Any]] = [dict(c) for c in previous]
    for new in (
        condition(verdict, generation, previous, now),
        _condition(READY, *ready, generation, previous, now),
        _condition(RECONCILING, *reconciling, generation, previous, now),
        _condition(STALLED, *stalled, generation, previous, now),
    ):
        out = set_condition(out, new)
    return out


def conditions_changed(previous: Iterable[Mapping[str, Any]] | None, new: Iterable[Mapping[str, Any]]) -> bool:
    """Whether writing ``new`` changes anything but times: a status write only when something did."""
    def key(conds: Iterable[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
                      for c in conds or ())
    return key(previous) != key(new)


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None, new: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``conditions`` with the one of ``new``'s type replaced (or appended), order kept."""
    out: list[dict[str, Any]] = []
    placed = False
    for cond in conditions or ():
        if cond.get("type") == new.get("type"):
            if not placed:
                out.append(dict(new))
                placed = True
        else:
            out.append(dict(cond))
    if not placed:
        out.append(dict(new))
    return out
