"""Admission webhooks (admissionregistration.k8s.io/v1) on a request, decided as kube-apiserver's
dispatchers decide, over plain data.

The I/O is not here: :data:`Transport` posts one AdmissionReview and returns the answer (the server
side is :mod:`shared.admission.callouts`), so the rules below are unit-tested with a fake transport and
checked against kube-apiserver on a CRD in ``tests/integration/test_webhooks.py``.

* :func:`compile_configuration` turns a Mutating/ValidatingWebhookConfiguration into its
  :class:`Webhook` records (match conditions compiled once), in the order kube-apiserver calls them:
  configurations by name, webhooks in their order;
* :func:`should_call`: ``rules``, ``namespaceSelector``, ``objectSelector`` (object or old object),
  then ``matchConditions`` (CEL; an error fails closed with 403 under ``failurePolicy: Fail``);
* :func:`mutate` calls the mutating webhooks one after the other, applies each ``JSONPatch``, and
  re-runs once the ``reinvocationPolicy: IfNeeded`` webhooks that a later webhook's change
  concerns;
* :func:`validate` calls the validating webhooks (concurrently, as kube-apiserver does) and reports
  the first failure in call order;
* a call that fails (unreachable, timed out, an invalid answer) follows ``failurePolicy``: ``Fail``
  is kube-apiserver's 500 ``failed calling webhook "<name>": ...``, ``Ignore`` skips the webhook; a
  denial is the webhook's Status with ``admission webhook "<name>" denied the request: ...``;
* on a dry-run request a webhook whose ``sideEffects`` is neither ``None`` nor ``NoneOnDryRun`` is
  not called and the request is refused (400), as kube-apiserver does.

``matchPolicy: Equivalent`` needs another version or resource serving the same objects; a user kind
has one version and one resource, so both policies select the same requests. ``auditAnnotations``
of responses are logged by the caller, not written to an audit log (the services keep none).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.admission.matching import matches
from shared.admission.policies import Expression, ExpressionFailed, compile_text, conditions_hold
from shared.admission.request import AdmissionRequest
from shared.api import errors
from shared.api.errors import ApiError
from shared.api.patch import json_patch

log = logging.getLogger(__name__)

JSON = dict[str, Any]

#: What a webhook's match conditions see (``authorizer`` is not bound: such a condition fails to compile).
CONDITION_VARIABLES = frozenset({"object", "oldObject", "request"})
#: The AdmissionReview versions this server speaks, in its order of preference per webhook.
REVIEW_VERSIONS = ("v1", "v1beta1")
DEFAULT_TIMEOUT_SECONDS = 10
SAFE_ON_DRY_RUN = ("None", "NoneOnDryRun")


@dataclass(frozen=True)
class Webhook:
    """One webhook of a configuration, as kube-apiserver reads it (v1 defaults filled in)."""

    name: str
    configuration: str
    mutating: bool
    #: Identifies the webhook across the rounds of one request (reinvocation).
    uid: str
    rules: tuple[JSON, ...]
    namespace_selector: JSON | None
    object_selector: JSON | None
    failure_policy: str
    side_effects: str | None
    timeout_seconds: int
    review_versions: tuple[str, ...]
    reinvoke: bool
    client_config: JSON
    match_conditions: tuple[tuple[str, Expression], ...] = ()


class CallFailed(Exception):
    """A webhook that could not be called or answered badly; the text is kube-apiserver's reason
    (``failed to call webhook: Post "...": ...``). Handled per ``failurePolicy``."""


#: Posts one AdmissionReview to ``webhook`` and returns the review it answered, or raises CallFailed.
Transport = Callable[[Webhook, JSON], Awaitable[JSON]]


@dataclass
class Outcome:
    """What the webhooks did to one request: the object (mutated), warnings, audit annotations."""

    object: JSON | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)


def compile_configuration(configuration: JSON, *, mutating: bool) -> tuple[Webhook, ...]:
    name = str((configuration.get("metadata") or {}).get("name", ""))
    hooks = []
    for index, hook in enumerate(configuration.get("webhooks") or []):
        hook_name = str(hook.get("name", ""))
        hooks.append(Webhook(
            name=hook_name, configuration=name, mutating=mutating, uid=f"{name}/{hook_name}/{index}",
            rules=tuple(hook.get("rules") or ()),
            namespace_selector=hook.get("namespaceSelector"), object_selector=hook.get("objectSelector"),
            failure_policy=str(hook.get("failurePolicy") or "Fail"),
            side_effects=hook.get("sideEffects"),
            timeout_seconds=int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS),
            review_versions=tuple(hook.get("admissionReviewVersions") or ()),
            reinvoke=mutating and hook.get("reinvocationPolicy") == "IfNeeded",
            client_config=dict(hook.get("clientConfig") or {}),
            match_conditions=tuple((str(c.get("name", "")), compile_text(c.get("expression"), CONDITION_VARIABLES))
                                   for c in hook.get("matchConditions") or []),
        ))
    return tuple(hooks)


def ordered(configurations: dict[str, tuple[Webhook, ...]]) -> list[Webhook]:
    """Every webhook in kube-apiserver's call order: configurations by name, then as listed."""
    return [hook for name in sorted(configurations) for hook in configurations[name]]


def _forbidden(request: AdmissionRequest, message: str) -> ApiError:
    what = f"{request.resource}.{request.group}" if request.group else request.resource
    return ApiError(403, "Forbidden", f'{what} "{request.refused_name}" is forbidden: {message}',
                    details={"name": request.refused_name, "group": request.group, "kind": request.resource})


def should_call(hook: Webhook, request: AdmissionRequest, namespace_object: JSON | None) -> bool:
    """Whether ``hook`` is called for ``request``; raises the 403 of a failing match condition."""
    selection = {"resourceRules": list(hook.rules), "namespaceSelector": hook.namespace_selector,
                 "objectSelector": hook.object_selector}
    if not matches(selection, request, namespace_object, empty_matches_all=False):
        return False
    if not hook.match_conditions:
        return True
    bindings = {"object": request.object, "oldObject": request.old_object, "request": request.as_cel()}
    try:
        return conditions_hold(hook.match_conditions, bindings)
    except ExpressionFailed as exc:
        if hook.failure_policy == "Ignore":
            return False
        raise _forbidden(request, str(exc)) from None


def review(request: AdmissionRequest, uid: str, version: str) -> JSON:
    """The AdmissionReview kube-apiserver posts (empty optional fields left out as it leaves them)."""
    attributes = request.as_cel()
    user = {key: value for key, value in attributes["userInfo"].items() if value}
    body: JSON = {"uid": uid, "kind": attributes["kind"], "resource": attributes["resource"],
                  "requestKind": attributes["requestKind"], "requestResource": attributes["requestResource"],
                  "operation": request.operation, "userInfo": user, "object": request.object,
                  "oldObject": request.old_object, "dryRun": request.dry_run, "options": request.options}
    for key in ("subResource", "requestSubResource", "name", "namespace"):
        if attributes[key]:
            body[key] = attributes[key]
    return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview", "request": body}


@dataclass(frozen=True)
class _Response:
    allowed: bool
    status: JSON | None
    patch: list[Any] | None
    warnings: tuple[str, ...]
    audit_annotations: JSON


def _verify(answer: Any, uid: str, version: str, mutating: bool) -> _Response:
    """The checks kube-apiserver makes of an answer; a failed one is a failed call."""
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict):
        raise CallFailed("received invalid webhook response: webhook response was absent")
    if version == "v1":
        if response.get("uid") != uid:
            raise CallFailed(f'received invalid webhook response: expected response.uid="{uid}", '
                             f'got "{response.get("uid", "")}"')
        if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != "AdmissionReview":
            got = f'{answer.get("apiVersion", "")}, Kind={answer.get("kind", "")}'
            raise CallFailed("received invalid webhook response: expected webhook response of "
                             f"admission.k8s.io/v1, Kind=AdmissionReview, got {got}")
    raw_patch, patch_type = response.get("patch"), response.get("patchType")
    if not mutating and (raw_patch or patch_type is not None):
        what = "response.patch" if raw_patch else "response.patchType"
        raise CallFailed(f"received invalid webhook response: validating webhook may not return {what}")
    if version == "v1" and mutating and bool(raw_patch) != (patch_type is not None):
        missing = ("response.patch but not response.patchType" if raw_patch
                   else "response.patchType but not response.patch")
        raise CallFailed(f"received invalid webhook response: webhook returned {missing}")
    patch = None
    if mutating and raw_patch:
        if version == "v1" and patch_type != "JSONPatch":
            raise CallFailed(f'unsupported patch type "{patch_type}"')
        try:
            patch = json.loads(base64.b64decode(str(raw_patch), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise CallFailed(f"received undecodable patch in webhook response: {exc}") from None
        if not isinstance(patch, list):
            raise CallFailed("received undecodable patch in webhook response: a JSON patch must be a list")
    return _Response(bool(response.get("allowed")), response.get("status"), patch,
                     tuple(str(w) for w in response.get("warnings") or ()),
                     dict(response.get("auditAnnotations") or {}))


def denial(hook: Webhook, status: JSON | None) -> ApiError:
    """A webhook's refusal, as kube-apiserver returns it: its Status, the code at least 400, the
    message prefixed with the webhook's name."""
    status = dict(status or {})
    prefix = f'admission webhook "{hook.name}" denied the request'
    code = int(status.get("code") or 0)
    reason = str(status.get("reason") or "")
    if status.get("message"):
        message = f"{prefix}: {status['message']}"
    elif reason:
        message = f"{prefix}: {reason}"
    else:
        message = f"{prefix} without explanation"
    details = status.get("details")
    return ApiError(max(code, 400), reason, message, details=details if isinstance(details, dict) else None)


def call_failure(hook: Webhook, reason: str) -> ApiError:
    """A failed call under ``failurePolicy: Fail``: kube-apiserver's internal error."""
    text = f'failed calling webhook "{hook.name}": {reason}'
    return ApiError(500, "InternalError", f"Internal error occurred: {text}", causes=[{"message": text}])


async def _call(hook: Webhook, request: AdmissionRequest, transport: Transport) -> _Response | None:
    """One call; None when it failed and the webhook's failure policy ignores that."""
    try:
        if request.dry_run and hook.side_effects is None:
            raise CallFailed("Webhook SideEffects is nil")
        if request.dry_run and hook.side_effects not in SAFE_ON_DRY_RUN:
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        version = next((v for v in hook.review_versions if v in REVIEW_VERSIONS), None)
        if version is None:
            raise CallFailed("could not create admission objects: webhook does not accept known "
                             "AdmissionReview versions (v1, v1beta1)")
        uid = str(uuid.uuid4())
        return _verify(await transport(hook, review(request, uid, version)), uid, version, hook.mutating)
    except CallFailed as exc:
        if hook.failure_policy == "Ignore":
            log.warning("failed calling webhook, failing open",
                        extra={"webhook": hook.name, "error": str(exc), "resource": request.resource})
            return None
        raise call_failure(hook, str(exc)) from None


def _audit(hook: Webhook, response: _Response, outcome: Outcome) -> None:
    outcome.warnings.extend(response.warnings)
    for key, value in response.audit_annotations.items():
        outcome.audit_annotations[f"{hook.name}/{key}"] = str(value)


async def mutate(hooks: Sequence[Webhook], request: AdmissionRequest, namespace_object: JSON | None,
                 transport: Transport, outcome: Outcome | None = None) -> Outcome:
    """Run the mutating webhooks on ``request``; the outcome's object is the mutated object.

    Reinvocation as kube-apiserver does it: when a webhook changes the object, the ``IfNeeded``
    webhooks called before it are called once more, in a second round, in order. The warnings are
    gathered in ``outcome`` (the caller's, if given) also when a webhook refuses the request: kube-apiserver
    sends them with the refusal.
    """
    outcome = outcome if outcome is not None else Outcome()
    outcome.object = request.object
    invoked: set[str] = set()
    reinvoke: set[str] = set()
    for round_ in (0, 1):
        if round_ == 1 and not reinvoke:
            break
        for hook in hooks:
            current = replace(request, object=outcome.object)
            if not hook.mutating or not should_call(hook, current, namespace_object):
                continue
            if round_ == 1 and hook.uid not in reinvoke:
                continue
            response = await _call(hook, current, transport)
            if response is None:
                continue
            _audit(hook, response, outcome)
            if not response.allowed:
                raise denial(hook, response.status)
            if response.patch:
                if outcome.object is None:
                    raise errors.internal(f'admission webhook "{hook.name}" attempted to modify the object, '
                                          "which is not supported for this operation")
                patched = _patched(outcome.object, response.patch)
                if patched != outcome.object:
                    outcome.object = patched
                    reinvoke |= invoked
                    invoked = set()
            if hook.reinvoke:
                invoked.add(hook.uid)
    return outcome


def _patched(obj: JSON, patch: list[Any]) -> JSON:
    try:
        patched = json_patch(obj, patch)
    except ApiError as exc:
        raise errors.internal(exc.message) from None
    if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
        raise errors.internal("the patched object is not a Kubernetes object")
    return patched


async def validate(hooks: Sequence[Webhook], request: AdmissionRequest, namespace_object: JSON | None,
                   transport: Transport, outcome: Outcome | None = None) -> Outcome:
    """Run the validating webhooks on ``request`` concurrently; raises the first refusal in call order.

    A match condition that fails closed refuses the request before any webhook is called, as in
    kube-apiserver; warnings come in call order, gathered in ``outcome`` (the caller's, if given)
    also when the request is refused.
    """
    relevant = [hook for hook in hooks if not hook.mutating and should_call(hook, request, namespace_object)]
    outcome = outcome if outcome is not None else Outcome()
    outcome.object = request.object
    if not relevant:
        return outcome
    results = await asyncio.gather(*(_call(hook, request, transport) for hook in relevant),
                                   return_exceptions=True)
    refusal: BaseException | None = None
    for hook, result in zip(relevant, results, strict=True):
        if isinstance(result, BaseException):
            refusal = refusal or result
            continue
        if result is None:
            continue
        _audit(hook, result, outcome)
        if not result.allowed and refusal is None:
            refusal = denial(hook, result.status)
    if refusal is not None:
        raise refusal
    return outcome
