"""helm_agl end to end with the real helm-controller v1.6.2 and source-controller v1.9.6.

Everything goes through kubectl: the Application is created, changed and deleted through the
aggregated API, helm_agl writes the HelmRelease, source-controller fetches the sample chart from
the chart repository served on 127.0.0.1, and helm-controller installs it on the local
kube-apiserver. What the tests read back (ConfigMaps rendered from the values, Helm's release
Secrets, the conditions helm-controller writes) comes from the real programs.

The status helm-controller writes at each phase is kept in ``tests/data/status/helmrelease-<phase>.yaml`` (run
with ``AGL_RECORD_FLUX=1`` to record it again); every run checks the live status has the recorded shape. The
unit tests of the status projection read those files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from localcluster import flux, services
from localcluster.cluster import Cluster

from tests.flux import events
from tests.flux.kstatus import verdict
from tests.kube import FIXTURES, get_json, kubectl, load_fixture, wait_for
from tests.recorded import STATUS_DIR, record_or_check_event

NS = "tenant-flux"
HR = "helmreleases.helm.toolkit.fluxcd.io"
RECORDED = STATUS_DIR
#: Helm installs, upgrades and uninstalls take a few seconds each on a loaded two-core machine.
SLOW = 180


def definition(name: str = "redis", *, chart: str = "cozystack-redis", annotations: dict[str, str] | None = None,
               prefix: str | None = None) -> dict[str, Any]:
    """The sample redis definition, optionally under another kind name, chart, prefix or annotations."""
    defn = load_fixture("redis.yaml")
    if name != "redis":
        defn["metadata"]["name"] = name
        app = defn["spec"]["application"]
        app.update(kind=name.capitalize(), plural=name + "s", singular=name)
    defn["spec"]["release"]["chartRef"]["name"] = chart
    if prefix is not None:
        defn["spec"]["release"]["prefix"] = prefix
    if annotations is not None:
        defn["metadata"]["annotations"] = annotations
    return defn


@pytest.fixture(scope="module")
def helm(control_plane: Cluster, helm_service: services.Running,
         flux_controllers: flux.Controllers) -> Iterator[Cluster]:
    """helm_agl and Flux running; the tenant namespace with its cozystack-values Secret; redis served."""
    tenant = yaml.safe_load_all((FIXTURES / "tenants" / "tenant-demo.yaml").read_text())
    for doc in tenant:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = NS
        else:
            doc["metadata"]["namespace"] = NS
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(doc))
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition()))
    wait_for(lambda: ready(get_json(control_plane, "helmcharts.source.toolkit.fluxcd.io", "cozystack-redis",
                                    "-n", flux.SOURCES_NAMESPACE)), "HelmChart cozystack-redis Ready", timeout=SLOW)
    wait_for(lambda: "redises" in served(control_plane), "the redis kind", timeout=60)
    yield control_plane


def served(cluster: Cluster) -> str:
    return kubectl(cluster, "api-resources", "--api-group=apps.cozystack.io", "--cached=false", check=False).stdout


def condition(obj: dict[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return dict(cond)
    return None


def ready(obj: dict[str, Any], status: str = "True") -> bool:
    cond = condition(obj)
    return cond is not None and cond["status"] == status


def apply_app(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> None:
    manifest = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": kind,
                "metadata": {"name": name, "namespace": NS}, "spec": spec}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest))


def settled(cluster: Cluster, plural: str, name: str, status: str = "True", generation_of: str | None = None,
            ) -> dict[str, Any]:
    """Wait until the Application's Ready condition is ``status`` for the HelmRelease's current generation."""

    def check() -> dict[str, Any] | None:
        app = get_json(cluster, plural, name, "-n", NS)
        release = get_json(cluster, HR, generation_of, "-n", NS) if generation_of else None
        if release is not None and release.get("status", {}).get("observedGeneration") != \
                release["metadata"]["generation"]:
            return None
        # The Application was read first: a change of the HelmRelease between the two reads leaves it showing the
        # generation before, Ready but not yet observed (kstatus: InProgress). Its own generation must be seen too.
        generation = app["metadata"].get("generation")
        if (app.get("status") or {}).get("observedGeneration", generation) != generation:
            return None
        return app if ready(app, status) else None

    result: dict[str, Any] = wait_for(check, f"{plural}/{name} Ready={status}", timeout=SLOW, interval=1)
    return result


def configmap(cluster: Cluster, release: str) -> dict[str, str]:
    data: dict[str, str] = get_json(cluster, "configmap", f"{release}-values", "-n", NS)["data"]
    return data


def release_secrets(cluster: Cluster, release: str) -> list[str]:
    items = get_json(cluster, "secrets", "-n", NS, "-l", f"owner=helm,name={release}")["items"]
    return sorted(item["metadata"]["name"] for item in items)


def shape(status: dict[str, Any]) -> dict[str, Any]:
    """What must stay the same between runs: the fields present and each condition's type/status/reason."""
    return {"fields": sorted(status),
            "conditions": sorted((c["type"], c["status"], c["reason"]) for c in status.get("conditions", [])),
            "history": sorted(status["history"][0]) if status.get("history") else []}


def recorded(phase: str, release: dict[str, Any]) -> None:
    """Record (``AGL_RECORD_FLUX=1``) or check the shape of helm-controller's status at ``phase``."""
    path = RECORDED / f"helmrelease-{phase}.yaml"
    status = release["status"]
    if os.environ.get("AGL_RECORD_FLUX") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# Status helm-controller v1.6.2 wrote: {phase} (recorded by tests/flux/test_flux_helm.py)\n"
        path.write_text(header + yaml.safe_dump({"status": status}, sort_keys=False))
        return
    assert shape(status) == recorded_shape(phase), f"helm-controller's {phase} status changed shape; see {path}"


def recorded_shape(phase: str) -> dict[str, Any]:
    """The shape of the status recorded at ``phase``."""
    return shape(yaml.safe_load((RECORDED / f"helmrelease-{phase}.yaml").read_text())["status"])


# ---------------------------------------------------------------------------------------------- the lifecycle


def test_install_upgrade_and_uninstall(helm: Cluster) -> None:
    apply_app(helm, "Redis", "cache", {"replicas": 3})
    app = settled(helm, "redises", "cache", generation_of="redis-cache")
    assert app["status"]["version"] == "0.1.0"
    assert verdict(app)[0] == "Current"
    values = configmap(helm, "redis-cache")
    assert values["replicas"] == "3" and values["chartVersion"] == "0.1.0"
    assert json.loads(values["values.json"])["_namespace"] == {"host": "tenant-demo.example.org"}
    assert release_secrets(helm, "redis-cache") == ["sh.helm.release.v1.redis-cache.v1"]
    table = kubectl(helm, "get", "redis", "cache", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "AGE", "VERSION"] and table[1].split()[1] == "True"
    assert table[1].split()[-1] == "0.1.0"
    recorded("installed", get_json(helm, HR, "redis-cache", "-n", NS))

    apply_app(helm, "Redis", "cache", {"replicas": 5})
    wait_for(lambda: configmap(helm, "redis-cache")["replicas"] == "5", "the upgraded values", timeout=SLOW)
    settled(helm, "redises", "cache", generation_of="redis-cache")
    assert release_secrets(helm, "redis-cache") == [f"sh.helm.release.v1.redis-cache.v{n}" for n in (1, 2)]
    recorded("upgraded", get_json(helm, HR, "redis-cache", "-n", NS))

    kubectl(helm, "delete", "redis", "cache", "-n", NS, "--wait=false")
    wait_for(lambda: kubectl(helm, "get", "redis", "cache", "-n", NS, check=False).returncode != 0,
             "the Application to be gone", timeout=SLOW)
    assert release_secrets(helm, "redis-cache") == []
    assert kubectl(helm, "get", "configmap", "redis-cache-values", "-n", NS, check=False).returncode != 0
    assert kubectl(helm, "get", "service", "rfs-redis-cache", "-n", NS, check=False).returncode != 0


def test_failing_value_reports_helm_controllers_message(helm: Cluster) -> None:
    apply_app(helm, "Redis", "broken", {"replicas": 10})
    app = settled(helm, "redises", "broken", status="False")
    message = condition(app)["message"]  # type: ignore[index]
    assert "replicas: 10 is more than this chart supports (9)" in message, message
    # retried forever (RetryOnFailure): in progress as helm-controller says, with the chart's error
    status, said = verdict(get_json(helm, "redises", "broken", "-n", NS))
    assert status == "InProgress" and "replicas: 10 is more than this chart supports (9)" in said, said
    release = get_json(helm, HR, "redis-broken", "-n", NS)
    recorded("failed", release)
    assert kubectl(helm, "get", "redis", "broken", "-n", NS).stdout.splitlines()[1].split()[1] == "False"
    kubectl(helm, "delete", "redis", "broken", "-n", NS)


def test_helm_controller_giving_up_is_stalled_and_failed(helm: Cluster) -> None:
    """helm_agl's RetryOnFailure never gives up; with the strategy taken off the HelmRelease (an operator's edit)
    helm-controller's default remediation (no retries) does after one failed release (an install that timed
    out; a chart that refuses its values fails before any release exists and is retried with backoff):
    Stalled, which the Application keeps, so kstatus says Failed."""
    kubectl(helm, "apply", "-f", "-", input=json.dumps(slow_definition("giveup", "false")))
    wait_for(lambda: "giveups" in served(helm), "the giveup kind", timeout=60)
    apply_app(helm, "Giveup", "ext", {"external": True})
    kubectl(helm, "patch", HR, "giveup-ext", "-n", NS, "--type=json",
            "-p", '[{"op": "remove", "path": "/spec/install/strategy"}]')

    def stalled() -> dict[str, Any] | None:
        release = get_json(helm, HR, "giveup-ext", "-n", NS)
        cond = condition(release, "Stalled")
        current = release.get("status", {}).get("observedGeneration") == release["metadata"]["generation"]
        return release if cond is not None and cond["status"] == "True" and current else None

    release = wait_for(stalled, "helm-controller to give up", timeout=SLOW, interval=1)
    recorded("stalled", release)
    app = get_json(helm, "giveups", "ext", "-n", NS)
    conds = {c["type"]: c for c in app["status"]["conditions"]}
    assert (conds["Stalled"]["status"], conds["Reconciling"]["status"], conds["Ready"]["status"]) == (
        "True", "False", "False")
    assert conds["Stalled"]["reason"] == condition(release, "Stalled")["reason"]  # type: ignore[index]
    assert verdict(app)[0] == "Failed"
    kubectl(helm, "delete", "giveup", "ext", "-n", NS, "--wait=false")
TOO_MANY = "replicas: 10 is more than this chart supports (9)"


def originals_with(cluster: Cluster, release: str, text: str) -> list[dict[str, Any]]:
    """helm-controller's Events about the HelmRelease that say ``text``."""
    return [e for e in events.about(cluster, NS, "HelmRelease", release) if text in e.get("message", "")]


def relayed_in_step(cluster: Cluster, app: str, release: str) -> list[dict[str, Any]] | None:
    """The relayed Events of Application ``app`` once each of helm-controller's Events about ``release`` is
    relayed exactly once, with its count; else None."""
    originals = {f"{NS}/{e['metadata']['name']}": e for e in events.about(cluster, NS, "HelmRelease", release)}
    relayed = events.relayed(cluster, NS, "Redis", app)
    by_origin = [events.origin(e) for e in relayed]
    assert len(by_origin) == len(set(by_origin)), f"an Event was relayed twice: {sorted(by_origin)}"
    if not originals or set(by_origin) != set(originals):
        return None
    if any(e.get("count") != originals[events.origin(e)].get("count") for e in relayed):
        return None
    return relayed


def test_describe_shows_helm_controllers_failure_as_an_event(helm: Cluster) -> None:
    """A tenant who reads only the Application sees helm-controller's own Event about the failed install."""
    apply_app(helm, "Redis", "noisy", {"replicas": 10})
    try:
        original = wait_for(lambda: originals_with(helm, "redis-noisy", TOO_MANY), "helm-controller's Event",
                            timeout=SLOW)[0]
        record_or_check_event("helmrelease-install-failed", original)
        text = wait_for(lambda: TOO_MANY in (d := events.described_events(helm, "redis", "noisy", NS)) and d,
                        "the Event in kubectl describe", timeout=60, interval=1)
        line = next(line for line in text.splitlines() if TOO_MANY in line)
        assert original["reason"] in line and "helm-controller" in line and original["type"] in line, line
        app = get_json(helm, "redis", "noisy", "-n", NS)
        relayed = next(e for e in events.relayed(helm, NS, "Redis", "noisy")
                       if events.origin(e) == f"{NS}/{original['metadata']['name']}")
        assert (relayed["type"], relayed["reason"], relayed["message"]) == \
            (original["type"], original["reason"], original["message"])
        assert relayed["source"]["component"] == relayed["reportingComponent"] == "helm-controller"
        assert relayed["involvedObject"] == {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
                                             "name": "noisy", "namespace": NS, "uid": app["metadata"]["uid"]}
        assert TOO_MANY in events.events_for(helm, "redis", "noisy", NS)
    finally:
        kubectl(helm, "delete", "redis", "noisy", "-n", NS, "--wait=false")


def test_relayed_events_are_written_once_and_follow_the_original_across_a_restart(helm: Cluster) -> None:
    """Deterministic names and server-side apply: the restarted service lists and relays every original again,
    duplicates none, and the original's grown count updates the relayed Event in place."""
    apply_app(helm, "Redis", "restarted", {"replicas": 10})
    try:
        before = wait_for(lambda: relayed_in_step(helm, "restarted", "redis-restarted"), "every Event relayed",
                          timeout=SLOW, interval=1)
        counted = {events.origin(e): e.get("count", 1) for e in before}
        services.stop(helm, services.HELM_AGL)
        services.start(helm, services.HELM_AGL)
        # helm-controller retries the install every 30s: a count above the one before the restart was written
        # by the restarted service (which re-listed every original first).
        after = wait_for(lambda: (r := relayed_in_step(helm, "restarted", "redis-restarted"))
                         and any(e.get("count", 1) > counted.get(events.origin(e), 0) for e in r) and r,
                         "a grown count relayed by the restarted service", timeout=SLOW, interval=1)
        assert {e["metadata"]["name"] for e in before} <= {e["metadata"]["name"] for e in after}
    finally:
        kubectl(helm, "delete", "redis", "restarted", "-n", NS, "--wait=false")


def test_definition_chart_change_rolls_out_and_upgrades(helm: Cluster) -> None:
    newer = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmChart",
             "metadata": {"name": "cozystack-redis-next", "namespace": flux.SOURCES_NAMESPACE},
             "spec": {"chart": "redis", "version": "0.2.0", "interval": "10m",
                      "sourceRef": {"kind": "HelmRepository", "name": flux.HELM_REPOSITORY}}}
    kubectl(helm, "apply", "-f", "-", input=json.dumps(newer))
    apply_app(helm, "Redis", "rolled", {"replicas": 2})
    settled(helm, "redises", "rolled", generation_of="redis-rolled")
    kubectl(helm, "apply", "-f", "-", input=json.dumps(definition(chart="cozystack-redis-next")))
    try:
        wait_for(lambda: configmap(helm, "redis-rolled")["chartVersion"] == "0.2.0", "the upgrade to chart 0.2.0",
                 timeout=SLOW)
        app = settled(helm, "redises", "rolled", generation_of="redis-rolled")
        assert app["status"]["version"] == "0.2.0"
        assert get_json(helm, HR, "redis-rolled", "-n", NS)["spec"]["chartRef"]["name"] == "cozystack-redis-next"
    finally:
        kubectl(helm, "apply", "-f", "-", input=json.dumps(definition()))
        kubectl(helm, "delete", "redis", "rolled", "-n", NS, "--wait=false")


def slow_definition(name: str, disable_wait: str) -> dict[str, Any]:
    """A redis-like kind with a 10s install timeout; Applications with ``external: true`` render a Deployment,
    which never gets ready without a kubelet."""
    return definition(name, prefix=f"{name}-", annotations={
        "release.cozystack.io/helm-install-timeout": "10s",
        "release.cozystack.io/helm-install-disable-wait": disable_wait})


def test_prefix_labels_and_install_timeout_as_helm_controller_reads_them(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=json.dumps(slow_definition("slowcache", "false")))
    wait_for(lambda: "slowcaches" in served(helm), "the slowcache kind", timeout=60)
    apply_app(helm, "Slowcache", "ext", {"external": True})
    running: list[dict[str, Any]] = []

    def install_status_complete() -> bool:
        """helm-controller writes the running install's status in more than one patch (the conditions first, the
        lastAttempted* fields after): wait for the status to reach the recorded shape while the install runs."""
        release = _running_install(get_json(helm, HR, "slowcache-ext", "-n", NS))
        if release is not None:
            running.append(release)
        return release is not None and (os.environ.get("AGL_RECORD_FLUX") == "1"
                                        or shape(release["status"]) == recorded_shape("installing"))

    try:
        wait_for(install_status_complete, "helm-controller running the install", timeout=SLOW, interval=0.2)
    except AssertionError:
        assert running, "helm-controller never ran the install"
    recorded("installing", running[-1])  # on a timeout, fails with the difference
    app = settled(helm, "slowcaches", "ext", status="False")
    release = get_json(helm, HR, "slowcache-ext", "-n", NS)
    assert release["metadata"]["labels"]["sharding.fluxcd.io/key"] == "tenants"
    assert release["spec"]["install"]["timeout"] == "10s"
    message = condition(app)["message"]  # type: ignore[index]
    assert "forbidden" not in message, message
    assert "slowcache-ext" in message and re.search(r"deadline|timed out|timeout waiting", message), message
    recorded("timed-out", release)
    assert release_secrets(helm, "slowcache-ext"), "Helm recorded the failed release under the prefixed name"
    kubectl(helm, "delete", "slowcache", "ext", "-n", NS, "--wait=false")


def _running_install(release: dict[str, Any] | None) -> dict[str, Any] | None:
    """The HelmRelease while helm-controller runs its first install (Ready Unknown, Reconciling True), else None."""
    if release is None or release.get("status", {}).get("failures"):
        return None
    cond, reconciling = condition(release), condition(release, "Reconciling")
    running = (cond is not None and cond["status"] == "Unknown" and reconciling is not None
               and reconciling["status"] == "True" and "'install'" in reconciling.get("message", ""))
    return release if running else None


def test_disable_wait_as_helm_controller_reads_it(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=json.dumps(slow_definition("nowait", "true")))
    wait_for(lambda: "nowaits" in served(helm), "the nowait kind", timeout=60)
    apply_app(helm, "Nowait", "ext", {"external": True})
    assert get_json(helm, HR, "nowait-ext", "-n", NS)["spec"]["install"]["disableWait"] is True
    settled(helm, "nowaits", "ext", generation_of="nowait-ext")
    assert get_json(helm, "deployment", "nowait-ext-external", "-n", NS)["status"].get("readyReplicas") is None
    kubectl(helm, "delete", "nowait", "ext", "-n", NS, "--wait=false")


def test_a_changed_disable_wait_annotation_is_rolled_out(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=json.dumps(slow_definition("latewait", "false")))
    wait_for(lambda: "latewaits" in served(helm), "the latewait kind", timeout=60)
    apply_app(helm, "Latewait", "ext", {})
    settled(helm, "latewaits", "ext", generation_of="latewait-ext")
    try:
        kubectl(helm, "apply", "-f", "-", input=json.dumps(slow_definition("latewait", "true")))
        wait_for(lambda: get_json(helm, HR, "latewait-ext", "-n", NS)["spec"]["install"].get("disableWait") is True,
                 "disableWait rolled out to the HelmRelease", timeout=30)
    finally:
        kubectl(helm, "delete", "latewait", "ext", "-n", NS, "--wait=false")


def test_recorded_statuses_carry_what_the_projection_reads() -> None:
    """helm_agl projects ``status.version`` from ``lastAttemptedRevision`` and the ``Ready``/``Released``
    conditions (SPEC §2); its unit tests read the statuses recorded here. Every recorded status must carry those
    fields, each condition with the fields of a Kubernetes condition."""
    condition_fields = {"type", "status", "reason", "message", "observedGeneration", "lastTransitionTime"}
    phases = set()
    for path in sorted(RECORDED.glob("helmrelease-*.yaml")):
        real = yaml.safe_load(path.read_text())["status"]
        phases.add(path.stem.removeprefix("helmrelease-"))
        types = {c["type"]: c for c in real["conditions"]}
        assert "Ready" in types, path.name
        assert isinstance(real["lastAttemptedRevision"], str), path.name
        assert all(set(c) == condition_fields for c in real["conditions"]), path.name
    assert phases >= {"installing", "installed", "upgraded", "failed", "timed-out", "installed-external-artifact",
                      "stalled"}
    installed = yaml.safe_load((RECORDED / "helmrelease-installed.yaml").read_text())["status"]
    # From a HelmChart source the revision is the bare chart version (from an OCIRepository it would be
    # "<version>+<digest>" with a lastAttemptedRevisionDigest): VERSION shows exactly the chart version.
    assert installed["lastAttemptedRevision"] == "0.1.0" and "lastAttemptedRevisionDigest" not in installed
    installing = yaml.safe_load((RECORDED / "helmrelease-installing.yaml").read_text())["status"]
    # While the first install runs there is no Released condition yet: Ready is Unknown and Reconciling True.
    assert {(c["type"], c["status"]) for c in installing["conditions"]} == {("Ready", "Unknown"),
                                                                             ("Reconciling", "True")}
    failed = yaml.safe_load((RECORDED / "helmrelease-failed.yaml").read_text())["status"]
    # helm_agl writes RetryOnFailure and no remediation: a failed install is retried forever, reported by a
    # third condition (Reconciling/ProgressingWithRetry) next to Ready=False, never Stalled/RetriesExceeded.
    assert {(c["type"], c["reason"]) for c in failed["conditions"]} == {
        ("Ready", "InstallFailed"), ("Released", "InstallFailed"), ("Reconciling", "ProgressingWithRetry")}


def test_cozystack_shaped_definition_installs_through_an_external_artifact(helm: Cluster) -> None:
    """The sample postgres definition is cozystack's shape: chartRef ExternalArtifact, waitStrategy poller and
    health checks for a kind no chart here renders."""
    kubectl(helm, "apply", "-f", "-", input=json.dumps(load_fixture("postgres.yaml")))
    wait_for(lambda: "postgreses" in served(helm), "the postgres kind", timeout=60)
    apply_app(helm, "Postgres", "orders", {"replicas": 3})
    app = settled(helm, "postgreses", "orders", generation_of="postgres-orders")
    assert app["status"]["version"] == "0.24.1"
    assert configmap(helm, "postgres-orders")["replicas"] == "3"
    release = get_json(helm, HR, "postgres-orders", "-n", NS)
    recorded("installed-external-artifact", release)
    # The one status not written by a real controller says so on the object itself.
    ref = release["spec"]["chartRef"]
    assert ref["kind"] == "ExternalArtifact"
    artifact = get_json(helm, "externalartifacts.source.toolkit.fluxcd.io", ref["name"], "-n",
                        ref.get("namespace") or NS)
    assert artifact["metadata"]["annotations"][flux.STAND_IN_ANNOTATION] == flux.STAND_IN_NOTE
    artifact_ready = condition(artifact)
    assert artifact_ready is not None and artifact_ready["message"].startswith("played by localcluster")
    kubectl(helm, "delete", "postgres", "orders", "-n", NS, "--wait=false")


def test_helm_controller_leaves_the_read_fence_alone(helm: Cluster) -> None:
    """The fence a consistent list may write (docs/operating.md) is a suspended HelmRelease: helm-controller
    takes it in (its finalizer) and installs nothing.

    The fence is written here, not found. One left by an earlier test or tier may already carry the finalizer,
    and a write that leaves its generation as it is makes helm-controller reconcile nothing (its predicate), so
    the line this test waits for may never come: a CI run waited 180 s for it, with no line about the fence in
    helm-controller's log. Only the log written after the fence counts."""
    fence, fence_ns = "read-fence.redis", "default"
    log = helm.logs_dir / "helm-controller.log"
    kubectl(helm, "delete", HR, fence, "-n", fence_ns, "--ignore-not-found", "--timeout=120s")
    seen = len(log.read_bytes())
    kubectl(helm, "create", "configmap", f"elsewhere-{os.getpid()}", "-n", NS)  # the kind's stream sees nothing
    kubectl(helm, "get", "redises", "-n", NS)  # a consistent list: the service writes its fence
    wait_for(lambda: "finalizers.fluxcd.io" in (get_json(helm, HR, fence, "-n", fence_ns)["metadata"]
                                                 .get("finalizers") or []), "helm-controller took the fence in",
             timeout=SLOW)

    def suspended_since_written() -> bool:
        lines = log.read_bytes()[seen:].decode(errors="replace").splitlines()
        return any('"reconciliation is suspended for this object"' in line and f'"name":"{fence}"' in line
                   for line in lines)

    wait_for(suspended_since_written, "helm-controller saw the new fence suspended", timeout=SLOW)
    assert condition(get_json(helm, HR, fence, "-n", fence_ns)) is None, "no install was attempted"
    releases = kubectl(helm, "get", "secrets", "-n", fence_ns, "-l", "owner=helm", "-o", "name").stdout
    assert "read-fence" not in releases, releases
