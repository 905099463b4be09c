"""Compile every ``x-kubernetes-validations`` rule of a schema once.

The result mirrors the schema (:class:`CompiledSchema`, one node per schema node that has rules in
or below it) so that evaluation walks object and schema together without compiling again. A rule
that cannot be used is returned as a :class:`RuleError` naming its place in the schema, the way
kube-apiserver rejects such a CRD; the definition that carries it is then not Accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.admission import expressions
from shared.admission.expressions import CompileError, Program
from shared.admission.fieldpaths import Segment, resolve_rule_field_path
from shared.admission.values import conversion

JSON = dict[str, Any]

VALIDATIONS = "x-kubernetes-validations"
SELF_AND_OLD = frozenset({"self", "oldSelf"})

#: A rule's ``reason`` and the cause reason kube-apiserver gives for it.
REASONS = {
    "FieldValueInvalid": "FieldValueInvalid",
    "FieldValueForbidden": "FieldValueForbidden",
    "FieldValueRequired": "FieldValueRequired",
    "FieldValueDuplicate": "FieldValueDuplicate",
}


@dataclass(frozen=True)
class RuleError:
    """A rule kube-apiserver would refuse: ``path`` is its place in the schema (``properties[a].
    x-kubernetes-validations[0].rule``), ``message`` says why."""

    path: str
    message: str


@dataclass(frozen=True)
class Rule:
    """One compiled ``x-kubernetes-validations`` entry."""

    source: str
    program: Program
    message: str
    message_expression: Program | None
    reason: str
    field_path: tuple[Segment, ...]
    #: A transition rule: it refers to ``oldSelf``, so it runs only on update.
    uses_old_self: bool
    optional_old_self: bool


@dataclass
class CompiledSchema:
    """A schema node with its compiled rules and the children that have rules in or below them."""

    schema: JSON
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, CompiledSchema] = field(default_factory=dict)
    additional_properties: CompiledSchema | None = None
    items: CompiledSchema | None = None

    @property
    def type(self) -> str:
        kind = self.schema.get("type")
        return kind if isinstance(kind, str) else ""

    @property
    def list_map_keys(self) -> tuple[str, ...] | None:
        """The keys that identify an item of an ``x-kubernetes-list-type: map`` list, else None."""
        if self.schema.get("x-kubernetes-list-type") != "map":
            return None
        keys = self.schema.get("x-kubernetes-list-map-keys")
        return tuple(keys) if isinstance(keys, list) else ()

    def empty(self) -> bool:
        return not (self.rules or self.properties or self.additional_properties or self.items)


def compile_schema(schema: JSON, base: str = "") -> tuple[CompiledSchema, list[RuleError]]:
    """Compile all rules of ``schema``. ``base`` prefixes the schema paths in the errors."""
    errors: list[RuleError] = []
    return _compile_node(schema, base, None, errors), errors


def _join(base: str, step: str) -> str:
    return f"{base}.{step}" if base else step


def _compile_node(schema: JSON, path: str, uncorrelatable: str | None, errors: list[RuleError]) -> CompiledSchema:
    """Compile ``schema`` at ``path``; ``uncorrelatable`` is the path of the list below which no old
    value can be matched to a new one (None while they still correlate)."""
    node = CompiledSchema(schema)
    rules = schema.get(VALIDATIONS)
    if isinstance(rules, list):
        for index, entry in enumerate(rules):
            rule_path = _join(path, f"{VALIDATIONS}[{index}]")
            rule = entry if isinstance(entry, dict) else {}
            compiled = _compile_rule(schema, rule, rule_path, uncorrelatable, errors)
            if compiled is not None:
                node.rules.append(compiled)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            if isinstance(child, dict):
                compiled_child = _compile_node(child, _join(path, f"properties[{name}]"), uncorrelatable, errors)
                if not compiled_child.empty():
                    node.properties[name] = compiled_child
    values = schema.get("additionalProperties")
    if isinstance(values, dict):
        compiled_values = _compile_node(values, _join(path, "additionalProperties"), uncorrelatable, errors)
        node.additional_properties = None if compiled_values.empty() else compiled_values
    items = schema.get("items")
    if isinstance(items, dict):
        if uncorrelatable is None and schema.get("x-kubernetes-list-type") != "map":
            uncorrelatable = path
        compiled_items = _compile_node(items, _join(path, "items"), uncorrelatable, errors)
        node.items = None if compiled_items.empty() else compiled_items
    return node


def _compile_rule(schema: JSON, entry: JSON, path: str, uncorrelatable: str | None,
                  errors: list[RuleError]) -> Rule | None:
    def fail(step: str, message: str) -> None:
        errors.append(RuleError(_join(path, step), message))

    source = entry.get("rule")
    if not isinstance(source, str) or not source.strip():
        fail("rule", "Required value")
        return None
    optional_old_self = entry.get("optionalOldSelf") is True
    convert = conversion(schema)
    program = _compile_typed(source, optional_old_self, convert, "bool", "rule", "compilation failed", fail)
    if program is None:
        return None
    uses_old_self = expressions.uses_variable(source, SELF_AND_OLD, "oldSelf")
    before = len(errors)
    if uses_old_self and uncorrelatable is not None:
        fail("rule", f"oldSelf cannot be used on the uncorrelatable portion of the schema within {uncorrelatable}")
    if optional_old_self and not uses_old_self:
        fail("optionalOldSelf", "may not be set if rule does not use oldSelf")
    message = entry.get("message", "")
    if not isinstance(message, str) or "\n" in message:
        fail("message", "message must not contain line breaks")
    reason = entry.get("reason", "FieldValueInvalid")
    if reason not in REASONS:
        fail("reason", f'Unsupported value: "{reason}"')
    message_expression = _compile_message_expression(entry.get("messageExpression"), optional_old_self, convert, fail)
    field_path: tuple[Segment, ...] = ()
    if entry.get("fieldPath"):
        try:
            field_path = resolve_rule_field_path(schema, str(entry["fieldPath"]))
        except ValueError as exc:
            fail("fieldPath", str(exc))
    if len(errors) > before:
        return None
    return Rule(
        source=source,
        program=program,
        message=str(message),
        message_expression=message_expression,
        reason=REASONS[str(reason)],
        field_path=field_path,
        uses_old_self=uses_old_self,
        optional_old_self=optional_old_self,
    )


def _compile_message_expression(source: Any, optional_old_self: bool, convert: str, fail: Any) -> Program | None:
    if not source:
        return None
    if not isinstance(source, str):
        fail("messageExpression", "must be a string")
        return None
    return _compile_typed(source, optional_old_self, convert, "string", "messageExpression",
                          "messageExpression compilation failed", fail)


def _compile_typed(source: str, optional_old_self: bool, convert: str, result: str, step: str, prefix: str,
                   fail: Any) -> Program | None:
    """Compile ``source`` and check that it yields ``result`` (or a dynamic value); errors go to ``fail``."""
    try:
        program = expressions.compile_expression(source, SELF_AND_OLD, optional_old_self=optional_old_self,
                                                 conversion=convert)
    except CompileError as exc:
        fail(step, f"{prefix}: {exc}")
        return None
    if expressions.result_type(program) not in (result, "dyn"):
        fail(step, f"{prefix}: cel expression must evaluate to a {result}")
        return None
    return program
