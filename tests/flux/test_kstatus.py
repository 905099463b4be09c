"""kstatus' verdict on Applications and definitions, given by the real kstatus.

The verdict tool (``deploy/local/localcluster/kstatus_verdict.go``) is compiled by ``python -m localcluster
build`` against the kstatus module and version kustomize-controller v1.9.3 requires
(``localcluster.versions.KSTATUS``), and calls the function kustomize-controller's health checks call on a
custom kind. Each recorded status of ``tests/data/status/`` (written by the real helm-controller and
tofu-controller) is projected through the stack's ``to_application`` and the verdict asserted, with why it is
the right one. No controller or control plane runs here.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from helm_agl import project as helm_project
from helm_agl.names import GROUP as HELM_GROUP
from shared.service.acceptance import Verdict, status_conditions
from tests.flux.kstatus import verdict
from tests.kube import FIXTURES
from tests.recorded import load_recorded
from tests.unit.helm_samples import DEFN as HELM_DEFN
from tests.unit.helm_samples import make_hr
from tests.unit.tofu_samples import GROUP as TOFU_GROUP
from tests.unit.tofu_samples import Defn
from tofu_agl import project as tofu_project

JSON = dict[str, Any]


def helm_application(hr: JSON) -> JSON:
    app = helm_project.to_application(HELM_DEFN, hr, group=HELM_GROUP)
    assert app is not None
    return app


def tofu_application(tf: JSON) -> JSON:
    """The Application of a recorded Terraform, through a definition of the kind it was recorded for."""
    kind = tf["metadata"]["labels"]["apps.cozystack.io/application.kind"]
    defn = Defn(kind=kind, plural=f"{kind.lower()}s", singular=kind.lower(), prefix=f"{kind.lower()}-",
                schema={"type": "object"})
    app = tofu_project.to_application(defn, tf, group=TOFU_GROUP)
    assert app is not None
    return app


#: (recorded phase, kstatus' verdict on the Application, why).  helm_agl keeps helm-controller's meaning, so
#: each verdict is also kstatus' verdict on the HelmRelease itself (checked below).
HELM_VERDICTS = [
    ("installing", "InProgress", "the first install runs: observedGeneration is still the CRD's -1 and "
     "helm-controller's Reconciling (Progressing) is True"),
    ("installed", "Current", "helm-controller finished generation 1 with Ready True"),
    ("installed-external-artifact", "Current", "the same through an ExternalArtifact chartRef"),
    ("upgraded", "Current", "helm-controller finished generation 2 with Ready True"),
    ("failed", "InProgress", "helm_agl's RetryOnFailure retries a failed install forever: helm-controller keeps "
     "Reconciling (ProgressingWithRetry) True and never sets Stalled, so the Application is still in progress, "
     "with the chart's error in its message"),
    ("timed-out", "InProgress", "the same for an install that timed out"),
    ("stalled", "Failed", "helm-controller gave up (its default remediation, no retries, once the strategy was "
     "taken off the HelmRelease) and set Stalled RetriesExceeded, which the Application keeps"),
]

#: (recorded phase, kstatus' verdict on the Application, why).
TOFU_VERDICTS = [
    ("planning", "InProgress", "just created: the CRD's observedGeneration -1, tofu-controller's Reconciling True"),
    ("pending", "InProgress", "a plan waits for approval: Reconciling True, reason AwaitingApproval, with the "
     "command that approves it; the instance moves on once a human approves, it did not fail"),
    ("applied", "Current", "applied and outputs written: Ready True on the current generation"),
    ("failed", "Failed", "OpenTofu refused a variable (TFExecPlanFailed): retrying the same spec repeats it, "
     "so Stalled True (tofu_agl.project.NEEDS_A_HUMAN) although tofu-controller keeps retrying"),
    ("drifted", "Failed", "drift on a kind whose plans a human approves: tofu-controller waits for them "
     "instead of repairing it, so Stalled True"),
    ("deleting", "Terminating", "deletionTimestamp is set: kstatus says Terminating before anything else"),
]


@pytest.mark.parametrize(("phase", "expected", "why"), HELM_VERDICTS, ids=[v[0] for v in HELM_VERDICTS])
def test_helm_application_verdicts(phase: str, expected: str, why: str) -> None:
    hr = make_hr(status=phase)
    status, message = verdict(helm_application(hr))
    assert status == expected, (why, message)
    assert verdict(hr)[0] == expected, "the HelmRelease's own verdict: helm-controller's meaning is kept"
    if phase == "failed":
        assert "replicas: 10 is more than this chart supports (9)" in message, message


@pytest.mark.parametrize(("phase", "expected", "why"), TOFU_VERDICTS, ids=[v[0] for v in TOFU_VERDICTS])
def test_tofu_application_verdicts(phase: str, expected: str, why: str) -> None:
    tf = load_recorded(f"terraform-{phase}")
    status, message = verdict(tofu_application(tf))
    assert status == expected, (why, message)
    if phase == "pending":
        assert "approve it with: kubectl annotate gadgets beta" in message, message
    if phase == "failed":
        assert "Invalid value for variable" in message, message


def test_tofu_verdicts_differ_from_the_terraforms_where_a_human_is_needed() -> None:
    """On the Terraform itself kstatus cannot tell a failed plan from one being retried (Ready False: InProgress);
    the Application says Failed, which stops a Flux health check at once instead of at its timeout."""
    failed = load_recorded("terraform-failed")
    assert verdict(failed)[0] == "InProgress"
    assert verdict(tofu_application(failed))[0] == "Failed"


def test_just_created_is_in_progress() -> None:
    """Before any controller has seen it: without a status (kstatus skips its generation check without
    observedGeneration) and with the CRDs' defaulted -1, the Application is in progress, never Current."""
    bare = make_hr()
    assert "status" not in bare
    assert verdict(helm_application(bare))[0] == "InProgress"
    assert verdict(bare)[0] == "Current"  # the bare HelmRelease: what the Applications said before
    defaulted = make_hr(generation=1)
    defaulted["status"] = {"observedGeneration": -1}
    assert verdict(helm_application(defaulted))[0] == "InProgress"
    tf = load_recorded("terraform-applied")
    del tf["status"]
    status, message = verdict(tofu_application(tf))
    assert status == "InProgress" and "waiting for tofu-controller" in message, message


def test_a_generation_newer_than_observed_is_in_progress() -> None:
    status, message = verdict(helm_application(make_hr(status="installed", generation=3)))
    assert (status, message) == ("InProgress", "Postgres generation is 3, but latest observed generation is 1")
    tf = load_recorded("terraform-applied")
    tf["metadata"]["generation"] = 2
    assert verdict(tofu_application(tf))[0] == "InProgress"


def definition(kind: str, generation: int, observed: int, verdict_: Verdict, served: bool) -> JSON:
    """A sample definition with the status the reconciler writes for ``verdict_`` at generation ``observed``."""
    name = {"ApplicationDefinition": "redis.yaml", "TofuApplicationDefinition": "vpc.yaml"}[kind]
    defn: JSON = yaml.safe_load((FIXTURES / "definitions" / name).read_text())
    assert defn["kind"] == kind
    defn["metadata"]["generation"] = generation
    defn["status"] = {"observedGeneration": observed,
                      "conditions": status_conditions(verdict_, served, observed, None, "2026-11-26T12:00:00Z")}
    return defn


@pytest.mark.parametrize("kind", ["ApplicationDefinition", "TofuApplicationDefinition"])
def test_definition_verdicts(kind: str) -> None:
    # accepted and served: Ready True on the generation acted on
    assert verdict(definition(kind, 2, 2, Verdict.ok(), served=True))[0] == "Current"
    # rejected: only its author can fix it
    rejected = verdict(definition(kind, 2, 2, Verdict.reject("KindConflict", "vpcs is taken"), False))
    assert rejected == ("Failed", "vpcs is taken")
    # accepted, the kind not served yet
    assert verdict(definition(kind, 2, 2, Verdict.ok(), served=False))[0] == "InProgress"
    # a change the reconciler has not acted on yet
    assert verdict(definition(kind, 3, 2, Verdict.ok(), served=True))[0] == "InProgress"
