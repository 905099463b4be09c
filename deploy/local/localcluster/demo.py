"""The main job, shown end to end: both services, sample kinds, generated objects side by side.

Run by ``nox -s demo`` after ``python -m localcluster up``. The real helm-controller and
source-controller run next to the services (unless ``up --no-flux``), so the Helm kinds are
installed for real and the demo shows what helm-controller wrote. tofu-controller does not build
here: for each Tofu Application the demo hands the Terraform's variables to real OpenTofu as
tofu-controller's runner would and shows OpenTofu's plan, and the Terraform statuses it still needs
(plan pending, applied) are played, each such line labelled "played".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

import yaml

from . import build, tofurunner
from .cluster import Cluster, ClusterError
from .processes import Process

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
NAMESPACE = "tenant-demo"
#: Metadata the API server adds that only clutters a side-by-side view.
NOISE = ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp")


class Transcript:
    """Prints to the terminal and, optionally, keeps a Markdown copy for docs/."""

    def __init__(self) -> None:
        self.markdown: list[str] = []

    def heading(self, text: str) -> None:
        print(f"\n\033[1m== {text}\033[0m", flush=True)
        self.markdown.append(f"\n### {text}\n")

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.markdown.append(f"{text}\n")

    def block(self, command: str, output: str) -> None:
        print(f"$ {command}\n{output.rstrip()}", flush=True)
        self.markdown.append(f"```console\n$ {command}\n{output.rstrip()}\n```\n")


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in NOISE}
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if "last-applied" not in k}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return {**obj, "metadata": meta}


def side_by_side(left_title: str, left: str, right_title: str, right: str) -> str:
    width = max([len(left_title), *(len(line) for line in left.splitlines())]) + 2
    lines = [f"{left_title:<{width}}| {right_title}", f"{'-' * width}+{'-' * (len(right_title) + 1)}"]
    for a, b in zip_longest(left.splitlines(), right.splitlines(), fillvalue=""):
        lines.append(f"{a:<{width}}| {b}")
    return "\n".join(lines)


def samples(kind: str) -> Iterator[Path]:
    yield from sorted((SAMPLES / kind).glob("*.yaml"))


class Demo:
    def __init__(self, cluster: Cluster, out: Transcript) -> None:
        self.cluster = cluster
        self.out = out

    def kubectl(self, *args: str, input: str | None = None, show: bool = False, display: str = "") -> str:
        result = self.cluster.kubectl(*args, input=input)
        if show:
            self.out.block(display or "kubectl " + " ".join(args), result.stdout)
        return result.stdout

    def get(self, *args: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return loaded

    def wait(self, what: str, check: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result = check()
                if result:
                    return result
            except ClusterError:
                pass
            time.sleep(0.5)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")

    # ---------------------------------------------------------------------------- steps
    def definitions(self) -> None:
        self.out.heading("1. A platform engineer publishes four kinds (two per backend)")
        for path in samples("definitions"):
            self.kubectl("apply", "-f", str(path))
        for plural in ("applicationdefinitions", "tofuapplicationdefinitions"):
            names = [item["metadata"]["name"] for item in self.get(plural)["items"]]
            for name in names:
                self.wait(f"{plural}/{name} to be Accepted", lambda p=plural, n=name: any(
                    c["type"] == "Accepted" and c["status"] == "True"
                    for c in self.get(p, n).get("status", {}).get("conditions", [])))
        self.kubectl("get", "applicationdefinitions,tofuapplicationdefinitions", show=True)
        self.wait("the new kinds in discovery", lambda: "s3buckets" in self.kubectl(
            "api-resources", "--api-group=tofu.apps.cozystack.io", "--cached=false"))
        self.kubectl("api-resources", "--api-group=apps.cozystack.io", show=True)
        self.kubectl("api-resources", "--api-group=tofu.apps.cozystack.io", show=True)

    def applications(self) -> None:
        self.out.heading("2. A tenant applies one object of each kind")
        self.kubectl("apply", "-f", str(SAMPLES / "tenants" / f"{NAMESPACE}.yaml"))
        for path in samples("applications"):
            shown = f"kubectl apply -f {path.relative_to(SAMPLES.parents[1])}"
            self.kubectl("apply", "-f", "-", input=path.read_text(), show=True, display=shown)

    def generated(self) -> None:
        self.out.heading("3. What each backend generated (user object | backing object)")
        pairs = [("postgres", "orders", "helmreleases.helm.toolkit.fluxcd.io", "postgres-orders"),
                 ("vpc", "network", "terraforms.infra.contrib.fluxcd.io", "vpc-network")]
        for kind, name, backing, backing_name in pairs:
            app = clean(self.get(kind, name, "-n", NAMESPACE))
            obj = clean(self.get(backing, backing_name, "-n", NAMESPACE))
            self.out.block(f"kubectl get {kind} {name} -o yaml  |  kubectl get {backing} {backing_name} -o yaml",
                           side_by_side(f"{kind}/{name}", yaml.safe_dump(app, sort_keys=False),
                                        f"{backing.split('.')[0]}/{backing_name}",
                                        yaml.safe_dump(obj, sort_keys=False)))

    def controllers(self) -> None:
        if Process(self.cluster, "helm-controller").running() is not None:
            self.helm_controller()
        else:
            self.helm_played()
        self.tofu_plans()
        self.tofu_played()

    def helm_controller(self) -> None:
        self.out.heading("4. helm-controller installs the Helm kinds (real helm-controller v1.6.2)")
        for release in ("postgres-orders", "redis-cache"):
            self.wait(f"helm-controller to finish {release}", lambda r=release: any(
                c["type"] == "Ready" and c["status"] != "Unknown" and c.get("observedGeneration") ==
                self.get("helmreleases.helm.toolkit.fluxcd.io", r, "-n", NAMESPACE)["metadata"]["generation"]
                for c in self.get("helmreleases.helm.toolkit.fluxcd.io", r, "-n", NAMESPACE)
                .get("status", {}).get("conditions", [])), timeout=300)
        self.kubectl("get", "helmreleases.helm.toolkit.fluxcd.io", "-n", NAMESPACE, show=True)
        status = self.get("helmreleases.helm.toolkit.fluxcd.io", "postgres-orders", "-n", NAMESPACE)["status"]
        self.out.block(f"kubectl get helmrelease postgres-orders -n {NAMESPACE} -o yaml  # .status, as written",
                       yaml.safe_dump({"status": status}, sort_keys=False))
        self.kubectl("get", "configmaps,secrets,services", "-n", NAMESPACE, "-l", "!owner", show=True)

    def helm_played(self) -> None:
        self.out.heading("4. helm-controller's answer (played: `up --no-flux` runs no Flux)")
        self.out.say("played: helm-controller marks postgres-orders Ready")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.status("helmreleases.helm.toolkit.fluxcd.io", "postgres-orders", {
            "observedGeneration": 1, "lastAttemptedRevision": "0.24.1",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "InstallSucceeded", "lastTransitionTime": now,
                 "message": "Helm install succeeded for release tenant-demo/postgres-orders.v1 with chart "
                            "postgres@0.24.1"},
                {"type": "Released", "status": "True", "reason": "InstallSucceeded", "lastTransitionTime": now,
                 "message": "Helm install succeeded"}]})

    def tofu_plans(self) -> None:
        self.out.heading("5. OpenTofu's real plan for each Tofu Application's variables")
        tofu = build.ensure_tofu()
        workspace = self.cluster.dir / "demo-tofu"
        workspace.mkdir(exist_ok=True)
        for name in ("vpc-network", "s3bucket-assets"):
            terraform = self.get("terraforms.infra.contrib.fluxcd.io", name, "-n", NAMESPACE)
            workdir = workspace / name
            shutil.rmtree(workdir, ignore_errors=True)
            tofurunner.prepare(terraform, workdir)
            self.out.block(f"cat {tofurunner.VAR_FILE}  # spec.vars of terraform/{name}, as tofu-controller's "
                           "runner writes them", json.dumps(json.loads((workdir / tofurunner.VAR_FILE).read_text()),
                                                             indent=1))
            self.out.block(f"tofu plan  # {tofurunner.module_dir(terraform).relative_to(SAMPLES.parents[1])}",
                           tofurunner.plan(tofu, workdir))

    def tofu_played(self) -> None:
        self.out.heading("6. tofu-controller's answer (played: tofu-controller does not build here)")
        self.out.say("played: tofu-controller plans s3bucket-assets and waits for approval")
        self.out.say("played: tofu-controller applies vpc-network (approvePlan: auto)")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        revision = "main@sha1:b8e362c206e3d0cbb7ed22ced771a0056455a2fb"
        self.status("terraforms.infra.contrib.fluxcd.io", "s3bucket-assets", {
            "observedGeneration": 1, "lastAttemptedRevision": revision, "lastPlannedRevision": revision,
            "plan": {"pending": "plan-main-b8e362c206"},
            "conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "TerraformPlannedWithChanges",
                 "lastTransitionTime": now, "message": 'Plan generated: set approvePlan: "plan-main-b8e362c206" '
                                                       "to approve this plan."},
                {"type": "Plan", "status": "True", "reason": "TerraformPlannedWithChanges",
                 "lastTransitionTime": now, "message": "Plan generated"}]})
        self.status("terraforms.infra.contrib.fluxcd.io", "vpc-network", {
            "observedGeneration": 1, "lastAttemptedRevision": revision, "lastAppliedRevision": revision,
            "lastPlannedRevision": revision, "plan": {"lastApplied": "plan-main-b8e362c206"},
            "availableOutputs": ["private_subnet_ids", "public_subnet_ids", "vpc_id"],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "TerraformOutputsWritten", "lastTransitionTime": now,
                 "message": f"Outputs written: {revision}"},
                {"type": "Apply", "status": "True", "reason": "TerraformAppliedSucceed", "lastTransitionTime": now,
                 "message": "Applied successfully"}]})

    def status(self, resource: str, name: str, status: dict[str, Any]) -> None:
        self.kubectl("patch", resource, name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": status}))

    def tables(self) -> None:
        self.out.heading("7. kubectl get: Helm kinds and Tofu kinds side by side (Tofu STATUS/PLAN played)")
        self.kubectl("get", "postgreses,redises", "-n", NAMESPACE, show=True)
        self.kubectl("get", "vpcs,s3buckets", "-n", NAMESPACE, show=True)

    def approval(self) -> None:
        self.out.heading("8. Plan approval for a manual Tofu kind (the pending plan id is played)")
        bucket = self.get("s3bucket", "assets", "-n", NAMESPACE)
        conditions = bucket["status"].get("conditions", [])
        awaiting: dict[str, Any] = next((c for c in conditions if c["type"] == "AwaitingApproval"), {})
        self.out.say(f"AwaitingApproval (from the played plan): {awaiting.get('message', '(none)')}")
        wrong = self.cluster.kubectl("annotate", "s3bucket", "assets", "-n", NAMESPACE,
                                     "tofu.apps.cozystack.io/approve-plan=plan-main-b8e3", check=False)
        self.out.block(f"kubectl annotate s3bucket assets -n {NAMESPACE} "
                       "tofu.apps.cozystack.io/approve-plan=plan-main-b8e3",
                       wrong.stderr or wrong.stdout)
        self.kubectl("annotate", "s3bucket", "assets", "-n", NAMESPACE, "--overwrite",
                     "tofu.apps.cozystack.io/approve-plan=plan-main-b8e362c206", show=True)
        approved = self.get("terraforms.infra.contrib.fluxcd.io", "s3bucket-assets", "-n", NAMESPACE)
        self.out.say(f"Terraform s3bucket-assets spec.approvePlan = {approved['spec'].get('approvePlan')!r}")
        self.kubectl("get", "s3buckets", "-n", NAMESPACE, show=True)

    def run(self) -> None:
        self.definitions()
        self.applications()
        self.generated()
        self.controllers()
        self.tables()
        self.approval()
        self.out.heading("Done")
        self.out.say(f"Everything is still running: export KUBECONFIG={self.cluster.kubeconfig} and try "
                     f"`kubectl get postgreses,vpcs -n {NAMESPACE}`; `nox -s down` stops it.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.demo", description=__doc__)
    parser.add_argument("--name", default="default", help="cluster name (default %(default)s)")
    parser.add_argument("--markdown", type=Path, help="also write the transcript as Markdown to this file")
    args = parser.parse_args(argv)
    cluster = Cluster(args.name)
    if not cluster.is_running():
        print("the local control plane is not running: start it with `nox -s up`", file=sys.stderr)
        return 1
    out = Transcript()
    try:
        Demo(cluster, out).run()
    except ClusterError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("".join(out.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
