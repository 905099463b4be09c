"""Field ownership (server-side apply, managedFields, Update managers), with kube-apiserver as the oracle.

Each scenario runs the same requests -- through kubectl, as a user would, or raw where the Status
body matters -- against an Application kind of the stack and against a CRD with the same structural
schema and defaults on the same kube-apiserver, and compares what matters: managedFields (manager,
operation, version, fieldsV1), spec, labels, annotations, HTTP codes, Status reason, message and
causes, warnings.  Group names are the only thing normalised away.  The schema is the sample Postgres
kind's (minus ``version``, a name OpenTofu reserves, so both stacks serve it), plus a set list and a
map list so every list type is covered.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import build
from localcluster.cluster import Cluster

from shared.schema.structural import structural
from tests.contract.stack import Stack, served
from tests.kube import Api, kubectl, wait_for

KIND = "OwnedDB"
PLURAL = "owneddbs"
SINGULAR = "owneddb"
PREFIX = "owned-"
ORACLE_GROUP = "oracle.example"
VERSION = "v1alpha1"

JSON = dict[str, Any]
SAMPLE = Path(__file__).parents[2] / "deploy" / "samples" / "definitions" / "postgres.yaml"


def _schema() -> JSON:
    postgres = yaml.safe_load(SAMPLE.read_text())
    schema: JSON = json.loads(postgres["spec"]["application"]["openAPISchema"])
    schema["properties"].pop("version")
    for prop in ("backup", "quorum"):
        # kube-apiserver checks a default before defaulting inside it: ``default: {}`` with required
        # fields is not a valid CRD schema (our services default first), so the oracle needs neither.
        schema["properties"][prop].pop("required")
    schema["properties"]["tags"] = {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
    schema["properties"]["endpoints"] = {
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"],
                  "properties": {"name": {"type": "string"}, "port": {"type": "integer"},
                                 "protocol": {"type": "string", "default": "TCP"}}}}
    return schema


SCHEMA = _schema()


def _crd() -> JSON:
    """The oracle: the same structural schema (defaults included) as a plain custom resource."""
    spec_schema = structural(SCHEMA)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{ORACLE_GROUP}"},
        "spec": {"group": ORACLE_GROUP, "scope": "Namespaced",
                 "names": {"kind": KIND, "plural": PLURAL, "singular": SINGULAR, "listKind": f"{KIND}List"},
                 "versions": [{"name": VERSION, "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": spec_schema,
                                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    }


def _definition(stack: Stack) -> JSON:
    defn = copy.deepcopy(stack.definition)
    defn["metadata"] = {"name": SINGULAR}
    defn["spec"]["application"] = {"kind": KIND, "plural": PLURAL, "singular": SINGULAR,
                                   "openAPISchema": json.dumps(SCHEMA)}
    defn["spec"]["release"]["prefix"] = PREFIX
    if "terraform" in defn["spec"]:
        defn["spec"]["terraform"]["variableNaming"] = "snake_case"
    return defn


@dataclass(frozen=True)
class Target:
    """One side of the comparison: where its objects live and how its group is spelt."""

    group: str
    namespace: str

    @property
    def resource(self) -> str:
        return f"{PLURAL}.{self.group}"

    def path(self, name: str = "") -> str:
        base = f"/apis/{self.group}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        return f"{base}/{name}" if name else base

    def manifest(self, name: str, spec: JSON | None = None, **meta: Any) -> JSON:
        body: JSON = {"apiVersion": f"{self.group}/{VERSION}", "kind": KIND,
                      "metadata": {"name": name, "namespace": self.namespace, **meta}}
        if spec is not None:
            body["spec"] = spec
        return body


_EMBEDDED = re.compile(r'Invalid value: "(\{.*\})": ')


def _without_embedded_object(status: JSON) -> JSON:
    """A 422 for a patch quotes the whole patched object; uid, times and versions differ between the two
    sides, so the object is compared by its spec and metadata names, the rest of the text as it is."""
    text = json.dumps(status)
    found = _EMBEDDED.search(status.get("message") or "")
    if not found:
        return status
    embedded = json.loads(json.loads(f'"{found.group(1)}"'))
    summary = json.dumps({"spec": embedded.get("spec"), "labels": embedded["metadata"].get("labels"),
                          "managers": sorted(e["manager"] for e in embedded["metadata"].get("managedFields") or [])})
    out: JSON = json.loads(text.replace(json.dumps(found.group(1))[1:-1], "OBJECT"))
    out["object"] = summary
    return out


@dataclass(frozen=True)
class Outcome:
    """What one request did, normalised: exit code or HTTP code, and the text or Status it answered."""

    code: int
    body: Any


class Pair:
    """The Application kind and its oracle CRD, driven with the same requests."""

    def __init__(self, cluster: Cluster, api: Api, stack: Stack, app: Target, oracle: Target) -> None:
        self.cluster, self.api, self.stack = cluster, api, stack
        self.app, self.oracle = app, oracle
        self.sides = (app, oracle)

    # ---------------------------------------------------------------- normalisation
    def _norm(self, side: Target, value: Any) -> Any:
        text = json.dumps(value)
        return json.loads(text.replace(side.group, "GROUP").replace(side.namespace, "NAMESPACE"))

    def _norm_text(self, side: Target, text: str) -> str:
        return text.replace(side.group, "GROUP").replace(side.namespace, "NAMESPACE")

    # ---------------------------------------------------------------- requests
    def kubectl(self, *args: str, input_of: Any = None, env: dict[str, str] | None = None) -> tuple[Outcome, Outcome]:
        """Run kubectl with ``{resource}`` and ``{ns}`` filled in per side; ``input_of(side)`` is stdin."""
        out = []
        for side in self.sides:
            argv = [a.replace("{resource}", side.resource).replace("{ns}", side.namespace) for a in args]
            stdin = json.dumps(input_of(side)) if input_of is not None else None
            full = [str(build.kubectl_dir() / "kubectl"), "--kubeconfig", str(self.cluster.kubeconfig), *argv]
            result = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=120,
                                    env={**os.environ, **(env or {})})
            text = self._norm_text(side, result.stdout + result.stderr)
            out.append(Outcome(result.returncode, text))
        return out[0], out[1]

    def same_kubectl(self, *args: str, input_of: Any = None, env: dict[str, str] | None = None) -> Outcome:
        got, want = self.kubectl(*args, input_of=input_of, env=env)
        assert got == want, f"{self.stack.name}: kubectl {' '.join(args)}\n  app:    {got}\n  oracle: {want}"
        return got

    def send_manifest(self, verb: str, name: str, spec: JSON | None, *flags: str, **meta: Any) -> Outcome:
        """``kubectl VERB -f -`` of the same manifest on both sides; same exit code and output."""
        return self.same_kubectl(*verb.split(), *flags, "-f", "-",
                                 input_of=lambda side: side.manifest(name, spec, **meta))

    def apply(self, name: str, spec: JSON | None, manager: str, *flags: str, **meta: Any) -> Outcome:
        """``kubectl apply --server-side`` by ``manager`` on both sides; same exit code and output."""
        return self.same_kubectl("apply", "--server-side", f"--field-manager={manager}", *flags, "-f", "-",
                                 input_of=lambda side: side.manifest(name, spec, **meta))

    def request(self, method: str, name: str, body_of: Any, content_type: str, query: str = "") -> Outcome:
        """The same raw request on both sides; same code, (normalised) body and Warning headers."""
        out = []
        for side in self.sides:
            path = side.path(name if method != "POST" else "") + (f"?{query}" if query else "")
            code, body, warnings = self._send(method, path, body_of(side), content_type)
            out.append(Outcome(code, {"body": self._comparable(side, body),
                                      "warnings": [self._norm_text(side, w) for w in warnings]}))
        assert out[0] == out[1], f"{self.stack.name}: {method} {name}\n  app:    {out[0]}\n  oracle: {out[1]}"
        return Outcome(out[0].code, out[0].body["body"])

    def _send(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, Any, list[str]]:
        data = json.dumps(body).encode() if not isinstance(body, (str, bytes)) else (
            body.encode() if isinstance(body, str) else body)
        req = urllib.request.Request(self.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.api.ctx) as resp:
                return resp.status, json.loads(resp.read() or b"null"), resp.headers.get_all("Warning") or []
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            return exc.code, parsed, exc.headers.get_all("Warning") or []

    def _comparable(self, side: Target, body: Any) -> Any:
        if isinstance(body, dict) and body.get("kind") == "Status":
            status = self._norm(side, {k: body.get(k) for k in ("code", "reason", "message", "details")})
            return _without_embedded_object(status)
        if isinstance(body, dict) and "metadata" in body:
            return self.view(side, body)
        return body

    # ---------------------------------------------------------------- reading
    def view(self, side: Target, obj: JSON) -> JSON:
        """What is compared of an object: managedFields without times, spec, labels, annotations."""
        meta = obj.get("metadata") or {}
        # Entries are sorted by operation, then time in seconds, then manager: two requests a second apart
        # on one side and not on the other order differently, so the order compared is by identity.
        managed = sorted(({k: e.get(k) for k in ("manager", "operation", "apiVersion", "fieldsType", "fieldsV1")}
                          for e in meta.get("managedFields") or []), key=lambda e: (e["operation"], e["manager"]))
        return self._norm(side, {"managedFields": managed, "spec": obj.get("spec"),
                                 "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}})

    def read(self, side: Target, name: str) -> JSON:
        code, body = self.api.request("GET", side.path(name))
        assert code == 200, (code, body)
        found: JSON = body
        return found

    def same_object(self, name: str) -> JSON:
        """The Application and the custom resource named ``name`` agree; returns the app's view."""
        got, want = (self.view(side, self.read(side, name)) for side in self.sides)
        assert got == want, f"{self.stack.name}: {name} differs\n  app:    {got}\n  oracle: {want}"
        return got

    def owners(self, name: str) -> dict[str, JSON]:
        view = self.view(self.app, self.read(self.app, name))
        return {e["manager"]: e["fieldsV1"] for e in view["managedFields"]}

    def backing(self, name: str) -> JSON:
        result = kubectl(self.cluster, "get", self.stack.backing, PREFIX + name, "-n", self.app.namespace,
                         "-o", "json")
        found: JSON = json.loads(result.stdout)
        return found


@pytest.fixture(scope="session")
def owned_crd(control_plane: Cluster) -> str:
    crd = _crd()
    kubectl(control_plane, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
    kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s",
            f"crd/{crd['metadata']['name']}")
    return ORACLE_GROUP


@pytest.fixture
def pair(control_plane: Cluster, api: Api, stack: Stack, owned_crd: str) -> Iterator[Pair]:
    defn = _definition(stack)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(defn))
    resource = f"{PLURAL}.{stack.group}"
    wait_for(lambda: resource in served(control_plane, stack.group), f"{resource} served", timeout=60)
    app = Target(stack.group, stack.namespace)
    wait_for(lambda: api.request("GET", app.path())[0] == 200, f"{resource} listable", timeout=60)
    oracle_ns = f"oracle-{stack.name}"
    kubectl(control_plane, "create", "namespace", oracle_ns, check=False)
    oracle = Target(owned_crd, oracle_ns)
    wait_for(lambda: api.request("GET", oracle.path())[0] == 200, "oracle served", timeout=60)
    yield Pair(control_plane, api, stack, app, oracle)


def _fresh(pair: Pair, name: str) -> str:
    """Delete ``name`` on both sides (a rerun on a kept cluster starts clean)."""
    for side in pair.sides:
        kubectl(pair.cluster, "delete", side.resource, name, "-n", side.namespace, "--ignore-not-found",
                "--wait=true")
    return name


# ---------------------------------------------------------------------------------------- scenarios


def test_alice_bob_carol(pair: Pair) -> None:
    """The user's report: bob's apply conflicts with alice's; carol's partial apply merges."""
    name = _fresh(pair, "abc")
    pair.apply(name, {"replicas": 2}, "alice")
    pair.same_object(name)
    conflict = pair.apply(name, {"replicas": 3}, "bob")
    assert conflict.code != 0 and 'conflict with "alice"' in conflict.body, conflict
    pair.apply(name, {"size": "5Gi"}, "carol")
    view = pair.same_object(name)
    assert view["spec"]["replicas"] == 2 and view["spec"]["size"] == "5Gi"
    assert set(pair.owners(name)) == {"alice", "carol"}
    values = pair.stack.written_spec(pair.backing(name))
    assert values.get("replicas") == 2 and values.get("size") == "5Gi", values


def test_conflict_status_is_kube_apiservers(pair: Pair) -> None:
    name = _fresh(pair, "conflicts")
    pair.apply(name, {"replicas": 2, "size": "1Gi"}, "alice")
    status = pair.request("PATCH", name, lambda side: side.manifest(name, {"replicas": 3, "size": "2Gi"}),
                          "application/apply-patch+yaml", "fieldManager=bob")
    assert status.code == 409 and status.body["reason"] == "Conflict", status
    assert [c["reason"] for c in status.body["details"]["causes"]] == ["FieldManagerConflict"] * 2


def test_force_conflicts_takes_ownership(pair: Pair) -> None:
    name = _fresh(pair, "forced")
    pair.apply(name, {"replicas": 2, "size": "1Gi"}, "alice")
    pair.apply(name, {"replicas": 3}, "bob", "--force-conflicts")
    view = pair.same_object(name)
    assert view["spec"]["replicas"] == 3
    assert pair.owners(name)["alice"] == {"f:spec": {"f:size": {}}}


def test_dropped_field_is_removed_unless_co_owned(pair: Pair) -> None:
    name = _fresh(pair, "dropped")
    pair.apply(name, {"replicas": 3, "size": "1Gi", "storageClass": "fast"}, "alice")
    pair.apply(name, {"storageClass": "fast"}, "bob")  # the same value: co-owned, no conflict
    pair.apply(name, {"replicas": 3}, "alice")  # alice stops applying size and storageClass
    view = pair.same_object(name)
    assert view["spec"]["storageClass"] == "fast"  # bob still owns it
    assert view["spec"]["size"] == "10Gi"  # removed, so the default again
    assert "size" not in pair.stack.written_spec(pair.backing(name)) or pair.stack.writes_defaults


def test_update_operation_takes_fields_from_appliers(pair: Pair) -> None:
    name = _fresh(pair, "transfer")
    pair.apply(name, {"replicas": 2, "size": "1Gi"}, "alice")
    pair.same_kubectl("patch", "{resource}", name, "-n", "{ns}", "--type=merge", "-p", '{"spec":{"replicas":4}}')
    view = pair.same_object(name)
    assert view["spec"]["replicas"] == 4
    owners = pair.owners(name)
    assert owners["alice"] == {"f:spec": {"f:size": {}}} and "kubectl-patch" in owners
    pair.same_kubectl("patch", "{resource}", name, "-n", "{ns}", "--type=json",
                      "-p", '[{"op":"replace","path":"/spec/size","value":"3Gi"}]')
    pair.same_object(name)


def test_create_records_the_manager(pair: Pair) -> None:
    name = _fresh(pair, "created")
    pair.send_manifest("create", name, {"replicas": 2}, labels={"team": "a"})
    pair.same_object(name)
    name2 = _fresh(pair, "created-raw")
    created = pair.request("POST", name2, lambda side: side.manifest(name2, {"size": "2Gi"}), "application/json",
                           "fieldManager=creator")
    assert created.code == 201
    pair.same_object(name2)


def test_client_side_apply_then_server_side(pair: Pair) -> None:
    name = _fresh(pair, "csa")
    pair.send_manifest("apply", name, {"replicas": 2}, annotations={"note": "x"})
    pair.same_object(name)
    conflict = pair.apply(name, {"replicas": 5}, "gitops")
    assert conflict.code != 0
    pair.apply(name, {"replicas": 2, "size": "3Gi"}, "gitops")
    pair.same_object(name)


def test_labels_and_annotations_are_managed(pair: Pair) -> None:
    name = _fresh(pair, "meta")
    pair.apply(name, {}, "alice", labels={"team": "a", "tier": "1"}, annotations={"note": "n"})
    pair.apply(name, {}, "bob", labels={"owner": "b"})
    pair.apply(name, {}, "alice", labels={"team": "a"})
    view = pair.same_object(name)
    assert view["labels"] == {"team": "a", "owner": "b"}
    assert view["annotations"] == {}
    pair.same_kubectl("label", "{resource}", name, "-n", "{ns}", "extra=1")
    pair.same_kubectl("annotate", "{resource}", name, "-n", "{ns}", "why=because")
    pair.same_object(name)


def test_maps_and_atomic_lists(pair: Pair) -> None:
    name = _fresh(pair, "maps")
    pair.apply(name, {"users": {"alice": {"password": "a"}},
                      "databases": {"app": {"extensions": ["pgcrypto"]}}}, "alice")
    pair.apply(name, {"users": {"bob": {"replication": True}},
                      "databases": {"app": {"extensions": ["hstore"]}}}, "bob")  # atomic list: conflict
    pair.apply(name, {"users": {"bob": {"replication": True}}}, "bob")
    pair.apply(name, {"databases": {"app": {"extensions": ["pgcrypto"]}}}, "alice")  # alice drops her user
    view = pair.same_object(name)
    assert set(view["spec"]["users"]) == {"bob"}


def test_set_and_map_lists(pair: Pair) -> None:
    name = _fresh(pair, "lists")
    pair.apply(name, {"tags": ["a", "b"], "endpoints": [{"name": "pg", "port": 5432}]}, "alice")
    pair.apply(name, {"tags": ["c"], "endpoints": [{"name": "metrics", "port": 9187}]}, "bob")
    pair.same_object(name)
    pair.apply(name, {"endpoints": [{"name": "pg", "port": 5433}]}, "bob")  # alice owns pg's port
    pair.apply(name, {"tags": ["b"], "endpoints": [{"name": "pg", "port": 5432}]}, "alice")
    view = pair.same_object(name)
    assert view["spec"]["tags"] == ["b", "c"] or sorted(view["spec"]["tags"]) == ["b", "c"]


def test_merge_patch_writes_no_defaults(pair: Pair) -> None:
    name = _fresh(pair, "nodefaults")
    pair.apply(name, {"replicas": 3}, "alice")
    pair.same_kubectl("patch", "{resource}", name, "-n", "{ns}", "--type=merge", "-p", '{"spec":{"size":"2Gi"}}')
    pair.same_object(name)
    written = pair.stack.written_spec(pair.backing(name))
    if not pair.stack.writes_defaults:
        assert written == {"replicas": 3, "size": "2Gi"}, written


def test_kubectl_edit(pair: Pair, tmp_path: Path) -> None:
    name = _fresh(pair, "edited")
    pair.apply(name, {"replicas": 2}, "alice")
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys, re\n"
        "path = sys.argv[-1]\n"
        "text = open(path).read()\n"
        "text = re.sub(r'replicas: 2', 'replicas: 6', text)\n"
        "open(path, 'w').write(text)\n")
    env = {"KUBE_EDITOR": f"{sys.executable} {editor}", "EDITOR": f"{sys.executable} {editor}"}
    result = pair.same_kubectl("edit", "{resource}", name, "-n", "{ns}", env=env)
    assert "edited" in result.body, result
    view = pair.same_object(name)
    assert view["spec"]["replicas"] == 6
    assert "kubectl-edit" in pair.owners(name)


UNKNOWN = {"replicas": 2, "bogus": 1, "users": {"a": {"nope": True}}}


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore", ""])
def test_field_validation_on_create_and_patch(pair: Pair, validation: str) -> None:
    name = _fresh(pair, f"fv-{validation.lower() or 'default'}")
    query = f"fieldValidation={validation}" if validation else ""
    created = pair.request("POST", name, lambda side: {**side.manifest(name, UNKNOWN), "extra": 1},
                           "application/json", query)
    if validation == "Strict":
        assert created.code == 400
        pair.request("POST", name, lambda side: side.manifest(name, {"replicas": 2}), "application/json")
    else:
        assert created.code == 201
    pair.same_object(name)
    pair.request("PATCH", name, lambda side: {"spec": {"size": "2Gi", "bogus": 2}}, "application/merge-patch+json",
                 query)
    pair.same_object(name)
    pair.request("PUT", name, lambda side: {**pair.read(side, name), "spec": {"replicas": 4, "bogus": 3}},
                 "application/json", query)
    pair.same_object(name)


@pytest.mark.parametrize("validate", ["strict", "warn", "ignore"])
def test_kubectl_validate(pair: Pair, validate: str) -> None:
    name = _fresh(pair, f"kv-{validate}")
    pair.send_manifest("create", name, UNKNOWN, f"--validate={validate}")
    pair.send_manifest("apply", name, {"replicas": 3, "bogus": 1}, f"--validate={validate}")
    if validate != "strict":
        pair.same_object(name)


def test_apply_of_undeclared_fields_fails_as_on_kube(pair: Pair) -> None:
    name = _fresh(pair, "typed")
    failed = pair.request("PATCH", name, lambda side: side.manifest(name, {"users": {"a": {"nope": True}}}),
                          "application/apply-patch+yaml", "fieldManager=x&fieldValidation=Ignore")
    assert failed.code == 500, failed


def test_server_side_apply_after_client_side_apply_with_kubectls_manager(pair: Pair) -> None:
    """The upgrade path kubectl documents: objects made with client-side apply, then applied server-side."""
    name = _fresh(pair, "upgrade")
    pair.send_manifest("apply", name, {"replicas": 2, "size": "1Gi"}, labels={"team": "a"})
    pair.send_manifest("apply --server-side", name, {"replicas": 2, "size": "1Gi"}, labels={"team": "a"})
    pair.same_object(name)
    pair.send_manifest("apply --server-side", name, {"replicas": 3}, labels={"team": "a"})
    pair.same_object(name)


def test_replace_records_an_update(pair: Pair) -> None:
    name = _fresh(pair, "replaced")
    pair.apply(name, {"replicas": 2, "size": "1Gi"}, "alice")
    pair.same_kubectl("replace", "-f", "-", input_of=lambda side: {
        **pair.read(side, name), "spec": {"replicas": 5}})
    pair.same_object(name)


DUPLICATED = ('{"apiVersion":"GROUP/v1alpha1","kind":"OwnedDB","metadata":{"name":"NAME","namespace":"NS"},'
              '"spec":{"replicas":2,"users":{"a":{"password":"x","password":"y"}},"replicas":3}}')


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
def test_duplicate_fields(pair: Pair, validation: str) -> None:
    name = _fresh(pair, f"dup-{validation.lower()}")
    query = f"fieldValidation={validation}"
    pair.request("POST", name, lambda side: DUPLICATED.replace("GROUP", side.group).replace("NAME", name)
                 .replace("NS", side.namespace), "application/json", query)
    pair.request("POST", name, lambda side: side.manifest(name, {"replicas": 1}), "application/json")
    pair.request("PATCH", name, lambda side: '{"spec":{"size":"1Gi","size":"2Gi"}}', "application/merge-patch+json",
                 query)
    pair.same_object(name)


def test_applied_values_are_written_as_given(pair: Pair) -> None:
    """A value applied onto an existing object is written even when it equals the schema default."""
    name = _fresh(pair, "given")
    pair.apply(name, {"size": "2Gi"}, "carol")
    pair.apply(name, {"replicas": 2, "postgresql": {"parameters": {"max_connections": 100}}}, "alice")
    pair.same_object(name)
    written = pair.stack.written_spec(pair.backing(name))
    assert written["replicas"] == 2 and written["postgresql"]["parameters"]["max_connections"] == 100, written
    if not pair.stack.writes_defaults:
        assert written == {"size": "2Gi", "replicas": 2, "postgresql": {"parameters": {"max_connections": 100}}}


def test_server_side_apply_changing_what_client_side_apply_set(pair: Pair) -> None:
    name = _fresh(pair, "upgrade-change")
    pair.send_manifest("apply", name, {"replicas": 2, "size": "1Gi"})
    pair.send_manifest("apply --server-side", name, {"replicas": 3, "size": "1Gi"})
    pair.same_object(name)


@pytest.mark.parametrize("spec", [{"replicas": 2}, {"replicas": "two"}])
def test_a_nameless_create_reports_the_rules_left_unchecked(pair: Pair, spec: JSON) -> None:
    """A missing name is a Required cause, and kube-apiserver runs no CEL rule of a CRD (this schema has
    one) after a Required, TooLong, TooMany, NotSupported or TypeInvalid cause: it adds one last cause
    saying so.  The name cause's own wording is the services' (they take no ``generateName``); every
    other cause is compared whole, in order."""
    answers = []
    for side in pair.sides:
        body = side.manifest("x", spec)
        del body["metadata"]["name"]
        code, status, _ = pair._send("POST", side.path(), body, "application/json")
        causes = status["details"]["causes"]
        answers.append((code, [(c["reason"], c["field"]) for c in causes], [c["message"] for c in causes[1:]]))
    assert answers[0] == answers[1], f"{pair.stack.name}\n  app:    {answers[0]}\n  oracle: {answers[1]}"
    assert answers[0][1][0] == ("FieldValueRequired", "metadata.name")
    assert answers[0][1][-1] == ("FieldValueInvalid", "<nil>")
