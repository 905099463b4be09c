"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) and its bindings, over plain data.

:func:`compile_policy` compiles a policy's expressions once; :func:`admit` decides one request
against every policy and binding, as kube-apiserver's validating admission policy plugin does:

* a binding applies when the policy's ``matchConstraints`` and the binding's ``matchResources``
  both select the request (:mod:`shared.admission.matching`);
* ``paramKind``/``paramRef``: the binding's params are looked up through the caller's function (by
  name, or by label selector -- then the policy runs once per param); none found follows
  ``parameterNotFoundAction``;
* ``matchConditions`` that are false skip the policy; ``variables`` are bound as ``variables.<name>``;
* a failed validation takes the binding's ``validationActions``: Deny ends the request with the
  Status kube-apiserver gives, Warn adds a warning, Audit adds an audit annotation;
* an expression that does not compile or fails to evaluate follows ``failurePolicy``: ``Fail``
  treats it as a failed validation, ``Ignore`` skips it. ``authorizer`` is not bound, so an
  expression using it does not compile and fails that way.

``object``, ``oldObject``, ``request``, ``params`` and ``namespaceObject`` are bound as in
kube-apiserver, dynamically typed (kube-apiserver types ``object`` by the resource's schema).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.admission import expressions
from shared.admission.expressions import CompileError, EvaluationError, Program
from shared.admission.matching import matches
from shared.admission.request import AdmissionRequest
from shared.api.errors import ApiError

JSON = dict[str, Any]

#: Finds params: (paramKind, paramRef, namespace to look in) -> the param objects. Asynchronous,
#: as a server reads them from the cluster, and only for the bindings that match the request.
ParamLookup = Callable[[JSON, JSON, str], Awaitable[list[JSON]]]

VARIABLES = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"


@dataclass(frozen=True)
class Expression:
    """A policy expression: compiled, or the compiler's complaint."""

    source: str
    program: Program | None
    error: str = ""


@dataclass(frozen=True)
class Validation:
    expression: Expression
    message: str
    message_expression: Expression | None
    reason: str


@dataclass(frozen=True)
class CompiledPolicy:
    name: str
    failure_policy: str
    param_kind: JSON | None
    match_constraints: JSON
    match_conditions: tuple[tuple[str, Expression], ...]
    variables: tuple[tuple[str, Expression], ...]
    validations: tuple[Validation, ...]
    audit_annotations: tuple[tuple[str, Expression], ...]


@dataclass
class Verdict:
    """The outcome for one request: a denial (raise it), warnings for the ``Warning`` header, and
    audit annotations."""

    denial: ApiError | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)


def compile_text(source: Any, variables: frozenset[str] = VARIABLES) -> Expression:
    """Compile one expression with ``variables`` bound; a complaint of the compiler is kept, not raised."""
    text = str(source or "")
    try:
        return Expression(text, expressions.compile_expression(text, variables))
    except CompileError as exc:
        return Expression(text, None, f"compilation error: {exc}")


def compile_policy(policy: JSON) -> CompiledPolicy:
    spec = policy.get("spec") or {}
    return CompiledPolicy(
        name=str((policy.get("metadata") or {}).get("name", "")),
        failure_policy=str(spec.get("failurePolicy") or "Fail"),
        param_kind=spec.get("paramKind"),
        match_constraints=spec.get("matchConstraints") or {},
        match_conditions=tuple((c.get("name", ""), compile_text(c.get("expression")))
                               for c in spec.get("matchConditions") or []),
        variables=tuple((v.get("name", ""), compile_text(v.get("expression"))) for v in spec.get("variables") or []),
        validations=tuple(
            Validation(compile_text(v.get("expression")), str(v.get("message") or ""),
                       compile_text(v["messageExpression"]) if v.get("messageExpression") else None,
                       str(v.get("reason") or "Invalid"))
            for v in spec.get("validations") or []
        ),
        audit_annotations=tuple((a.get("key", ""), compile_text(a.get("valueExpression")))
                                for a in spec.get("auditAnnotations") or []),
    )


class ExpressionFailed(Exception):
    """An expression that did not compile or evaluate; handled per failurePolicy. ``cause`` is the
    runtime's own error text."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message


def run(expression: Expression, bindings: JSON, broken: dict[str, str] | None = None) -> Any:
    """Evaluate ``expression``. ``broken`` maps the variables that failed to their error: they are
    left out of ``variables``, and a use of one reports that variable's error, as kube-apiserver's
    lazily evaluated variables do."""
    if expression.program is None:
        raise ExpressionFailed(expression.error)
    try:
        return expressions.evaluate(expression.program, bindings)
    except EvaluationError as exc:
        cause = str(exc)
        for name, error in (broken or {}).items():
            if cause == f"no such key: {name}" and f"variables.{name}" in expression.source:
                cause = f'composited variable "{name}" fails to evaluate: {error}'
        raise ExpressionFailed(f"expression '{expression.source}' resulted in error: {cause}", cause) from None


@dataclass(frozen=True)
class _Failure:
    message: str
    reason: str
    #: Which validation failed (for the audit annotation).
    index: int = 0


def conditions_hold(conditions: Sequence[tuple[str, Expression]], bindings: JSON) -> bool:
    """Whether every match condition holds. As in kube-apiserver a false condition wins over an error
    in another one; an error alone raises the first error (policies and webhooks alike)."""
    failed: ExpressionFailed | None = None
    for _, condition in conditions:
        try:
            if run(condition, bindings) is not True:
                return False
        except ExpressionFailed as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return True


def _evaluate(policy: CompiledPolicy, bindings: JSON) -> tuple[list[_Failure], dict[str, str]] | None:
    """The failed validations and audit annotations of one policy run; None when a match condition
    leaves the request alone."""
    if not conditions_hold(policy.match_conditions, bindings):
        return None
    values: JSON = {}
    broken: dict[str, str] = {}
    bindings["variables"] = values
    for name, variable in policy.variables:
        try:
            values[name] = run(variable, bindings, broken)
        except ExpressionFailed as exc:
            broken[name] = exc.cause
    failures: list[_Failure] = []
    for index, validation in enumerate(policy.validations):
        try:
            if run(validation.expression, bindings, broken) is True:
                continue
        except ExpressionFailed as exc:
            if policy.failure_policy == "Fail":
                failures.append(_Failure(str(exc), "Invalid", index))
            continue
        failures.append(_Failure(_message(validation, bindings), validation.reason, index))
    annotations: dict[str, str] = {}
    for key, annotation in policy.audit_annotations:
        try:
            value = run(annotation, bindings)
        except ExpressionFailed:
            continue
        if isinstance(value, str):
            annotations[f"{policy.name}/{key}"] = value
    return failures, annotations


def _message(validation: Validation, bindings: JSON) -> str:
    if validation.message_expression is not None:
        try:
            text = run(validation.message_expression, bindings)
        except ExpressionFailed:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text.strip()
    if validation.message.strip():
        return validation.message.strip()
    return f"failed expression: {validation.expression.source.strip()}"


async def _params(policy: CompiledPolicy, binding: JSON, request: AdmissionRequest,
                  find_params: ParamLookup) -> list[JSON | None] | str:
    """The params to run the policy with, or the reason to deny when none are found.

    Params that cannot be read (the server may not read that kind, the cluster is unreachable)
    fail the policy per its failurePolicy, as any other misconfiguration does.
    """
    if policy.param_kind is None:
        return [None]
    ref = (binding.get("spec") or {}).get("paramRef")
    if not ref:
        return "failed to configure binding: paramRef is required when the policy has paramKind"
    namespace = ref.get("namespace") or request.namespace
    try:
        found: list[JSON | None] = list(await find_params(policy.param_kind, ref, namespace))
    except ApiError as exc:
        return [] if policy.failure_policy == "Ignore" else f"failed to configure binding: {exc.message}"
    if found:
        return found
    if ref.get("parameterNotFoundAction") == "Deny":
        return "no params found for policy binding with `Deny` parameterNotFoundAction"
    return []


def _denial(request: AdmissionRequest, message: str, reason: str) -> ApiError:
    what = f"{request.resource}.{request.group}" if request.group else request.resource
    text = f'{what} "{request.refused_name}" is forbidden: {message}'
    details = {"name": request.refused_name, "group": request.group, "kind": request.resource}
    return ApiError(REASON_CODES.get(reason, 422), reason, text, details=details, causes=[{"message": message}])


def may_apply(policies: Sequence[CompiledPolicy], bindings: Sequence[JSON], request: AdmissionRequest) -> bool:
    """Whether any binding could select ``request`` whatever its namespace's labels are.

    When none can, :func:`admit` would allow the request without looking at anything, so the caller
    does not need to read the namespace object (a kube round trip on every write otherwise).
    """
    by_name = {policy.name: policy for policy in policies}
    for binding in bindings:
        spec = binding.get("spec") or {}
        policy = by_name.get(str(spec.get("policyName", "")))
        if (policy is not None
                and matches(policy.match_constraints, request, None, empty_matches_all=False, any_namespace=True)
                and matches(spec.get("matchResources"), request, None, empty_matches_all=True, any_namespace=True)):
            return True
    return False


async def admit(policies: Sequence[CompiledPolicy], bindings: Sequence[JSON], request: AdmissionRequest,
                namespace_object: JSON | None, find_params: ParamLookup) -> Verdict:
    """Decide ``request`` against every binding of every policy."""
    verdict = Verdict()
    audit: list[JSON] = []
    by_name = {policy.name: policy for policy in policies}
    for binding in bindings:
        spec = binding.get("spec") or {}
        policy = by_name.get(str(spec.get("policyName", "")))
        if policy is None:
            continue
        if not matches(policy.match_constraints, request, namespace_object, empty_matches_all=False):
            continue
        if not matches(spec.get("matchResources"), request, namespace_object, empty_matches_all=True):
            continue
        binding_name = str((binding.get("metadata") or {}).get("name", ""))
        actions = set(spec.get("validationActions") or [])
        failures: list[_Failure] = []
        params = await _params(policy, binding, request, find_params)
        if isinstance(params, str):
            failures.append(_Failure(params, "Invalid"))
            params = []
        for param in params:
            bindings_ = {"object": request.object, "oldObject": request.old_object, "request": request.as_cel(),
                         "params": param, "namespaceObject": namespace_object}
            try:
                outcome = _evaluate(policy, bindings_)
            except ExpressionFailed as exc:
                if policy.failure_policy == "Fail":
                    failures.append(_Failure(str(exc), "Invalid"))
                continue
            if outcome is not None:
                failures.extend(outcome[0])
                verdict.audit_annotations.update(outcome[1])
        for failure in failures:
            if "Deny" in actions and verdict.denial is None:
                message = (f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding_name}' denied request: "
                           f"{failure.message}")
                verdict.denial = _denial(request, message, failure.reason)
            if "Warn" in actions:
                verdict.warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' with "
                                        f"binding '{binding_name}': {failure.message}")
            if "Audit" in actions:
                audit.append({"message": failure.message, "policy": policy.name, "binding": binding_name,
                              "expressionIndex": failure.index, "validationActions": sorted(actions)})
    if audit:
        verdict.audit_annotations[AUDIT_KEY] = json.dumps(audit)
    return verdict
