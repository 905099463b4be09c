"""Evaluate compiled schema rules on create and update, with kube-apiserver's semantics and causes.

* ``self`` is bound at every node that carries rules: object properties, map values, list items.
* A transition rule (one that refers to ``oldSelf``) runs only on update, and only where an old value
  correlates with the new one: the same property, the same map key, or the same item of an
  ``x-kubernetes-list-type: map`` list (by its keys). With ``optionalOldSelf`` it runs everywhere,
  seeing ``oldSelf`` as an optional that is empty where nothing correlates. ``set`` and ``map``
  lists compare regardless of order there.
* Ratcheting: on update, a rule that does not refer to ``oldSelf`` is not checked where the value
  is unchanged, so an object that predates a rule can still be updated elsewhere.
* A rule that fails gives a cause as kube-apiserver's ``field.Error`` for the rule's ``reason``, at
  the node's path (or the rule's ``fieldPath`` below it), with the rule's message.

* Cost: each evaluation is bounded by the runtime's iteration budget
  (:mod:`~shared.admission.expressions`) and all rules of one request share a wall-clock budget;
  either one exhausted stops the remaining rules with kube-apiserver's budget causes.

Call it once the schema accepted the object's types, as kube-apiserver does: a type error
(``FieldValueTypeInvalid``) keeps the rules from running; other schema causes are reported
together with the rules' causes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.admission import expressions
from shared.admission.expressions import BudgetExceeded, EvaluationError
from shared.admission.fieldpaths import Child, Index, Key, Segment, render
from shared.admission.rules import CompiledSchema, Rule
from shared.admission.values import to_cel
from shared.api import goformat
from shared.api.errors import Cause, field_cause

_COST_LIMIT = "operation cancelled: actual cost limit exceeded"


#: Wall-clock budget for all rules of one request. Each evaluation is bounded by the runtime's
#: iteration budget; this bounds their number (a rule on every item of a long list), as
#: kube-apiserver's per-request cost budget does.
REQUEST_BUDGET_SECONDS = 1.0


@dataclass
class _Run:
    base: str
    deadline: float
    causes: list[Cause] = field(default_factory=list)
    #: Set when a rule ran out of budget: kube-apiserver runs no further rule for the request.
    stopped: bool = False


def validate(compiled: CompiledSchema, value: Any, old: Any = None, *, base: str = "spec",
             budget_seconds: float = REQUEST_BUDGET_SECONDS) -> list[Cause]:
    """The causes for ``value`` (and, on update, the ``old`` value) under ``compiled``.

    ``value`` and ``old`` are the parsed JSON at the schema's root (``base`` names that root in the
    field paths: ``spec.storageClass``). An empty list means every rule holds.
    """
    run = _Run(base, time.monotonic() + budget_seconds)
    _walk(compiled, value, old, (), run)
    return run.causes


def _walk(node: CompiledSchema, value: Any, old: Any, path: tuple[Segment, ...], run: _Run) -> None:
    if value is None or run.stopped:
        return
    if node.rules:
        _check_rules(node, value, old, path, run)
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        for name, child in node.properties.items():
            if name in value:
                _walk(child, value[name], old_map.get(name), (*path, Child(name)), run)
        if node.additional_properties is not None:
            for key, item in value.items():
                _walk(node.additional_properties, item, old_map.get(key), (*path, Key(key)), run)
    elif isinstance(value, list) and node.items is not None:
        keys = node.list_map_keys
        for index, item in enumerate(value):
            old_item = _correlated_item(item, old, keys) if keys is not None else None
            _walk(node.items, item, old_item, (*path, Index(index)), run)


def _correlated_item(item: Any, old: Any, keys: tuple[str, ...]) -> Any:
    """The item of the old map-list with the same key values as ``item``, if any."""
    if not isinstance(item, dict) or not isinstance(old, list):
        return None
    identity = [item.get(key) for key in keys]
    for candidate in old:
        if isinstance(candidate, dict) and [candidate.get(key) for key in keys] == identity:
            return candidate
    return None


def _check_rules(node: CompiledSchema, value: Any, old: Any, path: tuple[Segment, ...], run: _Run) -> None:
    # Transition rules compare self with oldSelf: they see set and map lists in a canonical order.
    views: dict[bool, tuple[Any, Any]] = {}

    def view(unordered: bool) -> tuple[Any, Any]:
        if unordered not in views:
            views[unordered] = (to_cel(node.schema, value, unordered=unordered),
                                None if old is None else to_cel(node.schema, old, unordered=unordered))
        return views[unordered]

    for rule in node.rules:
        if run.stopped:
            return
        if time.monotonic() > run.deadline:
            run.stopped = True
            run.causes.append(_invalid(render(run.base, path), node.type, "validation failed due to running out of "
                                       "cost budget, no further validation rules will be run"))
            return
        if old is None and rule.uses_old_self and not rule.optional_old_self:
            continue
        if old is not None and not rule.uses_old_self and old == value:
            continue
        self_value, old_value = view(rule.uses_old_self)
        bindings = {"self": self_value}
        if old is not None:
            bindings["oldSelf"] = old_value
        _check_rule(node, value, rule, bindings, path, run)


def _check_rule(node: CompiledSchema, value: Any, rule: Rule, bindings: dict[str, Any], path: tuple[Segment, ...],
                run: _Run) -> None:
    # A rule that fails shows the bad value; a rule that cannot be evaluated shows the schema type.
    where = render(run.base, path)
    try:
        result = expressions.evaluate(rule.program, bindings)
    except BudgetExceeded:
        run.stopped = True
        detail = (f"'{_COST_LIMIT}': no further validation rules will be run due to call cost exceeds limit "
                  f"for rule: {_rule_error_string(rule)}")
        run.causes.append(_invalid(where, node.type, detail))
        return
    except EvaluationError as exc:
        if str(exc).startswith("no such overload"):
            detail = (f"'{exc}': call arguments did not match a supported operator, function or macro signature "
                      f"for rule: {_rule_error_string(rule)}")
        else:
            detail = f"{exc} evaluating rule: {_rule_error_string(rule)}"
        run.causes.append(_invalid(where, node.type, detail))
        return
    if result is True:
        return
    message = _failure_message(rule, bindings, run)
    if message is None:
        run.causes.append(_invalid(where, node.type, "messageExpression evaluation failed due to running out of "
                                                           "cost budget, no further validation rules will be run"))
        return
    run.causes.append(_cause(render(run.base, (*path, *rule.field_path)), value, rule.reason, message))


def _failure_message(rule: Rule, bindings: dict[str, Any], run: _Run) -> str | None:
    """The message for a failed rule: its messageExpression when that yields one line of text, else
    its message, else ``failed rule: <rule>``. None when the messageExpression ran out of budget."""
    if rule.message_expression is not None:
        try:
            text = expressions.evaluate(rule.message_expression, bindings)
        except BudgetExceeded:
            run.stopped = True
            return None
        except EvaluationError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text
    if rule.message.strip():
        return rule.message.strip()
    return f"failed rule: {rule.source.strip()}"


def _rule_error_string(rule: Rule) -> str:
    return rule.message.strip() or rule.source.strip()


def _shown(label: str, value: Any) -> str:
    """``Invalid value: "x"`` as kube-apiserver's field errors print the bad value: quoted strings,
    bare scalars, and nothing at all for objects and lists."""
    if isinstance(value, str):
        return f"{label}: {goformat.quote(value)}"
    if isinstance(value, bool):
        return f"{label}: {'true' if value else 'false'}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return f"{label}: {int(value)}"
    if isinstance(value, int | float):
        return f"{label}: {value}"
    return label


def _invalid(field_path: str, value: Any, detail: str) -> Cause:
    return field_cause(field_path, f"{_shown('Invalid value', value)}: {detail}", "FieldValueInvalid")


def _cause(field_path: str, value: Any, reason: str, detail: str) -> Cause:
    if reason == "FieldValueForbidden":
        return field_cause(field_path, f"Forbidden: {detail}", reason)
    if reason == "FieldValueRequired":
        return field_cause(field_path, f"Required value: {detail}", reason)
    if reason == "FieldValueDuplicate":
        return field_cause(field_path, _shown("Duplicate value", value), reason)
    return _invalid(field_path, value, detail)


NOT_CHECKED = ("some validation rules were not checked because the object was invalid; correct the existing "
               "errors to complete validation")


def validate_with_schema_causes(compiled: CompiledSchema, schema_causes: list[Cause], value: Any, old: Any = None,
                                *, base: str = "spec", prior: Sequence[Cause] = ()) -> list[Cause]:
    """The schema's causes followed by the rules' causes, as a CRD's strategy reports them.

    When the object is not of the shape the rules were compiled for -- a wrong type, a value outside
    an enum, a missing required field, a string or list over its maximum, in the schema's causes or
    in ``prior`` (the causes already found in the object's metadata, such as a missing name) -- the
    rules are not run; kube-apiserver then adds one cause saying so.
    """
    if any(_blocks(cause) for cause in [*prior, *schema_causes]):
        if compiled.empty():
            return schema_causes
        return [*schema_causes, field_cause("<nil>", f"Invalid value: null: {NOT_CHECKED}")]
    return [*schema_causes, *validate(compiled, value, old, base=base)]


#: The cause reasons that keep a custom resource's rules from running (kube-apiserver's blocking errors).
_BLOCKING = frozenset({"FieldValueTypeInvalid", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany"})


def _blocks(cause: Cause) -> bool:
    """A blocking cause; an unknown field (kube prunes it, so never reports it) does not block."""
    reason = cause.get("reason")
    return reason in _BLOCKING or (
        reason == "FieldValueNotSupported" and cause.get("message", "").startswith("Unsupported value"))
