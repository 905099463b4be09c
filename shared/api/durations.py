"""Flux/Kubernetes durations (``10m``, ``1h30m``, ``500ms``) in the canonical form Go prints."""

from __future__ import annotations

import functools
import re
from fractions import Fraction

DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_NS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


# Pure, exact (Fraction arithmetic) and slow: a rollout renders the same few texts for every instance.
@functools.lru_cache(maxsize=256)
def go_duration(text: str) -> str:
    """Render a Flux duration the way Go's ``time.Duration.String`` does (``15m`` → ``15m0s``).

    Objects written through ``metav1.Duration`` say ``10m0s``; normalising keeps emitted objects
    identical to those and lets a reconciler see ``10m`` and ``10m0s`` as equal.  Text that is
    not a duration raises ``ValueError``.
    """
    if not DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration like 10m, 1h30m or 500ms")
    total = sum(Fraction(num) * _UNIT_NS[unit] for num, unit in _DURATION_PART.findall(text))
    ns = int(total)
    if ns == 0:
        return "0s"
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if ns >= size:
                return _decimal(ns, size) + unit
    hours, rest = divmod(ns, _UNIT_NS["h"])
    minutes, rest = divmod(rest, _UNIT_NS["m"])
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return out + _decimal(rest, 10**9) + "s"


def _decimal(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")
