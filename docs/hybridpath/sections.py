"""The document's sections, each computed from the code: sizes, likeness, the Protocol's bindings, the converter."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

import helm_agl.definition
import helm_agl.names
import helm_agl.project
import helm_agl.registry
import tofu_agl.approval
import tofu_agl.build
import tofu_agl.definition
import tofu_agl.draft2
import tofu_agl.names
import tofu_agl.project
import tofu_agl.reconciler
import tofu_agl.registry
import tofu_agl.rollout
import tofu_agl.storage
import tofu_agl.validate
import tofu_agl.variables
from docs.hybridpath.backend import DRAFT2, Backend, HelmBackend, TofuBackend
from docs.hybridpath.measure import ROOT, RUN, load_module
from docs.hybridpath.reflect import const, ref, value, where
from docs.hybridpath.stacks import (
    STACKS,
    TOOLING,
    all_names,
    baseline,
    combined,
    describe_run,
    longest_runs,
    module_names,
    paired_names,
    pairs,
    serving,
    shared_imports,
    shared_modules,
)
from shared.api.rest import Column

OUTPUT = ROOT / "docs" / "design" / "hybrid-path.md"
SAMPLES = ROOT / "deploy" / "samples" / "definitions"
#: What the proposal's deck estimated for Draft 1, and the parts it named (seed 000, "Draft 1 — Trade-offs":
#: REST, reconciler, dynamic-type registration).
CLAIMED_DUPLICATION = "~80%"
CLAIMED_PARTS = ("storage", "reconciler", "registry")
#: Pairs at least this alike are "the same code"; below LOW they are where the backends differ.
HIGH, LOW = 0.6, 0.4
#: Pairs smaller than this (code lines per side) are too small to rank in the summary.
RANKED_MIN_LINES = 50


def pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def sample(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    return obj


def codes(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names)) or "none"


def section_summary() -> list[str]:
    helm, tofu = serving("helm_agl"), serving("tofu_agl")
    every = pairs()
    paired_total = sum(p.a.code_lines + p.b.code_lines for p in every)
    alike = sum(p.alike for p in every)
    runs = sum(p.in_runs for p in every)
    stacks_total = sum(m.code_lines for m in helm + tofu)
    claimed = [p for p in every if p.a.name in CLAIMED_PARTS]
    ranked = sorted((p for p in every if min(p.a.code_lines, p.b.code_lines) >= RANKED_MIN_LINES),
                    key=lambda p: (-p.share(p.alike), p.a.name))
    floor = baseline()
    return [
        "## Summary",
        "",
        f"- **Measured duplication.** Of the {paired_total} code lines in the {len(every)} sibling module pairs, "
        f"{2 * alike} ({pct(2 * alike / paired_total)}) are alike by shape, {2 * runs} "
        f"({pct(2 * runs / paired_total)}) in runs of {RUN} or more lines. Over both serving stacks "
        f"({stacks_total} code lines, Tofu-only modules included) that is {pct(2 * alike / stacks_total)} alike, "
        f"{pct(2 * runs / stacks_total)} in runs. For scale, unrelated module pairs across the stacks score a "
        f"median of {pct(floor[0])} (at most {pct(floor[1])}).",
        f"- **Against the proposal.** The deck estimated {CLAIMED_DUPLICATION} duplication for REST, reconciler "
        f"and dynamic-type registration; for those pairs ({', '.join(f'`{p.a.name}`' for p in claimed)}) the "
        f"measure gives {pct(combined(claimed))} alike, {pct(combined(claimed, runs=True))} in runs. "
        + ("The estimate roughly holds for that plumbing" if combined(claimed) >= HIGH
           else "The estimate is high even for that plumbing")
        + ", not for the stack as a whole: the translation and the Tofu-only modules are new code, not copies.",
        f"- **Where.** Ranked among pairs of at least {RANKED_MIN_LINES} code lines a side: "
        + ", ".join(f"`{p.a.name}` {pct(p.share(p.alike))}" for p in ranked) + ".",
        f"- **The interface.** Every method of Draft 2's `Backend` has a counterpart in both packages (section c), "
        f"but the code needs {len(LEAKS)} things the interface does not have: "
        + "; ".join(leak.title.lower() for leak in LEAKS) + ".",
        "- **Migration.** `tofu_agl.draft2.to_draft2` turns a TofuApplicationDefinition into a Draft 2 "
        "ApplicationDefinition with `spec.backend.type: Terraform` without losing a field (section d).",
        "",
    ]


def section_modules() -> list[str]:
    out = [
        "## (a) The two stacks side by side",
        "",
        "Sizes are **code lines**: physical lines that carry at least one Python token other than a comment or a "
        "docstring (blank lines, comments and docstrings excluded). **doc** counts docstring lines. The role is "
        "the first line of the module's docstring. `__init__.py` files (docstring only) are left out.",
        "",
        "| module | helm_agl code | helm_agl doc | tofu_agl code | tofu_agl doc | helm_agl role | tofu_agl role |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    totals = {"helm_agl": [0, 0], "tofu_agl": [0, 0]}
    for name in all_names():
        cells: list[str] = []
        roles: list[str] = []
        for package in STACKS:
            if name in module_names(package):
                module = load_module(package, name)
                cells += [str(module.code_lines), str(module.doc_lines)]
                roles.append(module.role.replace("|", "\\|"))
                if name not in TOOLING:
                    totals[package][0] += module.code_lines
                    totals[package][1] += module.doc_lines
            else:
                cells += ["—", "—"]
                roles.append("—")
        label = f"`{name}`" + (f" (tooling: {TOOLING[name]})" if name in TOOLING else "")
        out.append(f"| {label} | {' | '.join(cells)} | {' | '.join(roles)} |")
    h, t = totals["helm_agl"], totals["tofu_agl"]
    out.append(f"| **serving stack** | **{h[0]}** | **{h[1]}** | **{t[0]}** | **{t[1]}** | | |")
    shared = shared_modules()
    shared_code = sum(m.code_lines for m in shared)
    helm_uses, tofu_uses = shared_imports("helm_agl"), shared_imports("tofu_agl")
    out += [
        "",
        f"Both stacks stand on `shared/` ({len(shared)} modules, {shared_code} code lines), the backend-agnostic "
        "toolkit that Draft 2 keeps as it is. Imported directly by both: "
        f"{codes(helm_uses & tofu_uses)}; only by helm_agl: {codes(helm_uses - tofu_uses)}; only by tofu_agl: "
        f"{codes(tofu_uses - helm_uses)}.",
        "",
    ]
    return out


def section_duplication() -> list[str]:
    out = [
        "## (b) Duplicated code between helm_agl and tofu_agl",
        "",
        "**Method.** Each module is tokenized (Python's `tokenize`); comments, docstrings and blank lines are "
        "dropped; every identifier becomes `N`, every string (f-strings included) `S`, every number `0`; keywords "
        "and operators are kept. Tokens are joined per physical line, so `release_name(defn, name)` and "
        "`terraform_name(defn, name)` are the same line. The two modules of a sibling pair are then compared as "
        "sequences of such lines with `difflib.SequenceMatcher` (no junk heuristic): **alike** is the number of "
        "lines in its matching blocks, counted on each side, so the share is `2 * alike / (lines_helm + lines_tofu)` "
        f"(SequenceMatcher's ratio). Single matching lines are often just `)` or `return N`; **in runs** counts only "
        f"matching blocks of at least {RUN} consecutive lines, the part that is plainly copied. The measure is "
        "order-sensitive (code moved to another place in the file does not count), so it is a lower bound. "
        "The noise floor is the same measure between modules that are *not* siblings.",
        "",
        f"| pair | helm_agl lines | tofu_agl lines | alike | share alike | in runs ≥ {RUN} | share in runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    every = pairs()
    for p in every:
        out.append(
            f"| `{p.a.name}` | {p.a.code_lines} | {p.b.code_lines} | {p.alike} | {pct(p.share(p.alike))} | "
            f"{p.in_runs} | {pct(p.share(p.in_runs))} |"
        )
    a_total = sum(p.a.code_lines for p in every)
    b_total = sum(p.b.code_lines for p in every)
    out.append(f"| **all pairs** | **{a_total}** | **{b_total}** | **{sum(p.alike for p in every)}** | "
               f"**{pct(combined(every))}** | **{sum(p.in_runs for p in every)}** | "
               f"**{pct(combined(every, runs=True))}** |")
    only = [m for m in serving("tofu_agl") if m.name not in paired_names()]
    only_helm = [m for m in serving("helm_agl") if m.name not in paired_names()]
    high = ", ".join(f"`{p.a.name}`" for p in every if p.share(p.alike) >= HIGH) or "none"
    low = ", ".join(f"`{p.a.name}`" for p in every if p.share(p.alike) < LOW) or "none"
    median, top = baseline()
    out += [
        "",
        f"Modules without a sibling (all of their lines are backend-specific): tofu_agl "
        f"{', '.join(f'`{m.name}` ({m.code_lines})' for m in only) or 'none'}; helm_agl "
        f"{', '.join(f'`{m.name}` ({m.code_lines})' for m in only_helm) or 'none'}.",
        f"Noise floor: non-sibling pairs across the stacks score a median of {pct(median)}, at most {pct(top)}.",
        "",
        f"Reading: the pairs at least {pct(HIGH)} alike ({high}) are mostly the same code with the "
        "backing object's name changed — a Draft 2 refactor writes them once, and their remainder becomes "
        "`Backend` hooks (section c). The pairs below "
        f"{pct(LOW)} ({low}) and the modules without a sibling are where the backends really differ: the "
        "code a `Backend` implementation holds.",
        "",
        f"Longest runs per pair (at most three of {RUN} lines or more; the refactor's shopping list). Each names "
        "the innermost def or class of the lines it covers, on both sides when they differ:",
        "",
    ]
    for p in every:
        out.append(f"- `{p.a.name}`: {'; '.join(describe_run(p, b) for b in longest_runs(p)) or 'none'}")
    out.append("")
    return out


def _status_keys(which: str) -> set[str]:
    """Top-level Application status fields each stack publishes in its OpenAPI schema."""
    if which == "helm":
        info = helm_agl.registry.resource_info(helm_agl.definition.ApplicationDefinition.from_object(
            sample("postgres")), helm_agl.names.GROUP)
    else:
        info = tofu_agl.registry.resource_info(
            tofu_agl.definition.TofuApplicationDefinition.from_object(sample("vpc")), tofu_agl.names.DEFAULT_GROUP)
    props: dict[str, Any] = info.schema["properties"]["status"]["properties"]
    return set(props)


@dataclass(frozen=True)
class Leak:
    title: str
    code: list[str]
    needs: str


def _leaks() -> list[Leak]:
    tt, st = tofu_agl.names, tofu_agl.storage.ApplicationStorage
    helm_status, tofu_status = _status_keys("helm"), _status_keys("tofu")
    helm_columns = [c.name for c in helm_agl.project.COLUMNS]
    tofu_columns = [c.name for c in tofu_agl.project.COLUMNS]
    return [
        Leak(
            "Plan approval",
            [ref(tofu_agl.approval.check_approval),
             f"called from {where(tofu_agl.validate.validate_application)} with the live Terraform from "
             f"{where(st.update)}",
             f"spec.approvePlan decided by {where(tofu_agl.approval.approve_plan)}",
             ref(tofu_agl.project.awaiting_approval),
             f"annotation {const(tt, 'APPROVE_ANNOTATION')} = {value(tt, 'APPROVE_ANNOTATION')}"],
            "a write-path hook that sees the request *and the live target* before Build, may reject (422) and "
            "feeds Build (`Admit(app, live) (extra, error)`), plus a user-visible Event. Helm has no such step.",
        ),
        Leak(
            "Outputs",
            [f"{where(tofu_agl.project.project_status)} (`status.outputs`, names only)",
             ref(tofu_agl.definition.TofuApplicationDefinition.render_outputs_secret_name),
             f"{where(tofu_agl.definition._outputs_problem)} (acceptance reason "
             f"{value(tofu_agl.definition, 'INVALID_PLACEHOLDER')})"],
            f"a per-backend status schema (tofu_agl publishes `{sorted(tofu_status - helm_status)}` that helm_agl "
            "does not) and per-backend definition checks; Draft 2's opaque `status.backend` RawExtension hides "
            "exactly the fields the dashboard wants.",
        ),
        Leak(
            "Runner identity",
            [f"{const(tt, 'RUNNER_SA_ANNOTATION')} = {value(tt, 'RUNNER_SA_ANNOTATION')}",
             f"checked in {where(tofu_agl.validate.validate_application)}",
             f"applied in {where(tofu_agl.build._runner_service_account)}",
             f"kept by {where(tofu_agl.rollout.rollout_patch)} only while `allowServiceAccountOverride` holds"],
            "a per-instance override read from the Application, validated against a definition flag: Build "
            "sees the Application so it can apply it, but the check needs the missing `Validate`.",
        ),
        Leak(
            "Extra columns",
            [f"{const(helm_agl.project, 'COLUMNS')} = `{helm_columns}` with {where(helm_agl.project.table_cells)}",
             f"{const(tofu_agl.project, 'COLUMNS')} = `{tofu_columns}` with {where(tofu_agl.project.table_cells)}",
             f"both registered through `resource_info` ({where(helm_agl.registry.resource_info)}, "
             f"{where(tofu_agl.registry.resource_info)})"],
            f"`Columns()` and `TableCells(app)` on the backend (tofu_agl adds "
            f"`{[c for c in tofu_columns if c not in helm_columns]}`): kubectl output is part of the UX.",
        ),
        Leak(
            "Pinned fields never rolled out",
            [f"{const(tofu_agl.rollout, 'PINNED_FIELDS')} = `{list(tofu_agl.rollout.PINNED_FIELDS)}` "
             f"(vs {const(tofu_agl.rollout, 'ROLLOUT_FIELDS')})",
             f"second result of {where(tofu_agl.rollout.rollout_patch)}", ref(tofu_agl.rollout.not_rolled_out),
             f"written by {where(tofu_agl.reconciler.DefinitionReconciler._write_not_rolled_out)} to the "
             "definition's `status.notRolledOut`"],
            "`Reconcile` must be able to report \"kept on purpose\" per instance, not just `updated bool`; the "
            "generic reconciler then owns the definition status.",
        ),
        Leak(
            "Definition acceptance",
            [f"{where(helm_agl.definition._intrinsic)} vs {where(tofu_agl.definition._intrinsic)} "
             f"(tofu_agl adds {value(tofu_agl.definition, 'INVALID_PLACEHOLDER')}, "
             f"{value(tofu_agl.definition, 'INVALID_VARIABLE_NAME')} and "
             f"{value(tofu_agl.definition, 'SHARED_STATE_SUFFIX')})",
             ref(tofu_agl.variables.naming_problems), ref(tofu_agl.definition.state_suffix_problem)],
            "`ValidateDefinition(def)` so a kind whose schema cannot become module variables, or whose instances "
            "would share one state, is never served.",
        ),
        Leak(
            "Served group",
            [f"`group` parameter of {where(tofu_agl.build.build)}, {where(tofu_agl.project.to_application)}, "
             f"{where(tofu_agl.validate.validate_application)}", f"default {const(tt, 'DEFAULT_GROUP')} = "
             f"{value(tt, 'DEFAULT_GROUP')} vs fixed {const(helm_agl.names, 'GROUP')}"],
            "nothing once Draft 2 serves one group; until then the group is an input of Build and of the "
            "ownership labels.",
        ),
    ]


LEAKS: list[Leak] = _leaks()


#: How each of Draft 2's methods fits the real code (the references come from the bindings).
FIT: dict[str, str] = {
    "Type": "Implicit in Draft 1: the definition's CRD kind picks the process. The converter (d) makes it "
            "explicit as `spec.backend.type`.",
    "TargetGVK": "Fits, with the plural added: both stacks' clients address a resource, not a kind.",
    "TargetName": "Fits, but reads need the inverse (`application_name`), and lists, watches and rollouts select "
                  "the backing objects by labels (`selector`, `owns`), and consistent lists from the cache need "
                  "a backing object the controller ignores (`watched_selector`, `fence`): five members the "
                  "interface lacks.",
    "Build": "Fits in the middle, leaks at both ends. Both builders take the *live* object on update to keep "
             "controller-owned fields, and the served `group`; validation is per backend (Terraform variable "
             "names, unknown keys, the runner annotation, plan approval) and needs a `validate` member.",
    "ProjectStatus": "Too narrow: both stacks project the *whole* Application, and the spec read-back is as "
                     "backend-specific as the status (Helm values minus `_` keys vs Terraform `vars` mapped back "
                     "through the schema's naming).",
    "Reconcile": "Fits as a pure patch builder: the I/O and conflict retry around it are alike in both "
                 "reconcilers and belong to one generic reconciler. But it returns a second value, the fields "
                 "kept on purpose, that `(updated bool, err)` cannot carry.",
}


def _bound(backend: type, member: str) -> str:
    """What a stack binds to one Protocol member: a function reference, or a constant's value."""
    bound = getattr(backend, member)
    if inspect.isfunction(bound):
        return ref(bound)
    if isinstance(bound, tuple) and all(isinstance(c, Column) for c in bound):
        return f"`{[c.name for c in bound]}`"
    return f"`{bound!r}`"


def _protocol_source() -> str:
    """The Protocol as declared, with ``...`` for the docstrings, so the document shows the checked interface."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Backend)))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node) is not None:
            node.body[0] = ast.Expr(ast.Constant(...))
    return ast.unparse(tree)


def section_interface() -> list[str]:
    out = [
        "## (c) Draft 2's `Backend` interface against the real code",
        "",
        "The interface is written down as a `typing.Protocol` in `docs/hybridpath/backend.py`, and each stack's "
        "real functions are bound to it there (`HelmBackend`, `TofuBackend`: references, no logic). `mypy --strict` "
        "(run by `nox -s tests`) checks that both bindings satisfy the Protocol structurally, so every signature "
        "below is proven compatible with the interface; neither stack imports that module. The six methods of the "
        "proposal (seed 000, \"Draft 2 — The interface\") come first, then what the code needs beyond them.",
        "",
        "```python",
        _protocol_source(),
        "```",
        "",
    ]
    for method, (member, go) in DRAFT2.items():
        out += [f"### {method}", "", f"Draft 2: `{go}` → Protocol member `{member}`", ""]
        out += [f"- helm_agl: {_bound(HelmBackend, member)}", f"- tofu_agl: {_bound(TofuBackend, member)}",
                f"- Fit: {FIT[method]}", ""]
    extra = [m for m in _members() if m not in {member for member, _ in DRAFT2.values()}]
    out += ["### Beyond the six methods", "", "Members the Protocol adds because both stacks need them:", ""]
    for member in extra:
        doc = inspect.getdoc(getattr(Backend, member)) or ""
        out.append(f"- `{member}` — {doc} helm_agl: {_bound(HelmBackend, member)}; "
                   f"tofu_agl: {_bound(TofuBackend, member)}.")
    out += ["", "### Where it leaks", "", "What the real code does that Draft 2's six methods cannot express; the "
            "members above answer part of it, the rest needs hooks or a per-backend schema:", ""]
    for leak in LEAKS:
        out += [f"**{leak.title}.** Code: {'; '.join(leak.code)}.", "", f"Needs: {leak.needs}", ""]
    return out


def _members() -> list[str]:
    """The Protocol's members in declaration order."""
    return [name for name in Backend.__dict__ if not name.startswith("_") and name not in ("mro",)]



def section_converter() -> list[str]:
    vpc = sample("vpc")
    converted = tofu_agl.draft2.to_draft2(vpc)
    fields = list(vpc["spec"]["terraform"])
    carried = converted["spec"]["backend"]["terraform"]
    named_by_seed = ("sourceRef", "approvePlan", "destroyResourcesOnDeletion")
    assert all(carried[f] == vpc["spec"]["terraform"][f] for f in fields), "converter lost a field"
    return [
        "## (d) From TofuApplicationDefinition to a Draft 2 ApplicationDefinition",
        "",
        f"{ref(tofu_agl.draft2.to_draft2)} is a pure function; `python -m tofu_agl.draft2 FILE...` prints the "
        "converted YAML (`-` reads standard input). `spec.application` and `spec.dashboard` move unchanged, "
        "`spec.release` keeps `prefix` and `labels`, and the whole `spec.terraform` becomes "
        "`spec.backend.terraform` next to `spec.backend.type: Terraform`. Fields are copied as written (no "
        "defaults filled in); status and server-set metadata are dropped. Malformed input raises `ValueError` "
        "naming the field.",
        "",
        f"The seeds name {', '.join(f'`{f}`' for f in named_by_seed)} under Draft 2's `spec.backend.terraform`; "
        f"the other {len([f for f in fields if f not in named_by_seed])} fields of the sample keep their "
        "TofuApplicationDefinition names (a rename is for the Draft 2 review to decide): "
        f"{', '.join(f'`{f}`' for f in fields if f not in named_by_seed)}. The result has no `release.chartRef` "
        "(in Draft 2 the chart moves to `spec.backend.helm`), so it does not validate against today's "
        "ApplicationDefinition CRD — it is the shape Draft 2 would serve.",
        "",
        f"`deploy/samples/definitions/vpc.yaml` converted (all {len(fields)} terraform fields carried):",
        "",
        "```yaml",
        tofu_agl.draft2.dump([converted]).rstrip("\n"),
        "```",
        "",
    ]


def render() -> str:
    lines = [
        "# The hybrid path: evidence from the two stacks",
        "",
        "<!-- Generated by `python -m docs.hybridpath` (`nox -s docs`); do not edit by hand. "
        "tests/unit/test_hybrid_path_doc.py fails when this file is stale. -->",
        "",
        "The proposal recommends the hybrid path: Draft 1 (two parallel stacks) as the PoC, then Draft 2 (one "
        "`Backend` interface) designed against the code Draft 1 produced (SPEC §9). This document is that "
        "comparison, measured on this repository's `helm_agl` and `tofu_agl`.",
        "",
    ]
    for section in (section_summary, section_modules, section_duplication, section_interface, section_converter):
        lines += section()
    return "\n".join(lines).rstrip("\n") + "\n"


