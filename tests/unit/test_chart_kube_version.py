"""The chart's ``kubeVersion`` is what the services' code needs, derived from the Kubernetes APIs it names.

Every ``<group>.k8s.io/<version>`` (and every ``GVR(...)`` of a built-in group) in helm_agl, tofu_agl and shared is
looked up in a table of the Kubernetes release that serves it by default; the newest of those must be the chart's
minimum. An API the table does not know fails the test, so adding a call to a newer API means deciding the
chart's ``kubeVersion`` (and README.md's compatibility table) again.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("helm_agl", "tofu_agl", "shared")

#: (group, version) -> the first Kubernetes minor release that serves it by default (GA).
SERVED_SINCE: dict[tuple[str, str], tuple[int, int]] = {
    ("", "v1"): (1, 0),
    ("meta.k8s.io", "v1"): (1, 15),  # Table/Status/options formats, not a served group
    ("admission.k8s.io", "v1"): (1, 16),  # AdmissionReview sent to webhooks
    # Webhook configurations are v1 since 1.16; ValidatingAdmissionPolicy and its binding, which the services
    # watch, only since 1.30.
    ("admissionregistration.k8s.io", "v1"): (1, 30),
    ("apiregistration.k8s.io", "v1"): (1, 10),
    ("authentication.k8s.io", "v1"): (1, 6),
    ("authorization.k8s.io", "v1"): (1, 6),
    ("coordination.k8s.io", "v1"): (1, 14),
    ("events.k8s.io", "v1"): (1, 19),  # the Event relay reads events.k8s.io-shaped Events (series) too
    ("rbac.authorization.k8s.io", "v1"): (1, 8),  # the per-kind ClusterRoles (server-side apply: 1.22)
}
_NAMED = re.compile(r"\b([a-z0-9.-]+\.k8s\.io)/(v[0-9]+(?:alpha[0-9]+|beta[0-9]+)?)\b")
_GVR = re.compile(r'GVR\("([a-z0-9.-]*)", "(v[0-9a-z]+)"')


def apis_named_in_code() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            text = source.read_text()
            found |= set(_NAMED.findall(text))
            found |= {(group, version) for group, version in _GVR.findall(text)
                      if group == "" or group.endswith(".k8s.io")}
    return found


def chart_minimum() -> tuple[int, int]:
    declared = yaml.safe_load((ROOT / "deploy" / "chart" / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)\.0-0", declared)
    assert match, f"kubeVersion {declared!r} is not a plain lower bound"
    return int(match[1]), int(match[2])


def test_every_api_the_code_names_is_known() -> None:
    found = apis_named_in_code()
    assert ("admissionregistration.k8s.io", "v1") in found
    unknown = found - set(SERVED_SINCE)
    assert not unknown, f"add these to SERVED_SINCE and re-check the chart's kubeVersion: {sorted(unknown)}"


def test_chart_kube_version_is_the_newest_api_the_code_needs() -> None:
    needed = max(SERVED_SINCE[api] for api in apis_named_in_code())
    assert chart_minimum() == needed, f"the code needs Kubernetes >= {needed[0]}.{needed[1]}"
