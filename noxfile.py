"""Project sessions.  The names are the project's interface:

- ``nox -s tests``  lint, type check, unit tier, then the integration and flux tiers (the README's test command)
- ``nox -s up``     start the local control plane, both services and Flux (``-- --no-flux`` skips it), print the env;
                    ``-- --node``: a real node, the image built from the Dockerfile and the chart installed with helm
- ``nox -s down``   stop all of it
- ``nox -s demo``   up + sample definitions + Applications, generated objects side by side (``-- --node``: on the
                    real node)
- ``nox -s bench``  the benchmarks, reported as ratios against the direct operation
- ``nox -s e2e``    the kind-based tier, for machines with Docker and kind (fails with the reason elsewhere; the
                    node tier, in ``nox -s tests``, is the end-to-end tier that runs everywhere)
- ``nox -s docs``   regenerate docs/hybrid-path.md (the hybrid-path evidence, SPEC §9)
- ``nox -s fuzz``   the differential tier's long profile (thousands of sequences) and schemathesis on both services
- ``nox -s lock``   regenerate requirements.lock, the image's runtime dependencies pinned with hashes
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PACKAGES = ["helm_agl", "tofu_agl", "shared", "deploy/local/localcluster"]


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f".[{extras}]")
    _byte_compile(session)


def _byte_compile(session: nox.Session) -> None:
    """Compile the packages' bytecode, as the image's ``pip install`` does: an editable install under
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module of a service again at each of its starts
    (about 0.1 s of a start-up on two cores, and the test tiers start services many times)."""
    session.run("python", "-m", "compileall", "-q", *PACKAGES, silent=True)


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Lint, type check, the unit tier, then the cluster tiers (integration, contract, flux, differential), with the
    node tier (the chart on a real node) running beside them.

    The binaries the cluster tiers need (the control plane, helm-, source- and kustomize-controller,
    tofu) take many minutes to build cold, so the build starts first, in the background, and runs
    while lint, type checks and the unit tier do.
    """
    _install(session)
    started = time.monotonic()
    log = session.create_tmp() + "/localcluster-build.log"
    with open(log, "w") as out:
        builder = subprocess.Popen([session.bin + "/python", "-m", "localcluster", "build", "--flux", "--node"],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        session.run("ruff", "check", *PACKAGES, "tests", "docs", "noxfile.py")
        session.run("mypy", "--strict", "-p", "helm_agl", "-p", "tofu_agl", "-p", "shared", "-p", "localcluster")
        # Draft 2's Backend Protocol: each stack's binding in docs/hybridpath/backend.py is checked structurally here.
        session.run("mypy", "--strict", "-p", "docs.hybridpath")
        if not session.posargs:
            session.run("pytest", "-ra", "--durations=15", "tests/unit")
        session.log("waiting for the background build (log: %s)", log)
        code = _follow(builder, log, session)
    finally:
        if builder.poll() is None:
            builder.terminate()
    session.log("build finished after %ds (exit %d)", time.monotonic() - started, code)
    if code != 0:
        session.error(f"python -m localcluster build --flux --node failed; see {log}")
    # With arguments (``nox -s tests -- tests/flux -k helm``) they select what runs, the unit tier included.
    if session.posargs:
        session.run("pytest", "-m", "not e2e", "-ra", "--durations=15", *session.posargs)
        return
    node_log = session.create_tmp() + "/node-tier.log"
    node_tier = _start_node_tier(session, node_log)
    try:
        session.run("pytest", "-m", "not e2e", "-ra", "--durations=15", "--ignore=tests/unit", "--ignore=tests/node")
    finally:
        node_code = _finish_node_tier(session, node_tier, node_log)
    if node_code != 0:
        session.error(f"the node tier failed (exit {node_code}); its output is above and in {node_log}")


def _start_node_tier(session: nox.Session, log: str) -> subprocess.Popen[bytes]:
    """The node tier in a pytest of its own, at the same time as the other cluster tiers: its cluster, its network
    namespace and its node are its own, and most of its time is spent waiting for pods, so the two share the cores
    well (in turn they would take the tiers' times added up)."""
    session.log("the node tier runs meanwhile (log: %s)", log)
    with open(log, "w") as out:
        return subprocess.Popen([session.bin + "/pytest", "-ra", "--durations=10", "-p", "no:cacheprovider",
                                 "tests/node"], stdout=out, stderr=subprocess.STDOUT)


def _finish_node_tier(session: nox.Session, node_tier: subprocess.Popen[bytes], log: str) -> int:
    """Wait for the node tier (at most 40 minutes) and print its output; its exit code (pytest's 5, no test, fails)."""
    try:
        code = node_tier.wait(timeout=2400)
    except subprocess.TimeoutExpired:
        node_tier.terminate()
        code = node_tier.wait(timeout=60)
        session.warn("the node tier did not finish within 40 minutes: stopped")
    with open(log) as source:
        print(source.read(), flush=True)
    session.log("node tier finished (exit %d)", code)
    return code if code is not None else 1


def _follow(builder: subprocess.Popen[bytes], log: str, session: nox.Session) -> int:
    """Wait for the background build, echoing the progress lines it writes from here on (a cold build of the
    controllers takes many minutes; a silent wait looks like a hang)."""
    with open(log) as source:
        source.seek(0, os.SEEK_END)
        while True:
            code = builder.poll()
            for line in source.read().splitlines():
                session.log("build: %s", line.removeprefix("[localcluster] "))
            if code is not None:
                return code
            time.sleep(2)


@nox.session(python="3.11")
def up(session: nox.Session) -> None:
    """Start (or keep) the local control plane, both services, helm-controller, source-controller and the chart
    repository (``nox -s up -- --no-flux`` skips the Flux part); prints KUBECONFIG and a PATH with kubectl, helm
    and tofu."""
    _install(session)
    session.run("python", "-m", "localcluster", "up", *session.posargs)


@nox.session(python="3.11")
def down(session: nox.Session) -> None:
    _install(session)
    session.run("python", "-m", "localcluster", "down", *session.posargs)


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """The main job: both services on a local control plane, sample kinds, generated objects side by side.
    ``-- --node``: the same with the services as the chart's pods on a real node (``up --node``)."""
    _install(session)
    args = list(session.posargs)
    node = "--node" in args
    if node:
        args.remove("--node")
    session.run("python", "-m", "localcluster", "up", *(["--node"] if node else []))
    session.run("python", "-m", "localcluster.demo", *(["--name", "node"] if node else []), *args)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """SPEC §8 for both services: writes docs/benchmarks.md, .json and the scale curve PNG. Two parts, both by
    default: ``spec`` (the ratios, about 7 min) and ``scale`` (50 000 Applications, start-up, throughput, about
    30 min); ``-- --parts spec`` runs one and keeps the other's last figures."""
    _install(session, "test,bench")
    session.run("python", "-m", "localcluster", "build")
    session.run("python", "-m", "tests.bench", "--out", "docs", *session.posargs)


@nox.session(python="3.11")
def fuzz(session: nox.Session) -> None:
    """The differential tier's long profile: new request sequences every run (``-- --examples N`` per kind,
    default 750) compared with a CRD, and schemathesis on each service's OpenAPI (no 5xx).  The seed is
    printed first; ``AGL_FUZZ_SEED=<seed> nox -s fuzz`` replays a run."""
    session.install("-e", ".[test,fuzz]")
    args = list(session.posargs)
    examples = "750"
    if "--examples" in args:
        at = args.index("--examples")
        examples = args[at + 1]
        del args[at : at + 2]
    seed = os.environ.get("AGL_FUZZ_SEED") or str(random.randrange(2**32))
    session.log("fuzz seed %s (AGL_FUZZ_SEED=%s replays this run)", seed, seed)
    session.run("python", "-m", "localcluster", "build")
    session.run("pytest", "-m", "differential", "-ra", "-p", "no:cacheprovider", f"--hypothesis-seed={seed}",
                "tests/differential", *args,
                env={"AGL_DIFFERENTIAL_PROFILE": "long", "AGL_DIFFERENTIAL_EXAMPLES": examples,
                     "AGL_TEST_CLUSTER": os.environ.get("AGL_TEST_CLUSTER", "fuzz")})


@nox.session(python="3.11")
def e2e(session: nox.Session) -> None:
    """Real Flux and tofu-controller in kind, where Docker and kind exist. Elsewhere it fails with that reason
    rather than passing on no test: the node tier (tests/node, run by ``nox -s tests``) is the end-to-end tier
    that runs on every machine."""
    import shutil

    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if missing:
        session.error(f"the kind tier needs {' and '.join(missing)}, which this machine lacks; the node tier "
                      "(tests/node, part of `nox -s tests`) runs the chart on a real node instead")
    _install(session)
    session.run("pytest", "-m", "e2e", "-ra", "tests/e2e", *session.posargs)


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Regenerate docs/hybrid-path.md from the code (a unit test fails while it is stale)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "docs.hybridpath")


@nox.session(python="3.11")
def lock(session: nox.Session) -> None:
    """Regenerate requirements.lock: pyproject.toml's runtime dependencies (not the extras) and everything they pull
    in, resolved for the image (Python 3.11, linux x86_64) with the sha256 of every file; the Dockerfile installs it
    with --require-hashes.  Pins already in the lock are kept; ``nox -s lock -- --upgrade`` moves them."""
    session.install("uv==0.13.9")
    session.run("uv", "pip", "compile", "pyproject.toml", "--generate-hashes", "--python-version", "3.11",
                "--python-platform", "x86_64-unknown-linux-gnu", "--output-file", "requirements.lock", *session.posargs)
