"""Which requests a policy and its binding apply to: ``matchResources`` as kube-apiserver reads it.

Resource rules match group, version, resource (with ``*``, ``*/sub`` and ``res/*`` forms),
operation, scope and resource names; ``excludeResourceRules`` take requests back out;
``namespaceSelector`` is matched against the labels of the request's namespace object and
``objectSelector`` against the labels of the new or the old object.
"""

from __future__ import annotations

from typing import Any

from shared.admission.request import AdmissionRequest
from shared.api import selectors

JSON = dict[str, Any]


def label_selector(selector: JSON | None) -> selectors.Selector:
    """A ``metav1.LabelSelector`` (matchLabels, matchExpressions) as selector requirements."""
    if not selector:
        return ()
    requirements = [selectors.Requirement(key, selectors.IN, (str(value),))
                    for key, value in (selector.get("matchLabels") or {}).items()]
    operators = {"In": selectors.IN, "NotIn": selectors.NOT_IN, "Exists": selectors.EXISTS,
                 "DoesNotExist": selectors.DOES_NOT_EXIST}
    for expression in selector.get("matchExpressions") or []:
        operator = operators.get(expression.get("operator", ""))
        if operator is None:
            raise ValueError(f"unknown label selector operator {expression.get('operator')!r}")
        requirements.append(selectors.Requirement(expression["key"], operator,
                                                  tuple(expression.get("values") or ())))
    return tuple(requirements)


def _labels(obj: JSON | None) -> dict[str, str]:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


def _listed(value: str, allowed: list[str] | None) -> bool:
    return allowed is not None and ("*" in allowed or value in allowed)


def _resource_listed(request: AdmissionRequest, allowed: list[str] | None) -> bool:
    for entry in allowed or []:
        resource, _, sub = entry.partition("/")
        if resource not in ("*", request.resource):
            continue
        if (sub == "" and not request.subresource) or sub == "*" or sub == request.subresource:
            return True
    return False


def rule_matches(rule: JSON, request: AdmissionRequest) -> bool:
    """One ``NamedRuleWithOperations``."""
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and request.namespace) or (scope == "Namespaced" and not request.namespace):
        return False
    names = rule.get("resourceNames")
    return (
        _listed(request.operation, rule.get("operations"))
        and _listed(request.group, rule.get("apiGroups"))
        and _listed(request.version, rule.get("apiVersions"))
        and _resource_listed(request, rule.get("resources"))
        and (not names or request.name in names)
    )


def matches(match: JSON | None, request: AdmissionRequest, namespace_object: JSON | None,
            *, empty_matches_all: bool, any_namespace: bool = False) -> bool:
    """Whether ``matchResources`` ``match`` selects ``request``.

    A policy's ``matchConstraints`` must list resource rules (``empty_matches_all=False``); a
    binding's ``matchResources`` may be empty, which leaves the policy's constraints alone.
    ``any_namespace`` leaves the namespace selector out: "could it select the request in some namespace?"
    """
    match = match or {}
    rules = match.get("resourceRules") or []
    if rules and not any(rule_matches(rule, request) for rule in rules):
        return False
    if not rules and not empty_matches_all:
        return False
    if any(rule_matches(rule, request) for rule in match.get("excludeResourceRules") or []):
        return False
    if request.namespace and not any_namespace and not selectors.matches(label_selector(match.get("namespaceSelector")),
                                                   _labels(namespace_object)):
        return False
    object_selector = label_selector(match.get("objectSelector"))
    if object_selector:
        candidates = [obj for obj in (request.object, request.old_object) if obj is not None]
        if not any(selectors.matches(object_selector, _labels(obj)) for obj in candidates):
            return False
    return True
