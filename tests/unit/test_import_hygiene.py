"""What importing the packages does to a process, each case in a fresh interpreter.

- The serving processes (``python -m helm_agl``, ``python -m tofu_agl``) never load the HCL parser:
  ``hcl2`` and ``tofu_agl.generate`` belong to the platform engineer's tool, ``python -m tofu_agl.generate``.
- Importing ``shared``, ``helm_agl`` or ``tofu_agl`` (or any module under them) installs no import hook:
  the one the services use (:mod:`shared.lazy_imports`) is installed by their entry points, which these
  tests also check, so the services keep the Kubernetes client's generated modules out of the process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Modules only the definition generator may load.
GENERATOR_ONLY = ("hcl2", "lark", "tofu_agl.generate")
#: One generated model module of kubernetes_asyncio: loaded only when the client is imported eagerly.
GENERATED_MODEL = "kubernetes_asyncio.client.models.v1_pod"


def _run(script: str, *args: str) -> Any:
    """Run ``script`` in a new interpreter of this environment; it prints one JSON document last."""
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The service's own entry point, run as ``python -m`` runs it, with the service's real flags, up to the point
# where it would start serving: ``asyncio.Runner.run`` is replaced, so the ``run(args, component, build)``
# coroutine the runtime hands it (the app already wired: ``build`` is made) is recorded and closed, not run.
SERVE_UP_TO_START = """
import asyncio, json, sys
started = []

def record(self, coro, **_):
    started.append({name: coro.cr_frame.f_locals.get(name) for name in ("component", "build")})
    coro.close()

asyncio.Runner.run = record
before = list(sys.meta_path)
import importlib
main = importlib.import_module(sys.argv[1] + ".__main__").main
main(["--kubeconfig", "/nonexistent/kubeconfig", "--log-level", "ERROR"])
print(json.dumps({
    "started": [{"component": s["component"], "build": callable(s["build"])} for s in started],
    "modules": sorted(name for name, module in sys.modules.items() if module is not None),
    "hidden": sorted(name for name, module in sys.modules.items() if module is None),
    "added_finders": [type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path if f not in before],
    "first_finder": type(sys.meta_path[0]).__module__ + "." + type(sys.meta_path[0]).__qualname__,
}))
"""


@pytest.mark.parametrize("service,component", [("tofu_agl", "tofu-agl"), ("helm_agl", "helm-agl")])
def test_serving_process_never_loads_the_hcl_parser(service: str, component: str) -> None:
    got = _run(SERVE_UP_TO_START, service)
    assert got["started"] == [{"component": component, "build": True}]
    loaded = [m for m in got["modules"] if any(m == name or m.startswith(name + ".") for name in GENERATOR_ONLY)]
    assert loaded == [], f"python -m {service} loads the definition generator's modules: {loaded}"
    assert f"{service}.app" in got["modules"] and "shared.service.runtime" in got["modules"]


@pytest.mark.parametrize("service", ["tofu_agl", "helm_agl"])
def test_entry_point_installs_the_lazy_client_imports(service: str) -> None:
    """The benefit of :mod:`shared.lazy_imports` stays with the services: their entry point installs it before
    anything imports the client, so kopf and the runtime import ``kubernetes_asyncio.client`` without its
    ~800 generated modules."""
    got = _run(SERVE_UP_TO_START, service)
    lazy = "shared.lazy_imports._LazyPackageFinder"
    assert got["first_finder"] == lazy and got["added_finders"].count(lazy) == 1, got["added_finders"]
    assert "kubernetes_asyncio.client" in got["modules"] and "kopf" in got["modules"]
    assert GENERATED_MODEL not in got["modules"]


@pytest.mark.parametrize("service", ["tofu_agl", "helm_agl"])
def test_entry_point_hides_the_synchronous_clients_kopf_would_import(service: str) -> None:
    """This environment has ``pykube`` and ``kubernetes`` (for the test tools); kopf imports both when it can.
    The services use neither, so their entry point hides them and kopf starts without them."""
    assert importlib.util.find_spec("pykube") is not None and importlib.util.find_spec("kubernetes") is not None
    got = _run(SERVE_UP_TO_START, service)
    assert {"pykube", "kubernetes"} <= set(got["hidden"])
    loaded = [m for m in got["modules"] if m.split(".")[0] in ("pykube", "kubernetes")]
    assert loaded == [] and "kopf" in got["modules"], loaded


IMPORT_ALONE = """
import builtins, json, sys
meta_path, path_hooks, hook = list(sys.meta_path), list(sys.path_hooks), builtins.__import__
modules = set(sys.modules)
__import__(sys.argv[1])
print(json.dumps({
    "same_meta_path": len(sys.meta_path) == len(meta_path) and all(a is b for a, b in zip(sys.meta_path, meta_path)),
    "meta_path": [repr(f) for f in sys.meta_path],
    "same_path_hooks": len(sys.path_hooks) == len(path_hooks)
                       and all(a is b for a, b in zip(sys.path_hooks, path_hooks)),
    "same_import": builtins.__import__ is hook,
    "new_modules": sorted(set(sys.modules) - modules),
}))
"""


@pytest.mark.parametrize("package", ["shared", "helm_agl", "tofu_agl"])
def test_importing_a_package_changes_nothing(package: str) -> None:
    got = _run(IMPORT_ALONE, package)
    assert got["same_meta_path"], f"import {package} changed sys.meta_path: {got['meta_path']}"
    assert got["same_path_hooks"] and got["same_import"]
    assert got["new_modules"] == [package]


IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
before = list(sys.meta_path)
names = []
for package in ("shared", "helm_agl", "tofu_agl"):
    path = importlib.import_module(package).__path__
    names += [info.name for info in pkgutil.walk_packages(path, package + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({
    "imported": names,
    "added_finders": [type(f).__module__ for f in sys.meta_path if not any(f is b for b in before)],
    "path_hooks": [getattr(h, "__module__", "") for h in sys.path_hooks],
}))
"""


def test_no_module_of_ours_installs_an_import_hook() -> None:
    """Importing every module under the three packages (the ``__main__`` modules too, as modules): whatever a
    third-party import adds (``six`` adds a finder of its own), no finder or path hook comes from our code."""
    got = _run(IMPORT_EVERY_MODULE)
    assert "shared.lazy_imports" in got["imported"] and "tofu_agl.__main__" in got["imported"]
    ours = ("shared", "helm_agl", "tofu_agl")
    assert [m for m in got["added_finders"] if m.split(".")[0] in ours] == []
    assert [m for m in got["path_hooks"] if m.split(".")[0] in ours] == []


def test_definition_generator_still_loads_hcl2() -> None:
    """``python -m tofu_agl.generate`` is the platform engineer's tool: it still runs, and reads HCL."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tofu_agl.generate", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.startswith("usage: ")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"hcl2", "tofu_agl.generate.hcl", "tofu_agl.generate.definition"} <= imported
