"""A TofuApplicationDefinition assembled from a read module.

Each variable becomes one top-level property of ``openAPISchema``: required when it has no
default, with its description, default, ``nullable: true`` when the module says
``nullable = true``, ``x-cozystack-sensitive: true`` when it is ``sensitive``, and its
translated validations.  A sensitive variable's default stays in the module: the schema is
published to every reader of the API's OpenAPI, and leaving the property out lets the module
apply its own default.  Outputs become ``writeOutputsToSecret.outputs``; the sensitive ones are
also listed in the Secret's annotation :data:`SENSITIVE_OUTPUTS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tofu_agl.generate.hcl import Module, Variable
from tofu_agl.generate.types import Naming, set_default, type_schema
from tofu_agl.generate.validation import translate
from tofu_agl.variables import SENSITIVE

JSON = dict[str, Any]

#: Annotation of the outputs Secret listing (comma-separated) the module's sensitive outputs.
SENSITIVE_OUTPUTS = "tofu.apps.cozystack.io/sensitive-outputs"


@dataclass(frozen=True)
class Options:
    kind: str
    plural: str
    singular: str
    source_kind: str
    source_name: str
    source_namespace: str | None
    path: str | None
    approve_plan: str
    variable_naming: str


def spec_schema(module: Module, naming: Naming) -> JSON:
    """The JSON schema of the kind's ``.spec``: one property per variable, in module order."""
    properties: JSON = {}
    required: list[str] = []
    for variable in module.variables:
        where = f"variable {variable.name!r}"
        key = naming.property(variable.name, where)
        if key is None:
            continue
        properties[key] = _variable_schema(variable, naming, where)
        if not variable.has_default:
            required.append(key)
    schema: JSON = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _variable_schema(variable: Variable, naming: Naming, where: str) -> JSON:
    schema = type_schema(variable.type, naming, where)
    if variable.has_default and not variable.sensitive:
        set_default(schema, variable.default, naming.mode)
    if variable.nullable is True:
        schema["nullable"] = True
    if variable.sensitive:
        schema[SENSITIVE] = True
    for attribute in variable.other_attributes:
        naming.problems.append(f"{where}: attribute {attribute!r} is not translated")
    untranslated: list[str] = []
    for validation in variable.validations:
        keywords = translate(validation.condition, variable.name, schema)
        if keywords is None or keywords.keys() & schema.keys():
            untranslated.append(f"{validation.text} ({validation.error_message})")
            naming.problems.append(f"{where}: validation `{validation.text}` kept as text in the description")
        else:
            schema.update(keywords)
    description = variable.description or ""
    if untranslated:
        checks = "\n".join(f"- {text}" for text in untranslated)
        description = f"{description}\n\nChecked by the module when planning:\n{checks}".strip()
    if description:
        schema = {"description": description, **schema}
    return schema


def definition(module: Module, options: Options, problems: list[str]) -> JSON:
    """The TofuApplicationDefinition for ``module``; what cannot be translated goes to ``problems``."""
    naming = Naming(options.variable_naming, problems)
    problems.extend(f"file {name!r}: JSON syntax is not read; its variables and outputs are missing"
                    for name in module.unread)
    source: JSON = {"kind": options.source_kind, "name": options.source_name}
    if options.source_namespace:
        source["namespace"] = options.source_namespace
    terraform: JSON = {"sourceRef": source}
    if options.path:
        terraform["path"] = options.path
    terraform["approvePlan"] = options.approve_plan
    terraform["variableNaming"] = options.variable_naming
    if module.outputs:
        outputs: JSON = {"name": "{{ .name }}-outputs", "outputs": [o.name for o in module.outputs]}
        sensitive = [o.name for o in module.outputs if o.sensitive]
        if sensitive:
            outputs["annotations"] = {SENSITIVE_OUTPUTS: ",".join(sensitive)}
        terraform["writeOutputsToSecret"] = outputs
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": options.singular},
        "spec": {
            "application": {
                "kind": options.kind,
                "plural": options.plural,
                "singular": options.singular,
                "openAPISchema": json.dumps(spec_schema(module, naming), indent=2),
            },
            "release": {"prefix": f"{options.singular}-", "labels": {}},
            "terraform": terraform,
        },
    }
