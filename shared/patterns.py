"""Regular expressions read the way kube-apiserver reads them: Go's ``regexp``, through RE2.

A CRD's ``pattern`` and CEL's ``matches``/``find`` are Go regular expressions.  Python's ``re`` reads
the same text differently in ways a user can hit: ``$`` also matches before a final newline, ``\\d``,
``\\w`` and ``\\s`` take any Unicode digit, letter or space, ``[[:alpha:]]`` is no class at all, and
lookarounds and back-references compile where Go refuses them.  RE2 is the engine Go's package follows
(same syntax, same ASCII Perl classes, same anchors), so a pattern compiled here accepts and rejects what
kube-apiserver does.  Compiled patterns are kept: a definition's handful of patterns is matched on every
write.

RE2's Python binding costs 10-20 µs a search (it maps byte offsets back to characters for a match object
nobody reads here), where ``re`` costs well under one.  Most schema patterns are plain: literals, classes,
groups, repeats and anchors, which mean the same in both engines once ``$`` is written ``\\Z``.  :func:`matcher`
gives such a pattern to ``re`` and every other one to RE2.  No library translates Go syntax to Python's, so
:func:`_as_python` is written here, and conservatively: anything it does not know to mean the same goes to RE2.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

__all__ = ["Search", "compiled", "matcher", "pattern_error", "search"]

#: A search: the match (truthy) where the pattern matches the text, else None.
Search = Callable[[str], object]

#: Escapes of punctuation (a literal in both engines) and the control characters both spell alike.
_SAME_ESCAPES = frozenset("\\.^$*+?()[]{}|/-#&~ !\"',:;<=>@_`%ntrf")
#: A counted repeat both engines read alike: ``{n}``, ``{n,}``, ``{n,m}`` (Python also reads ``{,m}``; Go not).
_REPEAT = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``ValueError`` saying why when Go would refuse it too."""
    import re2  # here, on the first pattern, not in every start-up

    if _any_byte_escape(pattern):
        raise ValueError(f"error parsing regexp {pattern!r}: invalid escape sequence: \\C")
    options = re2.Options()
    options.log_errors = False  # the error is raised (and reported by the caller), not logged by RE2
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"error parsing regexp {pattern!r}: {reason}") from None


def _any_byte_escape(pattern: str) -> bool:
    """Whether ``pattern`` uses ``\\C`` (any byte), the one escape RE2 has and Go's syntax refuses."""
    escaped = False
    for char in pattern:
        if escaped and char == "C":
            return True
        escaped = not escaped and char == "\\"
    return False


def pattern_error(pattern: str) -> str | None:
    """Why ``pattern`` is no regular expression kube-apiserver accepts, or None."""
    try:
        compiled(pattern)
    except ValueError as exc:
        return str(exc)
    return None


@functools.lru_cache(maxsize=1024)
def matcher(pattern: str) -> Search:
    """The search of ``pattern`` (unanchored, as a schema's ``pattern``); raises ``ValueError`` as
    :func:`compiled` does."""
    engine = compiled(pattern)
    same = _as_python(pattern)
    if same is not None:
        try:
            return re.compile(same).search
        except re.error:
            pass  # RE2 reads it; Python's parser does not: RE2 answers
    found: Search = engine.search
    return found


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text``."""
    return matcher(pattern)(text) is not None


def _as_python(pattern: str) -> str | None:
    """``pattern`` written for Python's ``re`` with Go's meaning, or None where this cannot tell it is the same.

    Known to differ, and so left to RE2: Perl and Unicode classes (``\\d``, ``\\pL``), POSIX classes, flags,
    ``\\z``, ``{,m}``, and set operators Python warns it will read otherwise.  ``$`` outside a class is the end
    of the text in Go (there are no flags here to make it multi-line), which Python spells ``\\Z``.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escaped = pattern[i + 1:i + 2]
            if not escaped or escaped not in _SAME_ESCAPES:
                return None
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if char == "[" or pattern[i:i + 2] in ("&&", "~~", "||", "--"):
                return None
            if char == "]":
                in_class = False
        elif char == "[":
            start = i + 2 if pattern[i + 1:i + 2] == "^" else i + 1
            if pattern[start:start + 1] in ("]", ""):
                return None  # a leading "]" and an unclosed class: let RE2 read them
            in_class = True
            out.append(pattern[i:start])
            i = start
            continue
        elif char == "$":
            out.append("\\Z")
            i += 1
            continue
        elif char == "(" and pattern[i + 1:i + 2] == "?":
            if pattern[i + 2:i + 3] != ":":
                return None
        elif char == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is None:
                return None
            out.append(repeat.group(0))
            i = repeat.end()
            continue
        out.append(char)
        i += 1
    return None if in_class else "".join(out)
