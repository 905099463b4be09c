"""The CEL runtime: one environment per set of variables, compile once, evaluate with a bounded cost.

Library choice: ``cel-expr-python``, the Python binding of Google's C++ CEL runtime (the runtime
that, with cel-go, defines the language). Compared on 27 rules of the kinds CRD authors write
(transition rules, cross-field rules, macros, the strings/optional/bindings/math extensions, runtime
errors) against ``cel-python`` (``celpy``, pure Python) and ``common-expression-language`` (a binding
of the Rust runtime):

=============================  =========  =========================  =====================
library                        correct    eval, one 3-clause rule    comprehension budget
=============================  =========  =========================  =====================
cel-expr-python 0.1.3          27 / 27    ~25 µs                     yes (10,000 iterations)
cel-python 0.5.0               17 / 27    ~12,500 µs                 no
common-expression-language     17 / 27    ~210 µs                    no
=============================  =========  =========================  =====================

The two others lack the strings extension (``lowerAscii``, ``split``, ``format``...), ``cel.bind``
and the math functions that Kubernetes rules use, and neither stops a runaway comprehension.

The cost bound: the C++ runtime stops an evaluation after 10,000 comprehension iterations (the
binding fixes that budget; it is not configurable). Everything else an expression does is linear in
the size of its input, which the server already caps, and the regular expressions are RE2 (linear).
kube-apiserver's own bound is a cost estimate (1,000,000 per call), so a rule that iterates over
more than 10,000 elements fails here where kube-apiserver could still accept it; such a rule is
reported exactly as kube-apiserver reports a rule over its budget.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.admission import library

#: Binding names for an ``optionalOldSelf`` rule: the rule sees ``oldSelf`` as an optional built
#: from these, because the binding cannot take an optional value from Python directly.
_OLD_VALUE = "__agl_old_value__"
_HAS_OLD = "__agl_has_old__"

_BUDGET_EXCEEDED = "Iteration budget exceeded"


class CompileError(Exception):
    """An expression that does not parse or type-check; the message is the compiler's."""


class EvaluationError(Exception):
    """An expression that failed at run time (missing key, no overload, a library error)."""


class BudgetExceeded(EvaluationError):
    """An evaluation stopped by the comprehension budget."""


@dataclass(frozen=True)
class Program:
    """A compiled expression and the source it came from."""

    source: str
    expression: Any
    optional_old_self: bool = False


@functools.cache
def _environment(variables: frozenset[str]) -> Any:
    # Building an environment costs milliseconds; compiling in a built one costs microseconds.
    # The runtime is imported here, with the first expression: it is about 20 MiB resident, and a
    # service whose definitions and policies have no CEL never needs it.
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

    declared = {name: cel.Type.DYN for name in variables}
    if _OLD_VALUE in variables:
        declared[_HAS_OLD] = cel.Type.BOOL
    return cel.NewEnv(
        variables=declared,
        extensions=[
            ext_strings.ExtStrings(),
            ext_optional.ExtOptional(),
            ext_bindings.ExtBindings(),
            ext_math.ExtMath(),
            ext_encoders.ExtEncoders(),
        ],
        functions=library.declarations(),
    )


def _compile(source: str, variables: frozenset[str]) -> Any:
    try:
        return _environment(variables).compile(source)
    except RuntimeError as exc:
        raise CompileError(_compiler_message(str(exc))) from None


def _compiler_message(text: str) -> str:
    # "INVALID_ARGUMENT: ERROR: <input>:1:5: ... [INVALID_ARGUMENT]" -> "ERROR: <input>:1:5: ..."
    text = text.removeprefix("INVALID_ARGUMENT: ").strip()
    return text.removesuffix("[INVALID_ARGUMENT]").rstrip()


def compile_expression(source: str, variables: frozenset[str], *, optional_old_self: bool = False,
                       conversion: str = "") -> Program:
    """Compile ``source`` with every name in ``variables`` bound to a dynamically typed value.

    With ``optional_old_self`` the expression sees ``oldSelf`` as ``optional(dyn)``, as an
    ``optionalOldSelf`` rule does in kube-apiserver. ``conversion`` (``timestamp`` or ``duration``)
    makes ``self`` and ``oldSelf`` that type, as kube-apiserver types a string with
    ``format: date-time``/``date`` or ``duration``: the binding takes only plain values in, so the
    conversion is done by CEL itself, around the rule.
    """
    compiled = _compile(source, variables)
    if not optional_old_self and not conversion:
        return Program(source, compiled)
    # Compiled once as written so that syntax errors point into the rule itself, then wrapped.
    wrapped, hidden = source, variables

    def converted(name: str) -> str:
        return f"{conversion}({name})" if conversion else name

    if optional_old_self:
        hidden = (hidden - {"oldSelf"}) | {_OLD_VALUE}
        old = f"{_HAS_OLD} ? optional.of({converted(_OLD_VALUE)}) : optional.none()"
        wrapped = f"cel.bind(oldSelf, {old}, {wrapped})"
    elif conversion and uses_variable(source, variables, "oldSelf"):
        wrapped = f"cel.bind(oldSelf, {converted('oldSelf')}, {wrapped})"
    if conversion:
        wrapped = f"cel.bind(self, {converted('self')}, {wrapped})"
    return Program(source, _compile(wrapped, frozenset(hidden)), optional_old_self=optional_old_self)


def result_type(program: Program) -> str:
    """The static result type (``bool``, ``string``, ``dyn``...) of a compiled expression."""
    name: str = program.expression.return_type().name()
    return name.lower()


def uses_variable(source: str, variables: frozenset[str], name: str) -> bool:
    """Whether ``source`` refers to the variable ``name`` (it compiles only when ``name`` is declared)."""
    try:
        _compile(source, variables - {name})
    except CompileError:
        return True
    return False


def evaluate(program: Program, bindings: Mapping[str, Any]) -> Any:
    """Evaluate ``program``; ``oldSelf`` absent from ``bindings`` means "no old value"."""
    data = dict(bindings)
    if program.optional_old_self:
        data[_HAS_OLD] = "oldSelf" in data
        data[_OLD_VALUE] = data.pop("oldSelf", None)
    try:
        value = program.expression.eval(data=data)
    except RuntimeError as exc:
        if _BUDGET_EXCEEDED in str(exc):
            raise BudgetExceeded(str(exc)) from None
        raise EvaluationError(_runtime_message(str(exc))) from None
    if value.type() == _cel().Type.ERROR:
        raise EvaluationError(_runtime_message(str(value.value())))
    return _plain(value.plain_value())


def _cel() -> Any:
    """The CEL runtime module, loaded by :func:`_environment` before any program exists."""
    from cel_expr_python import cel

    return cel


def _plain(value: Any) -> Any:
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _runtime_message(text: str) -> str:
    """The C++ runtime's error text, worded as cel-go (kube-apiserver's runtime) words it."""
    for prefix in ("NOT_FOUND: ", "UNKNOWN: ", "INVALID_ARGUMENT: ", "OUT_OF_RANGE: ", "INTERNAL: "):
        text = text.removeprefix(prefix)
    if text.startswith("Key not found in map : "):
        return "no such key: " + text.removeprefix("Key not found in map : ").strip('"')
    if text.startswith("No matching overloads found"):
        return "no such overload"
    return text
