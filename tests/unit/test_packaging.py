"""The image's packaging, read from the files (there is no Docker engine on the development machines).

- the Dockerfile installs the runtime dependencies from requirements.lock with hashes required and the project's
  own wheel without dependencies;
- every runtime pin of pyproject.toml is in the lock at the same version, every entry of the lock is pinned and
  carries sha256 hashes, and the lock's header is the command ``nox -s lock`` runs;
- nothing of deploy/ (the development-only localcluster) reaches the build: no COPY or bind mount names it,
  .dockerignore excludes it, and the package discovery finds every package of helm_agl, tofu_agl and shared at the
  root and localcluster only under deploy/local.

That the lock installs and satisfies itself (``pip install --require-hashes --no-deps -r requirements.lock``,
``pip check``) needs the network and half a minute, so it is not run here.
"""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
NOXFILE = ROOT / "noxfile.py"

IMAGE_PACKAGES = ("helm_agl", "tofu_agl", "shared")
SHA256 = re.compile(r"--hash=sha256:[0-9a-f]{64}")


# ---- readers ----------------------------------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, list[str]]]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped: (KEYWORD, shell words)."""
    out: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        words = shlex.split(pending + line, posix=True)
        pending = ""
        out.append((words[0].upper(), words[1:]))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def commands(words: list[str]) -> list[list[str]]:
    """A RUN instruction's words split into its shell commands (at &&, ||, ;), the --mount options dropped."""
    out: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";"):
            out.append([])
        elif not (word.startswith("--mount=") and not out[-1]):
            out[-1].append(word)
    return [cmd for cmd in out if cmd]


def options(flag: str) -> dict[str, str]:
    """``--mount=type=bind,source=a,target=b`` -> {"type": "bind", "source": "a", "target": "b"}."""
    return dict(part.split("=", 1) if "=" in part else (part, "") for part in flag.split("=", 1)[1].split(","))


def context_sources(text: str) -> list[str]:
    """Every path the image build reads from the build context: COPY/ADD sources and bind mounts not from a stage."""
    sources: list[str] = []
    for keyword, words in instructions(text):
        if keyword in ("COPY", "ADD"):
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            if not any(f.startswith("--from=") for f in flags):
                sources += paths[:-1]
        elif keyword == "RUN":
            for word in words:
                if word.startswith("--mount="):
                    mount = options(word)
                    if mount.get("type") == "bind" and "from" not in mount:
                        sources.append(mount.get("source", "."))
    return sources


def lock_entries(text: str) -> list[tuple[Requirement, list[str]]]:
    """The lock's requirements, each with its hash options (continuation lines joined, comments dropped)."""
    entries: list[tuple[Requirement, list[str]]] = []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("-"), f"an option line in the lock: {line!r}"
        spec, *rest = line.split()
        entries.append((Requirement(spec), [w for w in rest if w.startswith("--hash=")]))
    return entries


def pinned(req: Requirement) -> str:
    specs = list(req.specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"{req} is not pinned with =="
    return specs[0].version


def ignored(patterns: list[str], path: str) -> bool:
    """Whether .dockerignore's patterns leave ``path`` out of the context: the last pattern that matches the path
    or one of its parent directories wins, ``!`` re-includes (the rules Docker documents)."""

    def regex(pattern: str) -> re.Pattern[str]:
        out = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**", i):
                out += ".*"
                i += 2
                if pattern.startswith("/", i):
                    out = out[:-2] + "(?:.*/)?"
                    i += 1
                continue
            c = pattern[i]
            out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
            i += 1
        return re.compile(out + r"\Z")

    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.removeprefix("!").strip("/")
        if any(regex(pattern).match(prefix) for prefix in prefixes):
            verdict = not negate
    return verdict


def dockerignore() -> list[str]:
    lines = (line.strip() for line in DOCKERIGNORE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def lock_command() -> list[str]:
    """The ``session.run`` arguments of noxfile.py's ``lock`` session (string constants, the posargs left out)."""
    tree = ast.parse(NOXFILE.read_text())
    session = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "lock")
    runs = [node for node in ast.walk(session) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run"]
    assert len(runs) == 1, "the lock session runs one command"
    return [arg.value for arg in runs[0].args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]


def runtime_dependencies() -> list[Requirement]:
    project: dict[str, Any] = tomllib.loads(PYPROJECT.read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]]


# ---- the Dockerfile installs from the lock ------------------------------------------------------------------------


def pip_commands(keyword: str) -> list[list[str]]:
    found = []
    for kind, words in instructions(DOCKERFILE.read_text()):
        if kind == "RUN":
            found += [cmd for cmd in commands(words) if cmd[:2] == ["pip", keyword]]
    return found


def test_dockerfile_installs_the_lock_with_hashes_required() -> None:
    installs = pip_commands("install")
    from_lock = [cmd for cmd in installs if "-r" in cmd]
    assert len(from_lock) == 1, installs
    cmd = from_lock[0]
    assert "--require-hashes" in cmd and "--no-deps" in cmd, cmd
    target = cmd[cmd.index("-r") + 1]
    mounts = [options(w) for kind, words in instructions(DOCKERFILE.read_text()) if kind == "RUN"
              for w in words if w.startswith("--mount=")]
    assert any(m.get("target") == target and m.get("source") == LOCK.name and "from" not in m for m in mounts), (
        f"-r {target} is not requirements.lock from the build context")


def test_dockerfile_resolves_nothing_outside_the_lock() -> None:
    installs = pip_commands("install")
    assert installs
    for cmd in installs:
        assert "--no-deps" in cmd, f"{shlex.join(cmd)} may resolve dependencies the lock does not pin"
        assert "-r" in cmd or "--no-index" in cmd, f"{shlex.join(cmd)} installs from an index without hashes"
    project = [cmd for cmd in installs if "-r" not in cmd]
    assert any(arg.startswith("/wheels/cozystack_agl_parallel-") for cmd in project for arg in cmd), project
    for cmd in pip_commands("wheel"):
        assert "--no-deps" in cmd, f"{shlex.join(cmd)} builds dependencies the lock does not pin"


# ---- the lock ----------------------------------------------------------------------------------------------------


def test_every_runtime_pin_is_in_the_lock_at_its_version() -> None:
    locked = {canonicalize_name(req.name): pinned(req) for req, _ in lock_entries(LOCK.read_text())}
    for req in runtime_dependencies():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} is not in {LOCK.name}; run nox -s lock"
        assert locked[name] == pinned(req), f"{req} but {LOCK.name} has {locked[name]}; run nox -s lock"


def test_every_lock_entry_is_pinned_and_hashed() -> None:
    entries = lock_entries(LOCK.read_text())
    assert len(entries) >= len(runtime_dependencies())
    for req, hashes in entries:
        pinned(req)
        assert not req.url and not req.extras, req
        assert hashes and all(SHA256.fullmatch(h) for h in hashes), f"{req} has no --hash=sha256: ({hashes})"


def test_every_named_line_of_the_lock_carries_a_hash() -> None:
    """The same, line by line: a requirement line whose hashes sit on its continuation lines, and nowhere else."""
    lines = LOCK.read_text().splitlines()
    for at, line in enumerate(lines):
        if not line or line[0] in " #":
            continue
        hashes = []
        for follow in lines[at:]:
            hashes += SHA256.findall(follow)
            if not follow.endswith("\\"):
                break
        assert hashes, f"line {at + 1} of {LOCK.name} names a package without --hash=sha256: {line!r}"


def test_lock_header_is_the_nox_session_command() -> None:
    header = [line.removeprefix("#").strip() for line in LOCK.read_text().splitlines()[:2]]
    assert header[0].startswith("This file was autogenerated by uv"), header
    assert shlex.split(header[1]) == lock_command(), "requirements.lock was not made by the command nox -s lock runs"
    assert {"--generate-hashes", "pyproject.toml", LOCK.name} <= set(lock_command())


# ---- localcluster stays out of the image -------------------------------------------------------------------------


def test_image_build_reads_nothing_of_deploy() -> None:
    sources = context_sources(DOCKERFILE.read_text())
    assert sources
    for source in sources:
        path = source.removeprefix("./").strip("/")
        assert not path.startswith("deploy") and "localcluster" not in path, f"the image build reads {source}"
        assert path not in ("", "."), "the image build copies the whole context"


def test_dockerignore_leaves_deploy_out_and_the_image_sources_in() -> None:
    patterns = dockerignore()
    for path in ("deploy/local/localcluster/__init__.py", "deploy/local/localcluster/versions.py", "deploy/chart"):
        assert ignored(patterns, path), f".dockerignore lets {path} into the build context"
    for source in context_sources(DOCKERFILE.read_text()):
        probe = source.strip("/") + ("/__init__.py" if source.endswith("/") else "")
        assert not ignored(patterns, probe), f".dockerignore leaves out {source}, which the Dockerfile reads"


def test_dockerignore_reading() -> None:
    assert ignored(["deploy"], "deploy/local/x.py")
    assert not ignored(["deploy", "!deploy/local"], "deploy/local/x.py")
    assert ignored(["**/__pycache__"], "shared/api/__pycache__/a.pyc")
    assert ignored(["*.egg-info"], "x.egg-info/PKG-INFO")
    assert not ignored(["*.egg-info"], "sub/x.egg-info/PKG-INFO")
    assert not ignored(["deploy/chart"], "deploy/local/x.py")


def test_package_discovery_splits_the_image_packages_from_localcluster() -> None:
    """pyproject finds packages rather than listing them: at the root exactly every package directory of helm_agl,
    tofu_agl and shared (a listed subpackage can be forgotten), localcluster only under deploy/local, which the image's
    build context leaves out."""
    from setuptools import find_packages

    setuptools_config: dict[str, Any] = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    assert "packages" in setuptools_config and "find" in setuptools_config["packages"], "packages are listed by hand"
    find = setuptools_config["packages"]["find"]
    assert find.get("namespaces") is False
    found = {where: set(find_packages(where=str(ROOT / where), include=find["include"])) for where in find["where"]}
    expected = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in IMAGE_PACKAGES
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found.pop(".") == expected
    assert found == {"deploy/local": {"localcluster"}}
    assert ignored(dockerignore(), "deploy/local/localcluster/__init__.py")
