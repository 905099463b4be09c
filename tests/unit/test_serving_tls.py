"""Serving certificate reloads: a half-written rotation never replaces a working certificate."""

from __future__ import annotations

from pathlib import Path

from shared.security import tls
from shared.security.dynamic import ServingTLS


def write(directory: Path, leaf: tls.CertKey, *, cert: bool = True, key: bool = True) -> None:
    if cert:
        (directory / "tls.crt").write_bytes(leaf.cert_pem)
    if key:
        (directory / "tls.key").write_bytes(leaf.key_pem)


def test_reload_waits_for_a_matching_key(tmp_path: Path) -> None:
    ca = tls.new_ca()
    first, second = (tls.new_cert(ca, name, ip_addresses=["127.0.0.1"]) for name in ("first", "second"))
    write(tmp_path, first)
    serving = ServingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", ca.cert_pem.decode())
    served = serving.fingerprint
    assert not serving.reload_files()  # nothing changed
    write(tmp_path, second, key=False)  # the certificate lands before its key
    assert not serving.reload_files() and serving.fingerprint == served
    write(tmp_path, second, cert=False)
    assert serving.reload_files() and serving.fingerprint != served
    (tmp_path / "tls.key").unlink()  # a Secret volume between two symlink swaps
    assert not serving.reload_files()
