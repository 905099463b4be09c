"""Convert a TofuApplicationDefinition into a Draft 2 ``ApplicationDefinition`` (SPEC §9 (d)).

The hybrid path ends with Draft 2: one ``ApplicationDefinition`` CRD whose ``spec.backend.type``
picks the backend.  This converter is the migration step for the Tofu side, written now so the
reviewers can see that nothing a Draft 1 definition says is lost on the way.  It is a pure
function of the object (no cluster, no defaults filled in): what the author wrote is what moves.

The mapping::

    TofuApplicationDefinition (cozystack.io/v1alpha1)  ->  ApplicationDefinition (cozystack.io/v1alpha1)
    metadata.{name, labels, annotations}                   metadata.{name, labels, annotations}
    spec.application                                       spec.application            (unchanged)
    spec.release.{prefix, labels}                          spec.release.{prefix, labels}
    spec.terraform.<every field>                           spec.backend.terraform.<same field>
                                                           spec.backend.type: Terraform
    spec.dashboard                                         spec.dashboard              (unchanged)

Where the seeds specify Draft 2's shape (``spec.backend.type`` and, under
``spec.backend.terraform``, ``sourceRef``, ``approvePlan`` and ``destroyResourcesOnDeletion``),
it is followed.  Everything else the seeds leave open (``path``, ``interval``, ``retryInterval``,
``writeOutputsToSecret``, ``variableNaming``, ``serviceAccountName``,
``allowServiceAccountOverride``, ``runnerPodTemplate``, ``backendConfig``, ``varsFrom``,
``workspace``, ``storeReadablePlan``, and any field a newer CRD adds) keeps the name it has in
``TofuApplicationDefinition.spec.terraform``: a rename would be a decision for the Draft 2
review, not for a converter.  Fields are copied as written, not defaulted, so a default that
changes in Draft 2 applies to converted definitions as it would to new ones.

Not carried: ``status`` and the server-set metadata (``uid``, ``resourceVersion``,
``generation``, ``creationTimestamp``, ``managedFields``, ...), since the result is a new object
to create.  ``spec.release`` has no ``chartRef``: in Draft 2 the chart moves to
``spec.backend.helm`` and ``spec.release`` keeps only naming, so the result does not validate
against today's (Draft 1) ApplicationDefinition CRD, which requires ``release.chartRef``.

``python -m tofu_agl.draft2 FILE...`` prints the converted YAML of every TofuApplicationDefinition
in the files (``-`` reads standard input).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from shared.bodies import JSON
from tofu_agl.definition import API_VERSION, KIND, TofuApplicationDefinition

DRAFT2_API_VERSION = "cozystack.io/v1alpha1"
DRAFT2_KIND = "ApplicationDefinition"
BACKEND_TYPE = "Terraform"
#: Metadata a user writes; the rest is set by the API server and must not travel.
KEPT_METADATA = ("name", "labels", "annotations")
#: Spec sections with a fixed place in the result; any other section is carried verbatim after them.
_PLACED = ("application", "release", "terraform", "dashboard")


def _describe(obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
    return f"{KIND} {name!r}" if isinstance(name, str) and name else KIND


def _check(obj: Any) -> None:
    """Raise ValueError, naming the object and field, unless ``obj`` is a well-formed definition."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a {KIND} object (a mapping), got {type(obj).__name__}")
    what = _describe(obj)
    if obj.get("kind") != KIND:
        raise ValueError(f"{what}: kind must be {KIND!r}, got {obj.get('kind')!r}")
    if obj.get("apiVersion") != API_VERSION:
        raise ValueError(f"{what}: apiVersion must be {API_VERSION!r}, got {obj.get('apiVersion')!r}")
    try:
        TofuApplicationDefinition.from_object(dict(obj))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(object)'}: {err['msg']}" for err in exc.errors()
        )
        raise ValueError(f"{what} is malformed: {problems}") from None


def to_draft2(tofu_definition_object: Mapping[str, Any]) -> JSON:
    """The Draft 2 ``ApplicationDefinition`` equivalent to a TofuApplicationDefinition object.

    Pure: the input is not modified and the result shares no mutable data with it.  Raises
    ``ValueError`` with the object's name and the offending field when the input is not a
    well-formed TofuApplicationDefinition (wrong kind/apiVersion, missing ``spec.application``
    or ``spec.terraform.sourceRef``, a wrongly typed field, ...).
    """
    _check(tofu_definition_object)
    src = copy.deepcopy(dict(tofu_definition_object))
    meta_in: Mapping[str, Any] = src["metadata"]
    spec_in: Mapping[str, Any] = src["spec"]

    metadata: JSON = {k: meta_in[k] for k in KEPT_METADATA if meta_in.get(k) not in (None, {})}
    release_in: JSON = dict(spec_in.get("release") or {})
    release: JSON = {"prefix": release_in.pop("prefix", None) or "", "labels": release_in.pop("labels", None) or {}}
    release.update(release_in)

    spec: JSON = {
        "application": spec_in["application"],
        "release": release,
        "backend": {"type": BACKEND_TYPE, "terraform": spec_in["terraform"]},
    }
    if spec_in.get("dashboard") is not None:
        spec["dashboard"] = spec_in["dashboard"]
    spec.update({k: v for k, v in spec_in.items() if k not in _PLACED})
    return {"apiVersion": DRAFT2_API_VERSION, "kind": DRAFT2_KIND, "metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------- YAML output


#: Strings longer than this (an openAPISchema on one line) are written as literal blocks, as
#: definitions are usually written by hand.
LONG = 100


class _Dumper(yaml.SafeDumper):
    """Literal block style for multi-line and long strings, so converted schemas stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value or len(value) > LONG else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(objects: Sequence[JSON]) -> str:
    """YAML documents for ``objects`` in the given key order, long lines never folded."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=1 << 30, allow_unicode=True)


def _load(source: str) -> list[Any]:
    text = sys.stdin.read() if source == "-" else Path(source).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the converted YAML of every document in the given files; 1 if any could not be converted."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        summary = (__doc__ or "").splitlines()[0]
        print(f"usage: python -m tofu_agl.draft2 FILE... ('-' for stdin)\n\n{summary}",
              file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    converted: list[JSON] = []
    failed = False
    for source in args:
        try:
            documents = _load(source)
        except (OSError, yaml.YAMLError) as exc:
            print(f"{source}: {exc}", file=sys.stderr)
            failed = True
            continue
        for index, doc in enumerate(documents):
            try:
                converted.append(to_draft2(doc))
            except ValueError as exc:
                print(f"{source} (document {index + 1}): {exc}", file=sys.stderr)
                failed = True
    if converted:
        sys.stdout.write(dump(converted))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
