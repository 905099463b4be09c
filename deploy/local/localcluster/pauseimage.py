"""The pod sandbox ("pause") image: containerd's ``sandbox_image``, which cannot be pulled here either.

A static Go program of our own as PID 1 of every pod, ``FROM scratch``, run as 65535; built with the installed Go
and saved like the other images (:mod:`images`), under a hash of its source.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from . import paths
from .build import go_binary, log
from .images import ImageArchive, commit_from_scratch, image_exists, images_dir, run_step, save, short_hash

PAUSE_NAME = "localhost/agl-pause"

# PID 1 of a pod sandbox: it holds the namespaces open, reaps the orphans the kernel re-parents to it
# (nothing else would), and leaves cleanly when the runtime stops the sandbox.
_PAUSE_MAIN = """package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsignals := make(chan os.Signal, 16)
\tsignal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor sig := range signals {
\t\tif sig != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\treap()
\t}
}

// reap collects every exited child; one SIGCHLD may stand for several.
func reap() {
\tfor {
\t\tpid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
\t\tif pid <= 0 && err != syscall.EINTR {
\t\t\treturn
\t\t}
\t}
}
"""
_PAUSE_GO_MOD = "module agl.local/pause\n\ngo 1.24\n"
_PAUSE_LDFLAGS = "-s -w"
PAUSE_CONFIG = ("--entrypoint", '["/pause"]', "--user", "65535:65535")


def pause_image_ref() -> str:
    """The sandbox image for containerd's ``sandbox_image``: named by the hash of its source and build flags."""
    return f"{PAUSE_NAME}:{short_hash('pause-v1', _PAUSE_MAIN, _PAUSE_GO_MOD, _PAUSE_LDFLAGS, *PAUSE_CONFIG)}"


def _build_pause_binary(workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)  # a module of its own: no requirements, nothing to download
    (workdir / "go.mod").write_text(_PAUSE_GO_MOD)
    (workdir / "main.go").write_text(_PAUSE_MAIN)
    binary = workdir / "pause"
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    run_step([go_binary(), "build", "-trimpath", "-ldflags", _PAUSE_LDFLAGS, "-o", str(binary), "."], "build pause",
         env=env, cwd=workdir)
    return binary


def ensure_pause_image() -> ImageArchive:
    """Build (or reuse) the pause image: ``FROM scratch`` with only our static pause binary, run as 65535."""
    ref = pause_image_ref()
    tag = ref.rsplit(":", 1)[1]
    archive = images_dir() / f"agl-pause-{tag}.oci.tar"
    if archive.is_file():
        return ImageArchive(ref, archive)
    started = time.monotonic()
    binary = _build_pause_binary(paths.cache_dir() / "build" / f"pause-{tag}")
    if not image_exists(ref):
        commit_from_scratch(ref, [(binary, "/pause")], PAUSE_CONFIG)
    saved = save(ref, f"agl-pause-{tag}")
    log(f"built {ref} in {int(time.monotonic() - started)}s -> {saved.path}")
    return saved
