"""``python -m tofu_agl.generate MODULE_DIR --kind KIND ...``: print a definition for a module.

The definition goes to stdout as YAML, ready for ``kubectl apply -f -``; every construct that
could not be translated goes to stderr, one line each, naming the variable.  Exit status 1 only
when the module cannot be read.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tofu_agl.generate.definition import Options, definition
from tofu_agl.generate.hcl import ModuleError, read_module
from tofu_agl.variables import NAMINGS, SNAKE_CASE

_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def plural_of(singular: str) -> str:
    """English plural of a lower-case kind: ``vpc`` -> ``vpcs``, ``policy`` -> ``policies``."""
    if singular.endswith(("s", "x", "z", "ch", "sh")):
        return f"{singular}es"
    if singular.endswith("y") and singular[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return f"{singular[:-1]}ies"
    return f"{singular}s"


def _kind(value: str) -> str:
    if not _KIND.fullmatch(value):
        raise argparse.ArgumentTypeError("must start with an upper-case letter, then letters and digits")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tofu_agl.generate",
        description="Print a TofuApplicationDefinition (YAML) for an OpenTofu module.",
    )
    p.add_argument("module_dir", metavar="MODULE_DIR", type=Path,
                   help="directory holding the module's *.tf / *.tofu files")
    p.add_argument("--kind", required=True, type=_kind, help="kind users create, e.g. DNSZone")
    p.add_argument("--plural", help="resource name (default: the kind lower-cased, English plural)")
    p.add_argument("--source-kind", default="GitRepository", choices=["GitRepository", "OCIRepository", "Bucket"])
    p.add_argument("--source-name", help="Flux source holding the module (default: MODULE_DIR's name)")
    p.add_argument("--source-namespace", help="namespace of the source (default: each object's own)")
    p.add_argument("--path", help="directory of the module inside the source")
    p.add_argument("--approve-plan", default="auto", choices=["auto", "manual"])
    p.add_argument(
        "--variable-naming",
        default=SNAKE_CASE,
        choices=NAMINGS,
        help="snake_case: properties are camelCase, converted back for the module; verbatim: as declared",
    )
    return p


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings, so the embedded schema stays readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    singular = args.kind.lower()
    options = Options(
        kind=args.kind,
        plural=args.plural or plural_of(singular),
        singular=singular,
        source_kind=args.source_kind,
        source_name=args.source_name or args.module_dir.resolve().name,
        source_namespace=args.source_namespace,
        path=args.path,
        approve_plan=args.approve_plan,
        variable_naming=args.variable_naming,
    )
    try:
        module = read_module(args.module_dir)
    except ModuleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    problems: list[str] = []
    result: Any = definition(module, options, problems)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    sys.stdout.write(yaml.dump(result, Dumper=_Dumper, sort_keys=False, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
