"""Admission for user kinds, as kube-apiserver admits a custom resource.

kube-apiserver does not run admission for the resources it proxies to an aggregated server, so each
service runs it itself. This package holds the backend-agnostic machinery, over plain data (schemas
and objects as parsed JSON, causes as ``meta.k8s.io/v1 Status`` cause dictionaries):

* :mod:`~shared.admission.rules` compiles every ``x-kubernetes-validations`` rule of a schema once,
  and reports the rules that do not compile with their schema path;
* :mod:`~shared.admission.validation` evaluates the compiled rules on create (object) and update
  (object and old object) and returns the causes kube-apiserver would give;
* :mod:`~shared.admission.policies` decides a request (:class:`~shared.admission.request.AdmissionRequest`)
  against ValidatingAdmissionPolicies and their bindings, matched by :mod:`~shared.admission.matching`;
* :mod:`~shared.admission.webhooks` runs mutating and validating admission webhooks on a request
  (matching, reviews, patches, reinvocation, failure policies), the HTTP call left to its caller.

The CEL runtime and the Kubernetes functions it lacks live in :mod:`~shared.admission.expressions`
and :mod:`~shared.admission.library`.
"""

from shared.admission.policies import CompiledPolicy, ParamLookup, Verdict, admit, compile_policy, may_apply
from shared.admission.request import (
    AdmissionRequest,
    Admit,
    Mutate,
    admit_all,
    mutate_as_crd,
    mutate_nothing,
    mutate_with_defaults,
)
from shared.admission.rules import CompiledSchema, RuleError, compile_schema
from shared.admission.validation import validate, validate_with_schema_causes

__all__ = [
    "AdmissionRequest",
    "Admit",
    "CompiledPolicy",
    "CompiledSchema",
    "Mutate",
    "ParamLookup",
    "RuleError",
    "Verdict",
    "admit",
    "admit_all",
    "compile_policy",
    "compile_schema",
    "may_apply",
    "mutate_as_crd",
    "mutate_nothing",
    "mutate_with_defaults",
    "validate",
    "validate_with_schema_causes",
]
