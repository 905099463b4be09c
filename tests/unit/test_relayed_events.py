"""The pure parts of the Event relay: which Events are relayed, the relayed Event's name and body, which
Application a backing object is, and Tofu's redaction of secret values."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from helm_agl import relay as helm_relay
from helm_agl.build import build as build_release
from shared.api.relayed import (
    MAX_MESSAGE,
    RELAYED_BY,
    RELAYED_FROM,
    Watched,
    observed,
    relayed_event,
    relayed_name,
    reporter,
    selects,
)
from shared.client.fence import FENCE_LABEL
from tests.recorded import load_recorded
from tests.unit.helm_samples import DEFN, make_app
from tests.unit.helm_samples import GROUP as HELM_GROUP
from tests.unit.tofu_samples import GROUP, Defn, app
from tofu_agl import relay as tofu_relay
from tofu_agl import secretvalues
from tofu_agl.build import build as build_terraform
from tofu_agl.plan import REDACTED, sensitive_values

UID = "5f0c7a52-8a3e-4d0b-9b43-0c6a1f3d9e21"
RELEASE_UID = "0b1d2c3e-0000-4000-8000-000000000001"


def core_event(**changes: Any) -> dict[str, Any]:
    """A core/v1 Event as client-go's recorder writes one about a HelmRelease (the fields helm-controller sets)."""
    event: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "postgres-db1.187b2c4d5e6f7a8b", "namespace": "tenant-root", "uid": UID,
                     "resourceVersion": "812"},
        "involvedObject": {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "name": "postgres-db1",
                           "namespace": "tenant-root", "uid": RELEASE_UID, "resourceVersion": "800"},
        "reason": "InstallFailed", "type": "Warning",
        "message": "Helm install failed for release tenant-root/postgres-db1: replicas too high",
        "count": 3, "firstTimestamp": "2026-11-26T14:00:00Z", "lastTimestamp": "2026-11-26T14:01:00Z",
        "source": {"component": "helm-controller"},
        "reportingComponent": "helm-controller", "reportingInstance": "",
    }
    event.update(changes)
    return event


HELM = Watched("helm.toolkit.fluxcd.io", "HelmRelease")
APPLICATION = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres", "name": "db1",
               "namespace": "tenant-root", "uid": RELEASE_UID, "resourceVersion": "800"}


# ------------------------------------------------------------------------------------------ selection
def test_events_about_the_watched_kind_and_group_are_selected() -> None:
    assert HELM.field_selector == "involvedObject.kind=HelmRelease"
    assert selects(core_event(), HELM)


@pytest.mark.parametrize("involved", [
    {"apiVersion": "example.com/v2", "kind": "HelmRelease"},            # a HelmRelease of another group
    {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmChart"},   # another kind of the group
    {"uid": ""},                                                        # no uid: cannot be tied to one object
    {"namespace": ""},
])
def test_events_about_other_objects_are_not_selected(involved: dict[str, str]) -> None:
    event = core_event()
    event["involvedObject"].update(involved)
    assert not selects(event, HELM)


def test_a_relayed_event_is_never_relayed_again() -> None:
    event = core_event()
    event["metadata"]["annotations"] = {RELAYED_FROM: "tenant-root/x"}
    assert not selects(event, HELM)
    assert not selects({"metadata": {}}, HELM)


# ------------------------------------------------------------------------------------------ recorded Events
#: Events as the real helm-controller and tofu-controller wrote them (tests/data/status/event-*.yaml).
HELM_RECORDED = load_recorded("event-helmrelease-install-failed")
TOFU_RECORDED = load_recorded("event-terraform-plan-failed")


def test_the_controllers_write_core_v1_events() -> None:
    """client-go's legacy recorder: count and first/last timestamps, no eventTime, reporter in source."""
    for recorded in (HELM_RECORDED, TOFU_RECORDED):
        assert recorded["apiVersion"] == "v1" and recorded["eventTime"] is None
        assert observed(recorded) == (recorded["count"], recorded["firstTimestamp"], recorded["lastTimestamp"])
    assert (reporter(HELM_RECORDED), reporter(TOFU_RECORDED)) == ("helm-controller", "tf-controller")


def test_each_service_selects_its_own_controllers_events() -> None:
    assert selects(HELM_RECORDED, helm_relay.WATCHED) and not selects(HELM_RECORDED, tofu_relay.WATCHED)
    assert selects(TOFU_RECORDED, tofu_relay.WATCHED) and not selects(TOFU_RECORDED, helm_relay.WATCHED)


def test_a_recorded_event_restated_about_its_application() -> None:
    involved = TOFU_RECORDED["involvedObject"]
    widget = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Widget", "name": "broken",
              "namespace": involved["namespace"], "uid": involved["uid"]}
    body = relayed_event(TOFU_RECORDED, widget, TOFU_RECORDED["message"], "tofu-agl")
    assert body["involvedObject"] == widget and body["metadata"]["namespace"] == involved["namespace"]
    assert body["metadata"]["name"] == f"broken.{TOFU_RECORDED['metadata']['uid']}"
    assert {k: body[k] for k in ("type", "reason", "message", "count", "firstTimestamp", "lastTimestamp")} == \
        {k: TOFU_RECORDED[k] for k in ("type", "reason", "message", "count", "firstTimestamp", "lastTimestamp")}
    assert body["source"] == {"component": "tf-controller"} and body["reportingComponent"] == "tf-controller"


# ------------------------------------------------------------------------------------------ the body
def test_the_name_is_the_same_on_every_write_and_one_per_original() -> None:
    assert relayed_name("db1", UID) == relayed_name("db1", UID) == f"db1.{UID}"
    assert relayed_name("db1", UID) != relayed_name("db1", RELEASE_UID)
    assert len(relayed_name("x" * 300, UID)) == 253


def test_the_relayed_event_restates_the_original_about_the_application() -> None:
    original = core_event()
    body = relayed_event(original, APPLICATION, original["message"], "helm-agl")
    assert body == {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"db1.{UID}", "namespace": "tenant-root",
                     "annotations": {RELAYED_FROM: "tenant-root/postgres-db1.187b2c4d5e6f7a8b",
                                     RELAYED_BY: "helm-agl"}},
        # resourceVersion is left out: the reference stays the same while the Application changes.
        "involvedObject": {k: v for k, v in APPLICATION.items() if k != "resourceVersion"},
        "type": "Warning", "reason": "InstallFailed", "message": original["message"],
        "count": 3, "firstTimestamp": "2026-11-26T14:00:00Z", "lastTimestamp": "2026-11-26T14:01:00Z",
        "source": {"component": "helm-controller"},
        "reportingComponent": "helm-controller", "reportingInstance": "helm-agl",
    }


def test_a_grown_count_changes_only_count_and_last_timestamp() -> None:
    first = relayed_event(core_event(), APPLICATION, "m", "helm-agl")
    later = relayed_event(core_event(count=4, lastTimestamp="2026-11-26T14:05:00Z"), APPLICATION, "m", "helm-agl")
    assert {k for k in first if first[k] != later[k]} == {"count", "lastTimestamp"}
    assert later["count"] == 4 and later["metadata"]["name"] == first["metadata"]["name"]


def test_events_k8s_io_shape_reads_as_the_legacy_one() -> None:
    """An Event written through events.k8s.io/v1 reads back in core/v1 with eventTime and series only."""
    modern = core_event(count=None, firstTimestamp=None, lastTimestamp=None, source={},
                        eventTime="2026-11-26T14:00:00.123456Z", reportingComponent="", reportingController="x-ctl",
                        series={"count": 5, "lastObservedTime": "2026-11-26T14:09:30.000001Z"})
    assert observed(modern) == (5, "2026-11-26T14:00:00Z", "2026-11-26T14:09:30Z")
    assert reporter(modern) == "x-ctl"
    assert observed({"eventTime": "2026-11-26T14:00:00.000000Z"}) == (1, "2026-11-26T14:00:00Z",
                                                                      "2026-11-26T14:00:00Z")


def test_long_messages_are_cut_and_unknown_types_are_normal() -> None:
    body = relayed_event(core_event(type="Odd", source={}, reportingComponent=""), APPLICATION, "y" * 10_000, "r")
    assert len(body["message"]) == MAX_MESSAGE and body["type"] == "Normal"
    assert body["source"] == {"component": "unknown"}


# ------------------------------------------------------------------------------------------ helm: which Application
def release(name: str = "db1", group: str = HELM_GROUP) -> dict[str, Any]:
    hr = build_release(DEFN, make_app(name, spec={"version": "v16"}), group=group)
    hr["metadata"]["uid"] = RELEASE_UID
    return hr


def test_a_helmrelease_of_a_served_kind_is_its_application() -> None:
    assert helm_relay.application_of(release(), [DEFN], HELM_GROUP) == {
        "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres", "name": "db1", "namespace": "tenant-root",
        "uid": RELEASE_UID}


def test_helmreleases_that_are_no_application_are_ignored() -> None:
    assert helm_relay.application_of(release(), [], HELM_GROUP) is None  # the kind is not served (any more)
    fence = release()
    fence["metadata"]["labels"][FENCE_LABEL] = "true"
    assert helm_relay.application_of(fence, [DEFN], HELM_GROUP) is None
    stranger = release()
    stranger["metadata"]["labels"] = {}
    assert helm_relay.application_of(stranger, [DEFN], HELM_GROUP) is None


def test_a_helmrelease_names_its_application_in_the_served_group() -> None:
    served = "apps.example.org"
    assert helm_relay.application_of(release(group=served), [DEFN], served) == {
        "apiVersion": f"{served}/v1alpha1", "kind": "Postgres", "name": "db1", "namespace": "tenant-root",
        "uid": RELEASE_UID}
    assert helm_relay.application_of(release(), [DEFN], served) is None  # another group's HelmRelease


# ------------------------------------------------------------------------------------------ tofu: redaction
SENSITIVE_SCHEMA = {"type": "object", "properties": {
    "cidrBlock": {"type": "string"},
    "token": {"type": "string", "x-cozystack-sensitive": True},
    "pins": {"type": "array", "items": {"type": "string"}, "x-cozystack-sensitive": True},
}}
TOFU = Defn(schema=copy.deepcopy(SENSITIVE_SCHEMA))


def terraform(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    tf = build_terraform(TOFU, app(spec=spec), group=GROUP)
    tf["metadata"]["uid"] = RELEASE_UID
    tf["spec"].update(extra)
    return tf


def test_a_terraform_of_a_served_kind_is_its_application() -> None:
    found = tofu_relay.application_of(terraform({"cidrBlock": "10.0.0.0/16", "token": "s3cr3t-token"}), [TOFU], GROUP)
    assert found is not None and found[0] is TOFU
    assert found[1]["metadata"]["uid"] == RELEASE_UID and found[1]["spec"]["token"] == "s3cr3t-token"
    assert tofu_relay.application_of(terraform({}), [], GROUP) is None


def test_the_secrets_a_terraform_reads_are_found() -> None:
    tf = terraform({}, varsFrom=[{"kind": "Secret", "name": "creds"}, {"kind": "ConfigMap", "name": "plain"}],
                   backendConfigsFrom=[{"kind": "Secret", "name": "backend"}], cliConfigSecretRef={"name": "cli"})
    tf["spec"]["vars"].append({"name": "password", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}})
    tf["spec"]["vars"].append({"name": "plain", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}})
    assert secretvalues.secret_references(tf) == ["backend", "cli", "creds", "db"]
    assert secretvalues.secret_references(terraform({})) == []


#: A runner pod template handing the runner Secrets in each way a pod can, and a ConfigMap in each way too.
RUNNER_TEMPLATE = {"metadata": {"labels": {"team": "net"}}, "spec": {
    "image": "ghcr.io/example/runner:v1",
    "env": [{"name": "TF_VAR_password", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "pw"}}},
            {"name": "TF_VAR_region", "valueFrom": {"configMapKeyRef": {"name": "regions", "key": "r"}}},
            {"name": "TF_LOG", "value": "INFO"}],
    "envFrom": [{"secretRef": {"name": "aws-credentials"}}, {"configMapRef": {"name": "defaults"}}],
    "volumes": [{"name": "gcp", "secret": {"secretName": "gcp-key"}},
                {"name": "both", "projected": {"sources": [{"secret": {"name": "ca-bundle"}},
                                                           {"configMap": {"name": "settings"}}]}},
                {"name": "scratch", "emptyDir": {}}],
    "nodeSelector": {"pool": "runners"}}}


def test_the_secrets_a_runner_pod_is_given_are_found() -> None:
    """``TF_VAR_`` variables and credentials reach OpenTofu through the runner pod too: their Secrets are masked."""
    tf = terraform({}, runnerPodTemplate=RUNNER_TEMPLATE)
    assert secretvalues.secret_references(tf) == ["aws-credentials", "ca-bundle", "db-password", "gcp-key"]


def test_secret_values_are_read_as_text() -> None:
    data = {"a": base64.b64encode(b"hunter22").decode(), "b": base64.b64encode(b"\xff\xfe").decode(),
            "c": "not base64!", "d": ""}
    assert secretvalues.secret_strings({"data": data}) == ["hunter22"]


def test_known_secret_values_never_reach_the_relayed_message() -> None:
    message = ('error running Plan: exit status 1\n\nError: Invalid value for variable\n'
               '    │ var.token is "s3cr3t-token"\n    │ var.from_secret is "hunter22"\ntoken rejected: s3cr3t-token')
    secrets = ["s3cr3t-token", "hunter22"]
    text = tofu_relay.redacted("TFExecPlanFailed", message, secrets)
    assert all(secret not in text for secret in secrets)
    assert text.count(REDACTED) == 3 and "Invalid value for variable" in text


def test_a_short_secret_is_masked_where_quoted_and_withheld_where_bare() -> None:
    assert tofu_relay.redacted("R", 'var.pin is "ab1"', ["ab1"]) == f"var.pin is {REDACTED}"
    withheld = tofu_relay.redacted("R", "the pin ab1 was refused", ["ab1"])
    assert "ab1" not in withheld and withheld.startswith("R: message withheld")


def test_sensitive_spec_values_are_what_the_resolver_masks() -> None:
    """The values the resolver takes from the Application: every string of a sensitive property."""
    found = tofu_relay.application_of(terraform({"token": "s3cr3t-token", "pins": ["p1n-one", "p1n-two"],
                                                 "cidrBlock": "10.0.0.0/16"}), [TOFU], GROUP)
    assert found is not None
    assert sorted(sensitive_values(found[0].schema, found[1]["spec"])) == ["p1n-one", "p1n-two", "s3cr3t-token"]
