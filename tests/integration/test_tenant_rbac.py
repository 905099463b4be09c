"""Tenant isolation through kube-apiserver with real users: the per-kind roles and plan approval as a permission.

Each user is a client certificate signed by the cluster CA (``Cluster.user_kubeconfig``) and talks to kube-apiserver
with kubectl, which proxies to tofu_agl behind its APIService; kube-apiserver authorizes each request and the
service asks again (SubjectAccessReview) for what only it can see: ``approve`` when a write sets the approve-plan
annotation, ``get`` on the object a plan is kept in when ``<plural>/plan`` is read.

The roles the users are bound to are the ones tofu_agl's reconciler keeps for each Accepted kind
(``cozystack:<plural>.<group>:<role>``). The local cluster runs no kube-controller-manager, so no
controller fills the built-in ``view``/``edit``/``admin`` from their ``aggregationRule``: the isolation tests
bind the per-kind roles directly, and the aggregation labels are tested separately, by doing what the
clusterrole-aggregation controller would do with the real built-in roles' selectors
(:func:`tests.integration.test_chart.aggregate_builtin_roles`) before a user bound only to the built-in ``edit``
uses a kind that was just accepted.

There is no tofu-controller in this tier: a pending plan is written into the Terraform's status from the status
tofu-controller v0.16.5 recorded (tests/data/status/terraform-pending.yaml), as the controller would write it, and
the readable plan's ConfigMap under the name the controller gives it. The flux tier reads real ones.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import services
from localcluster.cluster import Cluster

from tests.integration.test_chart import aggregate_builtin_roles, allowed
from tests.kube import get_json, kubectl, load_fixture, wait_for
from tests.recorded import load_recorded

GROUP = "tofu.apps.cozystack.io"
NS_A, NS_B = "rbac-a", "rbac-b"
APPROVE = "tofu.apps.cozystack.io/approve-plan"
PENDING_STATUS: dict[str, Any] = load_recorded("terraform-pending")["status"]
PLAN_ID: str = PENDING_STATUS["plan"]["pending"]


def role(plural: str, name: str) -> str:
    return f"cozystack:{plural}.{GROUP}:{name}"


def binding(user: str, ns: str, cluster_role: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{cluster_role.replace(':', '-')}", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}


def bucket(name: str, ns: str = NS_A, spec: dict[str, Any] | None = None, **annotations: str) -> str:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    return json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": "S3Bucket", "metadata": meta, "spec": spec or {}})


class Users:
    """kubectl as one of the test's users (each its own client certificate)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._configs: dict[str, Path] = {}

    def run(self, user: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        if user not in self._configs:
            self._configs[user] = self.cluster.user_kubeconfig(user)
        return kubectl(self.cluster, *args, input=input, check=False, kubeconfig=self._configs[user])

    def ok(self, user: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = self.run(user, *args, input=input)
        assert result.returncode == 0, f"{user}: kubectl {' '.join(args)}: {result.stderr}"
        return result

    def refused(self, user: str, *args: str, input: str | None = None) -> str:
        result = self.run(user, *args, input=input)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (user, args, result.stdout,
                                                                                  result.stderr)
        return result.stderr


def terraform(cluster: Cluster, name: str, ns: str = NS_A) -> dict[str, Any]:
    tf: dict[str, Any] = get_json(cluster, "terraforms.infra.contrib.fluxcd.io", f"s3bucket-{name}", "-n", ns)
    return tf


def pend(cluster: Cluster, name: str, plan_at: str = "2026-11-26T11:48:22Z") -> None:
    """Write the recorded pending status onto the Terraform of S3Bucket ``name``, as tofu-controller would."""
    status = copy.deepcopy(PENDING_STATUS)
    status["lastPlanAt"] = plan_at
    status["observedGeneration"] = terraform(cluster, name)["metadata"]["generation"]
    kubectl(cluster, "patch", "terraforms.infra.contrib.fluxcd.io", f"s3bucket-{name}", "-n", NS_A,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def printed_command(users: Users, user: str, name: str) -> str:
    """The approval command the AwaitingApproval condition prints (read as ``user``)."""
    def read() -> str:
        app = json.loads(users.ok(user, "get", "s3bucket", name, "-n", NS_A, "-o", "json").stdout)
        cond = next((c for c in app.get("status", {}).get("conditions", []) if c["type"] == "AwaitingApproval"), {})
        message = str(cond.get("message") or "")
        return message.split("approve it with: ", 1)[1] if cond.get("status") == "True" and PLAN_ID in message else ""
    command: str = wait_for(read, f"{name} awaiting approval")
    return command


def run_printed(users: Users, user: str, command: str) -> list[subprocess.CompletedProcess[str]]:
    """Each step of ``kubectl annotate ... && kubectl annotate ...`` as ``user``, stopping at the first failure."""
    results = []
    for step in command.split(" && "):
        argv = shlex.split(step)
        assert argv[0] == "kubectl", command
        results.append(users.run(user, *argv[1:]))
        if results[-1].returncode != 0:
            break
    return results


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def tenants(control_plane: Cluster, tofu_service: services.Running) -> Iterator[Users]:
    """s3buckets and vpcs served; tina edits and vic views in namespace A; abe edits and approves there."""
    for ns in (NS_A, NS_B):
        kubectl(control_plane, "create", "namespace", ns, check=False)
    for definition in ("bucket.yaml", "vpc.yaml"):
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture(definition)))
    for plural in ("s3buckets", "vpcs"):
        wait_for(lambda plural=plural: kubectl(control_plane, "get", "clusterrole", role(plural, "approver"),
                                               check=False).returncode == 0, f"the {plural} roles", timeout=60)
    bindings = [binding("tina", NS_A, role("s3buckets", "edit")), binding("vic", NS_A, role("s3buckets", "view")),
                binding("abe", NS_A, role("s3buckets", "edit")), binding("abe", NS_A, role("s3buckets", "approver"))]
    kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(bindings))
    users = Users(control_plane)
    wait_for(lambda: users.run("tina", "get", "s3buckets", "-n", NS_A).returncode == 0, "tina's binding")
    yield users
    kubectl(control_plane, "delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(bindings), check=False)


# ------------------------------------------------------------------------------------ the roles


def test_the_service_keeps_roles_for_exactly_its_accepted_kinds(control_plane: Cluster, tenants: Users) -> None:
    """A definition brings view/edit/admin/approver for its kind; deleting it takes them away."""
    widget = copy.deepcopy(load_fixture("bucket.yaml"))
    widget["metadata"]["name"] = "rbacwidget"
    widget["spec"]["application"].update(kind="RbacWidget", plural="rbacwidgets", singular="rbacwidget")
    widget["spec"]["release"]["prefix"] = "rbacwidget-"
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(widget))
    try:
        roles = wait_for(lambda: {r["metadata"]["name"]: r for r in get_json(
            control_plane, "clusterroles", "-l", "cozystack.io/kind-role-resource=rbacwidgets")["items"]}
            if len(get_json(control_plane, "clusterroles", "-l",
                            "cozystack.io/kind-role-resource=rbacwidgets")["items"]) == 4 else None,
            "the rbacwidgets roles", timeout=60)
        assert set(roles) == {role("rbacwidgets", r) for r in ("view", "edit", "admin", "approver")}
        edit = roles[role("rbacwidgets", "edit")]
        assert edit["rules"] == [
            {"apiGroups": [GROUP], "resources": ["rbacwidgets", "rbacwidgets/plan"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": ["rbacwidgets"],
             "verbs": ["create", "update", "patch", "delete", "deletecollection"]}]
        assert edit["metadata"]["labels"]["cozystack.io/kind-role-of"] == GROUP
        fields = get_json(control_plane, "clusterrole", role("rbacwidgets", "edit"),
                          "--show-managed-fields")["metadata"]["managedFields"]
        assert [(f["manager"], f["operation"]) for f in fields] == [("tofu-agl", "Apply")]
        # The plural renamed: the roles follow it.
        widget["spec"]["application"].update(plural="rbacwidgetz")
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(widget))
        wait_for(lambda: len(get_json(control_plane, "clusterroles", "-l",
                                      "cozystack.io/kind-role-resource=rbacwidgetz")["items"]) == 4
                 and not get_json(control_plane, "clusterroles", "-l",
                                  "cozystack.io/kind-role-resource=rbacwidgets")["items"],
                 "the roles renamed with the plural", timeout=60)
        renamed = get_json(control_plane, "clusterrole", role("rbacwidgetz", "view"))
        assert renamed["rules"][0]["resources"] == ["rbacwidgetz", "rbacwidgetz/plan"]
    finally:
        kubectl(control_plane, "delete", "tofuapplicationdefinition", "rbacwidget", "--ignore-not-found")
    wait_for(lambda: not get_json(control_plane, "clusterroles", "-l",
                                  "cozystack.io/kind-role-resource=rbacwidgetz")["items"], "the roles removed",
             timeout=60)
    # The other kinds' roles stay.
    kubectl(control_plane, "get", "clusterrole", role("s3buckets", "edit"))


def test_a_new_kind_is_usable_by_editors_once_accepted(control_plane: Cluster, tenants: Users) -> None:
    """ed is bound to the cluster's built-in edit role only; nobody grants anything when a kind is published.

    kube-controller-manager's aggregation is emulated (see the module docstring) with the built-in roles' real
    selectors, so this proves the labels of the per-kind roles put them into edit (and not the approver into it).
    """
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(binding("ed", NS_A, "edit")))
    gadget = copy.deepcopy(load_fixture("bucket.yaml"))
    gadget["metadata"]["name"] = "rbacgadget"
    gadget["spec"]["application"].update(kind="RbacGadget", plural="rbacgadgets", singular="rbacgadget")
    gadget["spec"]["release"]["prefix"] = "rbacgadget-"
    previous: dict[str, Any] = {}
    try:
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(gadget))
        wait_for(lambda: kubectl(control_plane, "get", "clusterrole", role("rbacgadgets", "edit"), check=False)
                 .returncode == 0, "the rbacgadgets roles", timeout=60)
        previous = aggregate_builtin_roles(control_plane)
        new = json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": "RbacGadget",
                          "metadata": {"name": "g1", "namespace": NS_A}, "spec": {}})
        wait_for(lambda: tenants.run("ed", "create", "-f", "-", input=new).returncode == 0, "ed creates a gadget")
        tenants.ok("ed", "get", "rbacgadget", "g1", "-n", NS_A)
        user, groups = "ed", ["system:authenticated"]
        assert not allowed(control_plane, user, groups, "approve", GROUP, "rbacgadgets", namespace=NS_A)
        tenants.ok("ed", "delete", "rbacgadget", "g1", "-n", NS_A)
        # The kind goes, and with it what edit granted for it.
        kubectl(control_plane, "delete", "tofuapplicationdefinition", "rbacgadget")
        wait_for(lambda: kubectl(control_plane, "get", "clusterrole", role("rbacgadgets", "edit"), check=False)
                 .returncode != 0, "the rbacgadgets roles removed", timeout=60)
        aggregate_builtin_roles(control_plane)
        assert not allowed(control_plane, user, groups, "create", GROUP, "rbacgadgets", namespace=NS_A)
    finally:
        for name, rules in previous.items():
            kubectl(control_plane, "patch", "clusterrole", name, "--type=merge", "-p", json.dumps({"rules": rules}))
        kubectl(control_plane, "delete", "tofuapplicationdefinition", "rbacgadget", "--ignore-not-found")
        kubectl(control_plane, "delete", "rolebinding", binding("ed", NS_A, "edit")["metadata"]["name"], "-n", NS_A,
                "--ignore-not-found")


# ------------------------------------------------------------------------------------ isolation


def test_editor_writes_in_its_namespace_only(control_plane: Cluster, tenants: Users) -> None:
    tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket("iso"))
    assert terraform(control_plane, "iso")["metadata"]["name"] == "s3bucket-iso"
    tenants.ok("tina", "patch", "s3bucket", "iso", "-n", NS_A, "--type=merge", "-p", '{"spec":{"versioning":false}}')
    tenants.refused("tina", "apply", "--server-side", "-f", "-", input=bucket("iso", NS_B))
    tenants.refused("tina", "get", "s3buckets", "-n", NS_B)
    # The backing objects stay out of reach, and so do other kinds.
    tenants.refused("tina", "get", "terraforms.infra.contrib.fluxcd.io", "-n", NS_A)
    tenants.refused("tina", "get", "vpcs", "-n", NS_A)
    vpc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "VPC", "metadata": {"name": "iso", "namespace": NS_A},
           "spec": {"region": "eu-1"}}
    tenants.refused("tina", "create", "-f", "-", input=json.dumps(vpc))
    tenants.ok("tina", "delete", "s3bucket", "iso", "-n", NS_A)
    assert kubectl(control_plane, "get", "s3bucket", "iso", "-n", NS_B, check=False).returncode != 0


def test_viewer_reads_and_cannot_write(control_plane: Cluster, tenants: Users) -> None:
    tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket("seen"))
    assert tenants.ok("vic", "get", "s3bucket", "seen", "-n", NS_A, "-o", "name").stdout.strip() == \
        "s3bucket.tofu.apps.cozystack.io/seen"
    tenants.ok("vic", "get", "s3buckets", "-n", NS_A)
    before = terraform(control_plane, "seen")["metadata"]["resourceVersion"]
    tenants.refused("vic", "patch", "s3bucket", "seen", "-n", NS_A, "--type=merge", "-p", '{"spec":{"tags":{"a":"b"}}}')
    tenants.refused("vic", "delete", "s3bucket", "seen", "-n", NS_A)
    tenants.refused("vic", "apply", "--server-side", "-f", "-", input=bucket("vics"))
    assert terraform(control_plane, "seen")["metadata"]["resourceVersion"] == before


def test_user_without_a_role_is_refused(tenants: Users) -> None:
    for args in (("get", "s3buckets", "-n", NS_A), ("get", "s3bucket", "seen", "-n", NS_A)):
        tenants.refused("nobody", *args)
    tenants.refused("nobody", "apply", "--server-side", "-f", "-", input=bucket("nobodys"))


# ------------------------------------------------------------------------------------ approval


def test_editor_cannot_approve_by_any_write(control_plane: Cluster, tenants: Users) -> None:
    """403 naming the missing verb, before anything else is checked, and nothing written."""
    tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket("unapproved"))
    pend(control_plane, "unapproved")
    command = printed_command(tenants, "tina", "unapproved")
    before = terraform(control_plane, "unapproved")
    steps = run_printed(tenants, "tina", command)
    message = steps[-1].stderr
    assert steps[-1].returncode != 0 and 'cannot approve resource "s3buckets"' in message, message
    assert f'in API group "{GROUP}"' in message
    approved = {APPROVE: PLAN_ID}
    live = json.loads(tenants.ok("tina", "get", "s3bucket", "unapproved", "-n", NS_A, "-o", "json").stdout)
    live["metadata"]["annotations"] = {**(live["metadata"].get("annotations") or {}), **approved}
    for args, body in ((("apply", "--server-side", "--force-conflicts", "-f", "-"), bucket("unapproved", **approved)),
                       (("replace", "-f", "-"), json.dumps(live)),
                       (("patch", "s3bucket", "unapproved", "-n", NS_A, "--type=json", "-p",
                         json.dumps([{"op": "add", "path": "/metadata/annotations",
                                      "value": approved}])), None)):
        assert 'cannot approve resource "s3buckets"' in tenants.refused("tina", *args, input=body), args
    # A create that approves is refused for the permission too (not only as invalid: no plan is pending yet).
    assert 'cannot approve' in tenants.refused("tina", "create", "-f", "-", input=bucket("born-approved", **approved))
    after = terraform(control_plane, "unapproved")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["approvePlan"] == ""


def test_approver_approves_with_both_forms_of_the_printed_command(control_plane: Cluster, tenants: Users) -> None:
    """abe (edit + approver) runs the one-step command, then, for a replan that got the same id, the two-step one;
    tina can take the first step of the two-step command (removing the annotation approves nothing) but not the
    second."""
    for name in ("approved", "again"):
        tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket(name))
        pend(control_plane, name)
        command = printed_command(tenants, "abe", name)
        assert " && " not in command
        assert all(step.returncode == 0 for step in run_printed(tenants, "abe", command)), command
        assert terraform(control_plane, name)["spec"]["approvePlan"] == PLAN_ID
        # A variables-only change: the approval is reset, and tofu-controller's replan gets the same id.
        tenants.ok("tina", "patch", "s3bucket", name, "-n", NS_A, "--type=merge", "-p", '{"spec":{"region":"x-1"}}')
        assert terraform(control_plane, name)["spec"]["approvePlan"] == ""
        pend(control_plane, name, plan_at="2026-11-26T12:00:00Z")
    two_step = printed_command(tenants, "abe", "again")
    assert f"{APPROVE}- && " in two_step, two_step
    assert all(step.returncode == 0 for step in run_printed(tenants, "abe", two_step)), two_step
    assert terraform(control_plane, "again")["spec"]["approvePlan"] == PLAN_ID
    events = get_json(control_plane, "events", "-n", NS_A, "--field-selector", "reason=PlanApproved")["items"]
    assert any("abe approved" in e["message"] for e in events), [e["message"] for e in events]

    two_step = printed_command(tenants, "tina", "approved")
    first, second = run_printed(tenants, "tina", two_step)
    assert first.returncode == 0, first.stderr
    assert second.returncode != 0 and 'cannot approve resource "s3buckets"' in second.stderr, second.stderr
    assert terraform(control_plane, "approved")["spec"]["approvePlan"] == ""


def test_plan_is_served_only_to_who_may_read_its_configmap(control_plane: Cluster, tenants: Users) -> None:
    """vic may get s3buckets/plan, but the plan comes from a ConfigMap: without get on it, 403 naming it."""
    tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket("planned"))
    pend(control_plane, "planned")
    name = "tfplan-default-s3bucket-planned"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": name, "namespace": NS_A, "annotations": {"savedPlan": PLAN_ID},
        "labels": {"infra.contrib.fluxcd.io/plan-name": "s3bucket-planned",
                   "infra.contrib.fluxcd.io/plan-workspace": "default"}},
        "data": {"tfplan": "Plan: 1 to add, 0 to change, 0 to destroy.\n"}}
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(configmap))
    path = f"/apis/{GROUP}/v1alpha1/namespaces/{NS_A}/s3buckets/planned/plan"
    message = tenants.refused("vic", "get", "--raw", path)
    assert f'configmaps "{name}" is forbidden' in message and 'cannot get resource "configmaps"' in message, message
    reader = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "plan-reader", "namespace": NS_A},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name], "verbs": ["get"]}]},
              {**binding("vic", NS_A, "plan-reader"),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "plan-reader"}}]
    kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(reader))
    text = wait_for(lambda: tenants.run("vic", "get", "--raw", path).stdout, "vic reads the plan")
    assert text.startswith("Plan: 1 to add"), text
    tenants.refused("nobody", "get", "--raw", path)


def test_a_plan_split_into_chunks_is_read_by_their_names(control_plane: Cluster, tenants: Users) -> None:
    """tofu-controller names the objects of a plan too large for one ``<name>-0``, ``<name>-1``, ... (each with its
    index in an annotation); the service gets them by those names, in order, with no list."""
    tenants.ok("tina", "apply", "--server-side", "-f", "-", input=bucket("chunky"))
    pend(control_plane, "chunky")
    base = "tfplan-default-s3bucket-chunky"
    parts = ["Plan: 2 to add, 0 to change, 0 to destroy.\n", "  # aws_s3_bucket.this will be created\n"]
    chunks = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": f"{base}-{i}", "namespace": NS_A,
        "annotations": {"savedPlan": PLAN_ID, "infra.contrib.fluxcd.io/plan-chunk": str(i)}},
        "data": {"tfplan": part}} for i, part in enumerate(parts)]
    kubectl(control_plane, "apply", "-f", "-", input=yaml.safe_dump_all(chunks))
    path = f"/apis/{GROUP}/v1alpha1/namespaces/{NS_A}/s3buckets/chunky/plan"
    assert kubectl(control_plane, "get", "--raw", path).stdout == "".join(parts)
