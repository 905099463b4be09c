"""Certificates for the local control plane: cluster CA, front-proxy CA, serving and client certs.

Generated with ``cryptography`` on first start and kept in the cluster's state directory, so a
restarted cluster keeps trusting the kubeconfigs and serving certificates it handed out.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write(pair: KeyPair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pair.key.chmod(0o600)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def _load(pair: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def ensure_ca(directory: Path, stem: str, cn: str) -> KeyPair:
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return _write(pair, cert, key)


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
    ca_cert, ca_key = _load(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _write(pair, builder.sign(ca_key, hashes.SHA256()), key)


def ensure_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The key pair kube-apiserver signs and verifies service-account tokens with."""
    private, public = directory / "sa.key", directory / "sa.pub"
    if private.exists() and public.exists():
        return private, public
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public
