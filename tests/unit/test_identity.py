"""A replica's identity (its Lease holder and kopf's): the pod's name in a cluster, ``<hostname>_<pid>`` out of one,
and never a question to the passwd database.

The chart runs the services as uid 65532, which python:3.11-slim has no passwd entry for; kopf left to name
itself calls ``getpass.getuser()`` there and every pod crash-looped with ``KeyError: 'getpwuid(): uid not found:
65532'``. The regression test runs the service's identity detection and kopf itself in a process of that uid.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shared.client.leader import default_identity, default_namespace

ROOT = Path(__file__).resolve().parents[2]
#: The chart's runAsUser/runAsGroup (deploy/chart/values.yaml), the Dockerfile's USER.
POD_UID = POD_GID = 65532


# ----------------------------------------------------------------------------------- the rule


def test_pod_name_is_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "agl-helm-agl-7d9f8b6c4-x2x7q")
    assert default_identity() == "agl-helm-agl-7d9f8b6c4-x2x7q"
    assert default_identity({"POD_NAME": "other-pod"}) == "other-pod"


@pytest.mark.parametrize("environ", [{}, {"POD_NAME": ""}, {"POD_NAME": "  "}], ids=["unset", "empty", "blank"])
def test_out_of_a_cluster_it_is_hostname_and_pid(environ: dict[str, str]) -> None:
    assert default_identity(environ) == f"{socket.gethostname()}_{os.getpid()}"


def test_unset_in_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    assert default_identity() == f"{socket.gethostname()}_{os.getpid()}"


def test_pod_namespace_comes_before_the_service_account_mount(tmp_path: Path) -> None:
    mounted = tmp_path / "namespace"
    mounted.write_text("from-the-mount\n")
    assert default_namespace(mounted, {"POD_NAMESPACE": "agl-system"}) == "agl-system"
    assert default_namespace(mounted, {"POD_NAMESPACE": ""}) == "from-the-mount"
    assert default_namespace(tmp_path / "absent", {}) == "default"


# ----------------------------------------------------------------------------------- as uid 65532

# Run in the child as uid 65532: kopf's own detection fails there, the service's identity and kopf run with it
# (against a stand-in API server that answers discovery with nothing, so kopf starts and stops at once).
AS_POD_UID = """
import asyncio, json, os, pwd, sys

import kopf
from aiohttp import web
from kopf._core.engines import peering

from shared.client import leader
from shared.service.operator import run_operator

out = {"uid": os.getuid(), "gid": os.getgid()}
try:
    out["passwd_entry"] = pwd.getpwuid(os.getuid()).pw_name
except KeyError:
    out["passwd_entry"] = None
try:  # what kopf does when it is not given an identity: the crash-loop
    out["kopf_detect_own_id"] = peering.detect_own_id(manual=False)
except KeyError as exc:
    out["kopf_detect_own_id"] = f"KeyError: {exc}"
identity = leader.default_identity()  # what shared.service.runtime.run hands the elector and run_operator
out["identity"] = identity
registry = kopf.OperatorRegistry()
port: list[int] = []
requests: list[str] = []


@kopf.on.login(registry=registry)
def login(**_):
    return kopf.ConnectionInfo(server=f"http://127.0.0.1:{port[0]}")


async def discovery(request):
    requests.append(request.path)
    known = {"/api": {"kind": "APIVersions", "versions": []}, "/apis": {"kind": "APIGroupList", "groups": []}}
    return web.json_response(known.get(request.path, {}), status=200 if request.path in known else 404)


async def main():
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", discovery)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port.append(site._server.sockets[0].getsockname()[1])
    stop, ready = asyncio.Event(), asyncio.Event()
    operator = asyncio.create_task(run_operator(registry, stop, ready, identity=identity))
    await asyncio.wait({operator, asyncio.create_task(ready.wait())}, timeout=60,
                       return_when=asyncio.FIRST_COMPLETED)
    out["kopf_ready"] = ready.is_set()
    stop.set()
    await asyncio.wait_for(operator, 60)  # raises what kopf raised: KeyError without an identity
    await runner.cleanup()
    out["kopf_requests"] = sorted(set(requests))


asyncio.run(main())
print(json.dumps(out))
"""

_PR_SET_KEEPCAPS = 8
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _become_pod_uid() -> None:
    """In the child before exec: uid/gid 65532, no supplementary groups, and only CAP_DAC_READ_SEARCH kept (as
    an ambient capability, so it outlives exec). That capability lets the process read files whatever their
    mode -- the interpreter may live under a directory only root may enter (a pyenv in /root, 0700) -- and
    grants no identity: the uid still has no passwd entry, which the child checks and reports."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, call: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), call)

    check(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setresgid(POD_GID, POD_GID, POD_GID)
    os.setresuid(POD_UID, POD_UID, POD_UID)
    kept = 1 << _CAP_DAC_READ_SEARCH
    data = (_CapData * 2)(_CapData(kept, kept, kept), _CapData(0, 0, 0))
    check(libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data), "capset")
    check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0),
          "prctl(PR_CAP_AMBIENT_RAISE)")


def _run_as_pod_uid(extra_env: dict[str, str]) -> dict[str, object]:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.fail(f"this test must run as root on Linux to start a process as uid {POD_UID} (euid "
                    f"{os.geteuid() if hasattr(os, 'geteuid') else '?'} on {sys.platform}): it is the regression "
                    "test of the crash-loop under the chart's uid, and is not skipped")
    try:
        entry = pwd.getpwuid(POD_UID)
    except KeyError:
        pass
    else:
        pytest.fail(f"uid {POD_UID} has a passwd entry here ({entry.pw_name}): the test needs it to have none, as "
                    "in the image")
    # What the pod's process has: HOME=/tmp (the Dockerfile), no USER/LOGNAME/LNAME/USERNAME, no kopf POD_ID.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(ROOT), **extra_env}
    try:
        done = subprocess.run([sys.executable, "-c", AS_POD_UID], cwd="/tmp", env=env, capture_output=True,
                              text=True, timeout=120, preexec_fn=_become_pod_uid)
    except subprocess.SubprocessError as exc:
        pytest.fail(f"could not start a process as uid {POD_UID} (setresuid, capset and prctl in the child): {exc}")
    assert done.returncode == 0, f"the process as uid {POD_UID} failed:\n{done.stderr[-4000:]}"
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["uid"] == POD_UID and out["gid"] == POD_GID, out
    assert out["passwd_entry"] is None, out
    # The old path, in the same process: kopf asks getpass for the user, and there is none.
    assert out["kopf_detect_own_id"] == f"KeyError: 'getpwuid(): uid not found: {POD_UID}'", out
    # kopf ran with the service's identity: it logged in and discovered (nothing), was ready and stopped.
    assert out["kopf_ready"] is True and out["kopf_requests"] == ["/api", "/apis"], out
    return out


def test_a_pod_without_a_passwd_entry_gets_its_identity_and_runs_kopf() -> None:
    out = _run_as_pod_uid({"POD_NAME": "chart-helm-agl-5c9d7b8f6-k2m4p", "POD_NAMESPACE": "agl-system"})
    assert out["identity"] == "chart-helm-agl-5c9d7b8f6-k2m4p", out


def test_a_process_out_of_a_cluster_without_a_passwd_entry_too() -> None:
    out = _run_as_pod_uid({})
    identity = str(out["identity"])
    host, _, pid = identity.rpartition("_")
    assert host == socket.gethostname() and pid.isdigit(), out
