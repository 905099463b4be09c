"""The main job, shown end to end: both services, sample kinds, generated objects side by side.

Run by ``nox -s demo`` after ``python -m localcluster up``. The real source-controller,
helm-controller, tofu-controller and kustomize-controller run next to the services (unless ``up
--no-flux``), so the Helm kinds are installed and the Tofu kinds planned, approved, applied and
destroyed for real: every status the demo shows was written by those controllers and OpenTofu. It ends
with the sample Applications applied from git by kustomize-controller and waited on with kstatus. The
one stand-in is cozystack's artifact publisher (the postgres chart's ExternalArtifact), said so in the
output and on the object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

import yaml

from . import flux, gitserver, samples
from .cluster import Cluster, ClusterError
from .processes import Process

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
NAMESPACE = "tenant-demo"
#: Where the Kustomization of the last step applies the sample Applications (``targetNamespace``).
GITOPS_NAMESPACE = "tenant-gitops"
#: The git repository of the last step, and the sample Applications it holds: those that turn healthy on their
#: own (the S3 bucket kind waits for a person to approve its plan).
GITOPS_REPOSITORY = "sample-applications"
GITOPS_APPLICATIONS = ("postgres-orders.yaml", "redis-cache.yaml", "vpc-network.yaml")
KUSTOMIZATIONS = "kustomizations.kustomize.toolkit.fluxcd.io"
#: Metadata the API server adds that only clutters a side-by-side view.
NOISE = ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp")
#: The definition kinds the demo publishes (``cozystack.io``), and the resource each is read back as.
DEFINITION_PLURALS = {"ApplicationDefinition": "applicationdefinitions",
                      "TofuApplicationDefinition": "tofuapplicationdefinitions"}


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


def sample_files(kind: str) -> Iterator[Path]:
    yield from sorted((SAMPLES / kind).glob("*.yaml"))


def applied_definitions(files: Iterable[Path]) -> list[tuple[str, str]]:
    """``(plural, name)`` of every definition in ``files``, the ones the demo applies: those it waits for.

    Definitions already in the cluster (a rejected one left over from earlier work, say) are not the demo's:
    waiting for all of them would fail the demo on someone else's definition."""
    found: set[tuple[str, str]] = set()
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in DEFINITION_PLURALS \
                    or str(doc.get("apiVersion", "")).split("/")[0] != "cozystack.io":
                continue
            found.add((DEFINITION_PLURALS[doc["kind"]], doc["metadata"]["name"]))
    return sorted(found)


class Demo:
    def __init__(self, cluster: Cluster, out: Transcript) -> None:
        self.cluster = cluster
        self.out = out
        self.applied_at = time.monotonic()

    def since_applied(self, what: str) -> None:
        self.out.say(f"{what} {time.monotonic() - self.applied_at:.0f}s after the Applications were applied")

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
        local = samples.local_definitions(self.cluster.dir / "samples" / "definitions",
                                          flux.state_kubeconfig(self.cluster))
        self.out.say("(Applied from local copies: the Tofu definitions reach their state through a kubeconfig instead "
                     f"of a pod's in-cluster config, see deploy/samples/README.md; {local})")
        # The local copies of today's samples (any other file there is not one the demo publishes).
        files = [local / sample.name for sample in sample_files("definitions")]
        for path in files:
            self.kubectl("apply", "-f", str(path))
        for plural, name in applied_definitions(files):  # its own only: not whatever else the cluster holds
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
        for path in sample_files("applications"):
            shown = f"kubectl apply -f {path.relative_to(SAMPLES.parents[1])}"
            self.kubectl("apply", "-f", "-", input=path.read_text(), show=True, display=shown)
        self.applied_at = time.monotonic()

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
        if Process(self.cluster, "tofu-controller").running() is None:
            self.out.heading("4. No controllers run (`up --no-flux`): nothing reconciles the objects above")
            self.out.say("Run `nox -s down` and `nox -s demo` (or `nox -s up` without --no-flux) for the real "
                         "helm-controller, source-controller, tofu-controller and kustomize-controller.")
            return
        self.helm_controller()
        self.tofu_auto()
        self.tables()
        self.tofu_manual()
        self.tofu_delete()
        self.gitops()

    def helm_controller(self) -> None:
        self.out.heading("4. helm-controller installs the Helm kinds (real helm-controller v1.6.2)")
        self.out.say("(The postgres chart comes through an ExternalArtifact whose status localcluster writes in place "
                     "of cozystack's artifact publisher, which does not run here; the object is annotated "
                     f"{flux.STAND_IN_ANNOTATION}. Everything else below is written by the real controllers.)")
        for release in ("postgres-orders", "redis-cache"):
            self.wait(f"helm-controller to finish {release}", lambda r=release: any(
                c["type"] == "Ready" and c["status"] != "Unknown" and c.get("observedGeneration") ==
                self.get("helmreleases.helm.toolkit.fluxcd.io", r, "-n", NAMESPACE)["metadata"]["generation"]
                for c in self.get("helmreleases.helm.toolkit.fluxcd.io", r, "-n", NAMESPACE)
                .get("status", {}).get("conditions", [])), timeout=300)
            self.since_applied(f"helmrelease/{release} settled")
        self.kubectl("get", "helmreleases.helm.toolkit.fluxcd.io", "-n", NAMESPACE, show=True)
        status = self.get("helmreleases.helm.toolkit.fluxcd.io", "postgres-orders", "-n", NAMESPACE)["status"]
        self.out.block(f"kubectl get helmrelease postgres-orders -n {NAMESPACE} -o yaml  # .status, as written",
                       yaml.safe_dump({"status": status}, sort_keys=False))
        self.kubectl("get", "configmaps,secrets,services", "-n", NAMESPACE, "-l", "!owner", show=True)

    def status_of(self, plural: str, name: str) -> str:
        lines = self.kubectl("get", plural, name, "-n", NAMESPACE).splitlines()
        return dict(zip(lines[0].split(), lines[1].split(), strict=False)).get("STATUS", "")

    def tofu_auto(self) -> None:
        self.out.heading("5. tofu-controller plans and applies the VPC (real tofu-controller v0.16.5, OpenTofu)")
        self.wait("vpc/network to be Ready", lambda: self.status_of("vpcs", "network") == "Ready", timeout=300)
        self.since_applied("vpc/network Ready")
        status = self.get("terraforms.infra.contrib.fluxcd.io", "vpc-network", "-n", NAMESPACE)["status"]
        self.out.block(f"kubectl get terraform vpc-network -n {NAMESPACE} -o yaml  # .status, as tofu-controller "
                       "wrote it", yaml.safe_dump({"status": status}, sort_keys=False))
        secret = self.get("secret", "network-outputs", "-n", NAMESPACE)
        self.out.block(f"kubectl get secret network-outputs -n {NAMESPACE}  # keys only: values stay in the Secret",
                       "\n".join(sorted(secret.get("data", {}))))
        self.kubectl("get", "secrets", "-n", NAMESPACE, "-l", "tfstate=true", show=True)

    def tables(self) -> None:
        self.out.heading("6. kubectl get: Helm kinds and Tofu kinds side by side")
        self.kubectl("get", "postgreses,redises", "-n", NAMESPACE, show=True)
        self.kubectl("get", "vpcs,s3buckets", "-n", NAMESPACE, show=True)

    def tofu_manual(self) -> None:
        self.out.heading("7. Plan approval for a manual Tofu kind (the pending plan is tofu-controller's)")
        self.wait("s3bucket/assets to await approval",
                  lambda: self.status_of("s3buckets", "assets") == "AwaitingApproval", timeout=300)
        self.kubectl("get", "s3buckets", "-n", NAMESPACE, show=True)
        bucket = self.get("s3bucket", "assets", "-n", NAMESPACE)
        conditions = bucket["status"].get("conditions", [])
        awaiting: dict[str, Any] = next((c for c in conditions if c["type"] == "AwaitingApproval"), {})
        self.out.say(f"AwaitingApproval: {awaiting.get('message', '(none)')}")
        self.out.block(f"kubectl get s3bucket assets -n {NAMESPACE} -o jsonpath='{{.status.plan}}'",
                       json.dumps(bucket["status"].get("plan"), indent=1))
        plan_path = f"/apis/tofu.apps.cozystack.io/v1alpha1/namespaces/{NAMESPACE}/s3buckets/assets/plan"
        self.kubectl("get", "--raw", plan_path, show=True)
        pending = str(bucket["status"]["plan"]["pending"])
        wrong = self.cluster.kubectl("annotate", "s3bucket", "assets", "-n", NAMESPACE,
                                     f"tofu.apps.cozystack.io/approve-plan={pending[:-2]}", check=False)
        self.out.block(f"kubectl annotate s3bucket assets -n {NAMESPACE} "
                       f"tofu.apps.cozystack.io/approve-plan={pending[:-2]}", wrong.stderr or wrong.stdout)
        printed = awaiting["message"].split("approve it with: ", 1)[1]
        for command in printed.split(" && "):
            self.kubectl(*command.split()[1:], show=True)
        self.wait("s3bucket/assets to be applied", lambda: self.status_of("s3buckets", "assets") == "Ready",
                  timeout=300)
        self.kubectl("get", "s3buckets", "-n", NAMESPACE, show=True)

    def tofu_delete(self) -> None:
        self.out.heading("8. Deleting a Tofu Application runs the destroy (destroyResourcesOnDeletion: true)")
        self.kubectl("delete", "vpc", "network", "-n", NAMESPACE, "--wait=false", show=True)
        self.wait("vpc/network to show Deleting", lambda: self.status_of("vpcs", "network") in ("Deleting", ""),
                  timeout=60)
        self.kubectl("get", "vpcs", "-n", NAMESPACE, show=True)
        self.kubectl("wait", "--for=delete", "vpc/network", "-n", NAMESPACE, "--timeout=300s", show=True)
        self.kubectl("get", "vpcs,terraforms.infra.contrib.fluxcd.io", "-n", NAMESPACE, show=True)

    def gitops(self) -> None:
        self.out.heading("9. The same Applications from git: Flux kustomize-controller applies them and waits "
                         "(real kustomize-controller v1.9.3)")
        server = gitserver.start(self.cluster)
        tree = self.cluster.dir / "gitops-tree"
        tree.mkdir(exist_ok=True)
        for name in GITOPS_APPLICATIONS:
            (tree / name).write_text((SAMPLES / "applications" / name).read_text())
        revision = gitserver.publish(server.root, GITOPS_REPOSITORY, tree)
        self.out.say(f"The git server publishes {', '.join(GITOPS_APPLICATIONS)} (deploy/samples/applications/) as "
                     f"the repository {GITOPS_REPOSITORY}@{revision[:12]}; kustomize-controller applies them into "
                     f"{GITOPS_NAMESPACE} with server-side apply, acting as the service account "
                     f"{flux.GITOPS_APPLIER}, and with wait: true turns Ready only once kstatus reads every "
                     "Application as Current.")
        tenant = (SAMPLES / "tenants" / f"{NAMESPACE}.yaml").read_text().replace(NAMESPACE, GITOPS_NAMESPACE)
        self.kubectl("apply", "-f", "-", input=tenant)
        objects = [
            {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
             "metadata": {"name": GITOPS_REPOSITORY, "namespace": flux.SOURCES_NAMESPACE},
             "spec": {"url": gitserver.url_of(server, GITOPS_REPOSITORY), "interval": "10m",
                      "ref": {"branch": gitserver.BRANCH}}},
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
             "metadata": {"name": GITOPS_REPOSITORY, "namespace": flux.SOURCES_NAMESPACE},
             "spec": {"interval": "10m", "path": "./", "prune": True, "wait": True, "timeout": "5m",
                      "targetNamespace": GITOPS_NAMESPACE,
                      "sourceRef": {"kind": "GitRepository", "name": GITOPS_REPOSITORY}}},
        ]
        text = yaml.safe_dump_all(objects, sort_keys=False)
        self.kubectl("apply", "-f", "-", input=text, show=True, display=f"kubectl apply -f - <<EOF\n{text}EOF")
        started = time.monotonic()
        self.wait(f"Kustomization {GITOPS_REPOSITORY} to be Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True" and revision in c.get("message", "")
            for c in self.get(KUSTOMIZATIONS, GITOPS_REPOSITORY, "-n", flux.SOURCES_NAMESPACE)
            .get("status", {}).get("conditions", [])), timeout=360)
        self.out.say(f"kustomization/{GITOPS_REPOSITORY} Ready {time.monotonic() - started:.0f}s after it was applied")
        for path in GITOPS_APPLICATIONS:
            app = yaml.safe_load((SAMPLES / "applications" / path).read_text())
            kind, name = app["kind"].lower(), app["metadata"]["name"]
            self.wait(f"{kind}/{name} in {GITOPS_NAMESPACE} to be Ready", lambda k=kind, n=name: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in self.get(k, n, "-n", GITOPS_NAMESPACE).get("status", {}).get("conditions", [])), timeout=300)
        self.kubectl("get", KUSTOMIZATIONS, "-n", flux.SOURCES_NAMESPACE, show=True,
                     display=f"kubectl get kustomizations -n {flux.SOURCES_NAMESPACE}")
        status = self.get(KUSTOMIZATIONS, GITOPS_REPOSITORY, "-n", flux.SOURCES_NAMESPACE)["status"]
        shown = {"conditions": [{k: c[k] for k in ("type", "status", "reason", "message")}
                                for c in status.get("conditions", [])],
                 "inventory": status.get("inventory")}
        self.out.block(f"kubectl get kustomization {GITOPS_REPOSITORY} -n {flux.SOURCES_NAMESPACE} -o yaml  "
                       "# .status: conditions and inventory", yaml.safe_dump(shown, sort_keys=False))
        self.kubectl("get", "postgreses,redises,vpcs", "-n", GITOPS_NAMESPACE, show=True)

    def run(self) -> None:
        self.definitions()
        self.applications()
        self.generated()
        self.controllers()
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
