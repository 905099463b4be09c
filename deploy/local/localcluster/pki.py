"""Certificates for the local control plane: cluster CA, front-proxy CA, serving and client certs.

Generation is :mod:`shared.tls`'s; this module only keeps the files in the cluster's state
directory and reuses them, so a restarted cluster keeps trusting the kubeconfigs and serving
certificates it handed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from shared.security import tls


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path

    def cert_key(self) -> tls.CertKey:
        return tls.CertKey(self.cert.read_bytes(), self.key.read_bytes())


def _write(pair: KeyPair, material: tls.CertKey) -> KeyPair:
    pair.key.touch(mode=0o600, exist_ok=True)
    pair.key.write_bytes(material.key_pem)
    pair.cert.write_bytes(material.cert_pem)
    return pair


def ensure_ca(directory: Path, stem: str, cn: str) -> KeyPair:
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    return _write(pair, tls.new_ca(cn, days=3650))


def issue(
    ca: KeyPair,
    directory: Path,
    stem: str,
    cn: str,
    *,
    orgs: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
) -> KeyPair:
    """Issue (or reuse) a leaf certificate signed by ``ca``: a client cert, or a serving cert with SANs."""
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    material = tls.new_cert(ca.cert_key(), cn, dns_names=dns, ip_addresses=ips, organizations=orgs,
                            server=server, client=not server)
    return _write(pair, material)


def ensure_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The key pair kube-apiserver signs and verifies service-account tokens with."""
    private, public = directory / "sa.key", directory / "sa.pub"
    if private.exists() and public.exists():
        return private, public
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private.touch(mode=0o600, exist_ok=True)
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public
