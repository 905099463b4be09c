"""An object's ``observedGeneration`` and ``Ready``/``Reconciling``/``Stalled`` conditions, read as kstatus reads them.

GitOps tools decide whether an object is healthy with kstatus (Flux's ``wait: true`` and health checks,
cli-utils' appliers): for a custom kind it answers ``Terminating`` when ``metadata.deletionTimestamp``
is set; ``InProgress`` when ``status.observedGeneration`` is present and differs from
``metadata.generation``; ``InProgress`` when a ``Reconciling`` condition is True; ``Failed`` when a
``Stalled`` condition is True; then ``Current`` when ``Ready`` is True, ``InProgress`` when it is False
or Unknown, and ``Current`` when there is no ``Ready`` at all.  An Application is stored as a backing
object whose controller (helm-controller, tofu-controller) writes that object's status, and the
Application's ``metadata.generation`` *is* the backing object's generation; so the backing
``observedGeneration`` compares directly with it.

:func:`readiness` turns what a backend said into conditions that give kstatus the backend's meaning,
whatever rules kstatus applies first.  Each stack reads its controller's conditions into a
:class:`BackendReport` (which of them mean "still working" and which "needs a human" is the stack's
decision); everything below is the same for every backend:

- the controller has not observed the object: no ``observedGeneration`` when the backing object has no
  status at all (nothing was observed, and a made-up number would be a lie), or the ``-1`` that the
  HelmRelease and Terraform CRDs default it to until their controller finishes a first run (kept: it
  says the same, and kstatus reads it as ``InProgress`` too); ``Reconciling`` True in both cases, so
  kstatus says ``InProgress`` even where it skips its generation check for want of the field;
- the controller has not finished the current generation (its ``observedGeneration`` differs):
  ``Reconciling`` True, never ``Stalled``;
- in both cases ``Ready`` is the controller's only when it wrote it for this generation, else Unknown;
- the controller finished it and reports a stall: ``Stalled`` True (kstatus ``Failed``), ``Ready`` False;
- it reports work in progress: ``Reconciling`` True (``InProgress``);
- it reports ``Ready`` True: ``Current``;
- any other ``Ready`` (False, Unknown or none) with neither: ``Reconciling`` True with ``Ready``'s reason
  and message, since a controller that has not given up retries.

``Reconciling`` and ``Stalled`` are never True together: kstatus takes whichever comes first in the
list, and the verdict must not depend on the order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.bodies import JSON

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"

#: Reason of ``Reconciling`` while the controller has not observed the current generation (kstatus' own word).
NOT_OBSERVED = "LatestGenerationNotObserved"
#: Reasons of the conditions that are False because nothing is wrong.
SUCCEEDED = "Succeeded"
NOT_STALLED = "NotStalled"


@dataclass(frozen=True)
class Signal:
    """One thing the backend said: a CamelCase reason, a message, and since when (RFC 3339) if known."""

    reason: str
    message: str
    since: str | None = None


@dataclass(frozen=True)
class BackendReport:
    """What a stack read from its backing object, in the terms :func:`readiness` decides on."""

    #: Who works on the object, named in the messages ("helm-controller").
    controller: str
    #: The backing object's ``status.observedGeneration``; None when the controller has written none.
    observed_generation: int | None
    #: The controller's ``Ready`` condition as it wrote it, None when absent.
    ready: Mapping[str, Any] | None = None
    #: The controller works on the object (installing, planning, waiting for an approval, retrying).
    reconciling: Signal | None = None
    #: The controller gave up, or the error needs a human: retrying as it is will not fix it.
    stalled: Signal | None = None


@dataclass(frozen=True)
class Readiness:
    """The derived ``status.observedGeneration`` (None: leave it out) and the three conditions, in order."""

    observed_generation: int | None
    conditions: tuple[JSON, ...]


def readiness(generation: int | None, report: BackendReport, *, since: str | None = None) -> Readiness:
    """``observedGeneration`` and ``Ready``, ``Reconciling``, ``Stalled`` for an object of ``generation``.

    ``since`` is the time a derived condition says it last changed when no signal carries one (a
    projection is a pure function of the stored object, so it cannot read a clock); the stacks pass the
    latest transition their controller recorded, else the object's creation.
    """
    observed = report.observed_generation
    ready = report.ready
    unseen = observed is None or observed < 0
    if unseen or (generation is not None and observed != generation):
        waiting = (f"waiting for {report.controller} to observe {_generation(generation)}" if unseen else
                   f"{report.controller} has not finished {_generation(generation)} yet (last finished: {observed})")
        working = report.reconciling or Signal(NOT_OBSERVED, waiting, since)
        return Readiness(observed, _conditions(report, generation, _unknown_ready(ready, working, generation, since),
                                               working, None, since))
    if report.stalled is not None:
        failed = dict(ready) if ready is not None and ready.get("status") == "False" else _condition(
            READY, "False", report.stalled, generation, since)
        return Readiness(observed, _conditions(report, generation, failed, None, report.stalled, since))
    if report.reconciling is not None:
        shown = dict(ready) if ready is not None else _condition(READY, "Unknown", report.reconciling,
                                                                 generation, since)
        return Readiness(observed, _conditions(report, generation, shown, report.reconciling, None, since))
    if ready is not None and ready.get("status") == "True":
        return Readiness(observed, _conditions(report, generation, dict(ready), None, None, since))
    retrying = Signal(str((ready or {}).get("reason") or NOT_OBSERVED),
                      str((ready or {}).get("message") or f"{report.controller} reports no Ready condition"),
                      _text((ready or {}).get("lastTransitionTime")) or since)
    shown = dict(ready) if ready is not None else _condition(READY, "Unknown", retrying, generation, since)
    return Readiness(observed, _conditions(report, generation, shown, retrying, None, since))


def _unknown_ready(ready: Mapping[str, Any] | None, working: Signal, generation: int | None,
                   since: str | None) -> JSON:
    """The controller's ``Ready`` when it was written for ``generation``, else Unknown with ``working``'s words."""
    if ready is not None and generation is not None and ready.get("observedGeneration") == generation:
        return dict(ready)
    return _condition(READY, "Unknown", working, generation, since)


def _conditions(report: BackendReport, generation: int | None, ready: JSON, reconciling: Signal | None,
                stalled: Signal | None, since: str | None) -> tuple[JSON, ...]:
    done = Signal(SUCCEEDED, f"{report.controller} finished {_generation(generation)}", since) if stalled is None \
        else Signal(STALLED, f"{report.controller} does not move on without a human (see Stalled)", stalled.since)
    fine = Signal(NOT_STALLED, f"{report.controller} reports nothing that needs a human", since)
    return (
        ready,
        _condition(RECONCILING, "True", reconciling, generation, since) if reconciling is not None
        else _condition(RECONCILING, "False", done, generation, since),
        _condition(STALLED, "True", stalled, generation, since) if stalled is not None
        else _condition(STALLED, "False", fine, generation, since),
    )


def _condition(kind: str, status: str, signal: Signal, generation: int | None, since: str | None) -> JSON:
    out: JSON = {"type": kind, "status": status, "reason": signal.reason, "message": signal.message}
    when = signal.since or since
    if when:
        out["lastTransitionTime"] = when
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def _generation(generation: int | None) -> str:
    return "the object" if generation is None else f"generation {generation}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def latest_transition(conditions: Any, fallback: Any = None) -> str | None:
    """The latest ``lastTransitionTime`` among ``conditions`` (RFC 3339 strings compare in time order), else
    ``fallback`` when it is a string: the ``since`` a stack passes to :func:`readiness`."""
    times = [c["lastTransitionTime"] for c in conditions or () if isinstance(c, dict)
             and isinstance(c.get("lastTransitionTime"), str)]
    return max(times) if times else _text(fallback)


def condition_signal(condition: Mapping[str, Any] | None) -> Signal | None:
    """A controller's condition that is True, as a :class:`Signal`; None when absent or not True."""
    if condition is None or condition.get("status") != "True":
        return None
    return Signal(str(condition.get("reason") or condition.get("type") or ""), str(condition.get("message") or ""),
                  _text(condition.get("lastTransitionTime")))
