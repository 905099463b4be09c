"""The requests of a differential sequence, and how each is sent to one side.

An operation is plain data (so hypothesis can print and shrink it) and says nothing about which
side it runs on; :class:`Side` turns it into a request through the official ``kubernetes`` client's
``DynamicClient`` and returns the :class:`Outcome`: HTTP code, body and ``Warning`` headers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError

JSON = dict[str, Any]

DRY_RUN = "All"


@dataclass
class Outcome:
    code: int
    body: Any
    warnings: list[str] = field(default_factory=list)


@dataclass
class Side:
    """One side of the comparison: a resource (Application kind or oracle CRD) in one namespace.

    It remembers, per name, the uids and resourceVersions its answers carried, so an operation
    can state "the current resourceVersion" or "a stale one" and mean the same on both sides.
    """

    client: DynamicClient
    resource: Any
    namespace: str
    #: Where a request to the status subresource goes (differences.INTENTIONAL["status-subresource"]).
    status_subresource: str = "status"
    #: name -> resourceVersions seen, oldest first; name -> uid.
    versions: dict[str, list[str]] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)
    #: Whether an answer showed an object with finalizers (the runner then removes what is left of them).
    held: bool = False

    @property
    def api_version(self) -> str:
        return str(self.resource.group_version)

    @property
    def kind(self) -> str:
        return str(self.resource.kind)

    def path(self, name: str | None = None) -> str:
        return str(self.resource.path(name=name, namespace=self.namespace))

    def manifest(self, name: str, spec: Any, labels: JSON | None = None, annotations: JSON | None = None,
                 finalizers: tuple[str, ...] = (), owners: tuple[JSON, ...] = ()) -> JSON:
        meta: JSON = {"name": name, "namespace": self.namespace}
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        if finalizers:
            meta["finalizers"] = list(finalizers)
        if owners:
            meta["ownerReferences"] = [dict(owner) for owner in owners]
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, "spec": spec}

    def current_version(self, name: str) -> str | None:
        seen = self.versions.get(name)
        return seen[-1] if seen else None

    def stale_version(self, name: str) -> str | None:
        seen = self.versions.get(name) or []
        return seen[0] if len(seen) > 1 else "1"

    def remember(self, outcome: Outcome) -> None:
        for obj in _objects(outcome.body):
            meta = obj.get("metadata") or {}
            name, rv = meta.get("name"), meta.get("resourceVersion")
            if name and rv and rv not in self.versions.setdefault(name, []):
                self.versions[name].append(rv)
            if name and meta.get("uid"):
                self.uids[name] = meta["uid"]
            self.held = self.held or bool(meta.get("finalizers"))

    def send(self, method: str, path: str, body: Any = None, **params: Any) -> Outcome:
        """One request; the answer whatever its code (Status bodies parsed), with its warnings."""
        try:
            response = self.client.request(method, path, body=body, serialize=False, **params)
        except DynamicApiError as err:
            outcome = Outcome(err.status, _parse(err.body), _warnings(err.headers))
        else:
            outcome = Outcome(response.status, _parse(response.data), _warnings(response.headers))
        self.remember(outcome)
        return outcome


def _parse(raw: Any) -> Any:
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw


def _warnings(headers: Any) -> list[str]:
    if not headers:
        return []
    getter = getattr(headers, "getlist", None) or getattr(headers, "get_all", None)
    values = getter("Warning") if getter else [headers.get("Warning")]
    return [v for v in values or [] if v]


def _objects(body: Any) -> list[JSON]:
    if not isinstance(body, dict):
        return []
    if isinstance(body.get("items"), list):
        return [i for i in body["items"] if isinstance(i, dict)]
    return [body] if body.get("kind") not in (None, "Status") else []


def _dry(dry_run: bool) -> JSON:
    return {"dry_run": DRY_RUN} if dry_run else {}


#: Where a body may carry a field its schema does not declare: at the top level, in the spec, and in the
#: spec under a ``_`` name (the names the platform injects: pruned or refused like any other).
UNDECLARED = ("undeclared", "spec.undeclared", "spec._platform")


def _validation(body: JSON, field_validation: str | None, unknown: str | None) -> JSON:
    """Add the undeclared field ``unknown`` (one of :data:`UNDECLARED`) to ``body``; the query parameters
    that ask for ``field_validation`` (the DynamicClient has no argument for it)."""
    if unknown:
        *parents, key = unknown.split(".")
        target = body
        for parent in parents:
            target = target[parent] = dict(target.get(parent) or {})
        target[key] = 1
    return {"query_params": [("fieldValidation", field_validation)]} if field_validation else {}


class Operation:
    """A request of a sequence; ``writes`` is the name it may change (None for reads)."""

    name: str

    #: Whether a Status answer's message is compared (see Invalid.OWN_WORDS).
    compares_message: ClassVar[bool] = True

    def run(self, side: Side) -> Outcome:
        raise NotImplementedError


@dataclass(frozen=True)
class Create(Operation):
    name: str
    spec: JSON
    labels: JSON
    annotations: JSON
    dry_run: bool
    #: fieldValidation, and whether the body carries an undeclared top-level field.
    field_validation: str | None = None
    unknown: str | None = None
    finalizers: tuple[str, ...] = ()
    owners: tuple[JSON, ...] = ()

    def run(self, side: Side) -> Outcome:
        body = side.manifest(self.name, self.spec, self.labels, self.annotations, self.finalizers, self.owners)
        query = _validation(body, self.field_validation, self.unknown)
        return side.send("post", side.path(), body, **_dry(self.dry_run), **query)


@dataclass(frozen=True)
class Get(Operation):
    name: str

    def run(self, side: Side) -> Outcome:
        return side.send("get", side.path(self.name))


@dataclass(frozen=True)
class Update(Operation):
    """PUT of a whole object, with the current, no, or a stale resourceVersion."""

    name: str
    spec: JSON
    labels: JSON
    version: str  # "current" | "none" | "stale"
    dry_run: bool
    field_validation: str | None = None
    unknown: str | None = None

    def run(self, side: Side) -> Outcome:
        body = side.manifest(self.name, self.spec, self.labels)
        rv = {"current": side.current_version(self.name), "none": None,
              "stale": side.stale_version(self.name)}[self.version]
        if rv:
            body["metadata"]["resourceVersion"] = rv
        query = _validation(body, self.field_validation, self.unknown)
        return side.send("put", side.path(self.name), body, **_dry(self.dry_run), **query)


@dataclass(frozen=True)
class MergePatch(Operation):
    name: str
    patch: JSON
    dry_run: bool

    def run(self, side: Side) -> Outcome:
        return side.send("patch", side.path(self.name), self.patch, content_type="application/merge-patch+json",
                         **_dry(self.dry_run))


@dataclass(frozen=True)
class JsonPatch(Operation):
    name: str
    ops: list[JSON]
    dry_run: bool

    def run(self, side: Side) -> Outcome:
        return side.send("patch", side.path(self.name), list(self.ops), content_type="application/json-patch+json",
                         **_dry(self.dry_run))


@dataclass(frozen=True)
class Apply(Operation):
    """Server-side apply of ``spec`` and ``labels`` by ``manager``."""

    name: str
    manager: str
    spec: JSON
    labels: JSON
    force: bool
    dry_run: bool

    def run(self, side: Side) -> Outcome:
        body = side.manifest(self.name, self.spec, self.labels)
        return side.send("patch", side.path(self.name), json.dumps(body), content_type="application/apply-patch+yaml",
                         field_manager=self.manager, force_conflicts=self.force or None, **_dry(self.dry_run))


@dataclass(frozen=True)
class Delete(Operation):
    """Delete, with a uid or resourceVersion precondition that holds or does not."""

    name: str
    precondition: str | None  # None | "uid" | "bad-uid" | "rv" | "stale-rv"
    dry_run: bool

    def run(self, side: Side) -> Outcome:
        options: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        given = {
            None: {},
            "uid": {"uid": side.uids.get(self.name, "00000000-0000-0000-0000-000000000000")},
            "bad-uid": {"uid": "00000000-0000-0000-0000-000000000000"},
            "rv": {"resourceVersion": side.current_version(self.name) or "1"},
            "stale-rv": {"resourceVersion": side.stale_version(self.name)},
        }[self.precondition]
        if given:
            options["preconditions"] = given
        if self.dry_run:
            options["dryRun"] = [DRY_RUN]
        return side.send("delete", side.path(self.name), options)


@dataclass(frozen=True)
class List(Operation):
    label_selector: str
    field_selector: str
    name: str = ""

    def run(self, side: Side) -> Outcome:
        return side.send("get", side.path(), **_selectors(self.label_selector, self.field_selector, side))


@dataclass(frozen=True)
class DeleteCollection(Operation):
    """deletecollection with a label and a field selector."""

    label_selector: str
    field_selector: str
    dry_run: bool
    name: str = ""

    def run(self, side: Side) -> Outcome:
        options: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if self.dry_run:
            options["dryRun"] = [DRY_RUN]
        return side.send("delete", side.path(), options,
                         **_selectors(self.label_selector, self.field_selector, side))


def _selectors(label_selector: str, field_selector: str, side: Side) -> JSON:
    """The client's selector arguments of a collection request; a field selector's ``{ns}`` is the side's
    namespace, so one operation selects the same objects on both sides."""
    params: JSON = {}
    if label_selector:
        params["label_selector"] = label_selector
    if field_selector:
        params["field_selector"] = field_selector.format(ns=side.namespace)
    return params


@dataclass(frozen=True)
class StatusRequest(Operation):
    """A read or a write of the status subresource (see differences.INTENTIONAL["status-subresource"])."""

    name: str
    method: str  # "get" | "merge" | "put"
    status: JSON

    def run(self, side: Side) -> Outcome:
        path = f"{side.path(self.name)}/{side.status_subresource}"
        if self.method == "get":
            return side.send("get", path)
        if self.method == "merge":
            return side.send("patch", path, {"status": self.status}, content_type="application/merge-patch+json")
        body = side.manifest(self.name, {}) | {"status": self.status}
        body["metadata"]["resourceVersion"] = side.current_version(self.name) or "1"
        return side.send("put", path, body)


@dataclass(frozen=True)
class Invalid(Operation):
    """A body no server may accept; each side must refuse it the same way (and change nothing)."""

    WHAT: ClassVar[tuple[str, ...]] = (
        "malformed-json", "wrong-kind", "wrong-api-version", "namespace-mismatch", "spec-not-object",
        "metadata-not-object", "no-name", "bad-name", "url-name-mismatch", "strategic-merge-patch",
        "bad-field-selector", "bad-label-selector", "bad-dry-run",
    )

    #: The requests whose refusal is worded differently, each with the differences.INTENTIONAL row saying why.
    OWN_WORDS: ClassVar[dict[str, str]] = {
        "malformed-json": "go-decoder-messages", "metadata-not-object": "go-decoder-messages",
        "bad-name": "names", "no-name": "no-generate-name", "bad-label-selector": "selector-parse-messages",
    }

    name: str
    what: str

    @property
    def compares_message(self) -> bool:  # type: ignore[override]
        return self.what not in self.OWN_WORDS

    def run(self, side: Side) -> Outcome:
        body = side.manifest(self.name, {})
        post, put = side.path(), side.path(self.name)
        if self.what == "malformed-json":
            return side.send("post", post, '{"apiVersion": ', content_type="application/json")
        if self.what == "wrong-kind":
            return side.send("post", post, {**body, "kind": "Other"})
        if self.what == "wrong-api-version":
            return side.send("post", post, {**body, "apiVersion": "v1"})
        if self.what == "namespace-mismatch":
            return side.send("post", post, {**body, "metadata": {**body["metadata"], "namespace": "elsewhere"}})
        if self.what == "spec-not-object":
            return side.send("post", post, {**body, "spec": ["a"]})
        if self.what == "metadata-not-object":
            return side.send("post", post, {**body, "metadata": "a"})
        if self.what == "no-name":
            return side.send("post", post, {**body, "metadata": {}})
        if self.what == "bad-name":
            return side.send("post", post, {**body, "metadata": {"name": "Bad_Name"}})
        if self.what == "url-name-mismatch":
            return side.send("put", put, {**body, "metadata": {"name": self.name + "x"}})
        if self.what == "strategic-merge-patch":
            return side.send("patch", put, {"spec": {}}, content_type="application/strategic-merge-patch+json")
        if self.what == "bad-field-selector":
            return side.send("get", post, field_selector="spec.replicas=1")
        if self.what == "bad-label-selector":
            return side.send("get", post, label_selector="app==,")
        if self.what == "bad-dry-run":
            return side.send("post", post, body, dry_run="Some")
        raise AssertionError(self.what)
