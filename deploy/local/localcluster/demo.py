"""The main job, shown end to end: both services, sample kinds, generated objects side by side.

Run by ``nox -s demo`` after ``python -m localcluster up``.  No Flux controller runs on the local
control plane, so where the demo needs a controller's answer (a HelmRelease becoming Ready, a
Terraform waiting for plan approval) it writes a realistic status the way helm-controller and
tofu-controller would, and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

import yaml

from .cluster import Cluster, ClusterError

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
        self.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
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
        self.out.heading("4. The controllers answer (played by the demo: no Flux runs here)")
        self.out.say("helm-controller marks postgres-orders Ready; tofu-controller plans s3bucket-assets and "
                     "waits for approval; vpc-network (approvePlan: auto) is applied.")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.status("helmreleases.helm.toolkit.fluxcd.io", "postgres-orders", {
            "observedGeneration": 1, "lastAttemptedRevision": "0.24.1",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "InstallSucceeded", "lastTransitionTime": now,
                 "message": "Helm install succeeded for release tenant-demo/postgres-orders.v1 with chart "
                            "postgres@0.24.1"},
                {"type": "Released", "status": "True", "reason": "InstallSucceeded", "lastTransitionTime": now,
                 "message": "Helm install succeeded"}]})
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
        self.out.heading("5. kubectl get: Helm kinds and Tofu kinds side by side")
        self.kubectl("get", "postgreses,redises", "-n", NAMESPACE, show=True)
        self.kubectl("get", "vpcs,s3buckets", "-n", NAMESPACE, show=True)

    def approval(self) -> None:
        self.out.heading("6. Plan approval for a manual Tofu kind")
        bucket = self.get("s3bucket", "assets", "-n", NAMESPACE)
        conditions = bucket["status"].get("conditions", [])
        awaiting: dict[str, Any] = next((c for c in conditions if c["type"] == "AwaitingApproval"), {})
        self.out.say(f"AwaitingApproval: {awaiting.get('message', '(none)')}")
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
