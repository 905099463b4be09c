"""Certificates and TLS contexts for the aggregated API servers.

kube-apiserver only talks to an aggregated server over HTTPS and identifies itself with a
front-proxy client certificate, so every service needs (a) a serving certificate whose SANs match
how the APIService reaches it and (b) a server context that *asks* for client certificates and
verifies them against the request-header CA.  For local runs and tests the certificates are
generated here; in a cluster they come from flags (a cert-manager or Helm-generated Secret).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Certificates are back-dated a little so a clock skew between hosts does not reject them.
_BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate with its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class ServingFiles:
    """Where :func:`write_serving_cert` put its files, plus the CA to publish as ``caBundle``."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    ca_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds and every Go and Python TLS stack accepts them.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures for every certificate; certificate and CRL signing only for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int, *,
             ca: bool) -> x509.CertificateBuilder:
    """What every certificate here carries: a validity backdated for clock skew, constraints and key usage."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(_key_usage(ca=ca), critical=True)
    )


def new_ca(common_name: str = "agl-ca", days: int = 365) -> CertKey:
    """Create a self-signed CA able to sign serving and client certificates."""
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key, days, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_cert(
    ca: CertKey,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    organizations: Sequence[str] = (),
    server: bool = True,
    client: bool = False,
    days: int = 365,
) -> CertKey:
    """Create a leaf certificate signed by ``ca``.

    ``server``/``client`` select the extended key usages; Python and Go both refuse a client
    certificate that lacks ``clientAuth`` and a serving certificate that lacks ``serverAuth``.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key created by new_ca()")
    key = _new_key()
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = _builder(_name(common_name, organizations), ca_cert.subject, key, days, ca=False).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_serving_cert(
    directory: str | Path,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    common_name: str = "agl-apiserver",
) -> ServingFiles:
    """Generate a CA and a serving certificate for the given SANs and write them as PEM files.

    Files: ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) in ``directory``, the names a
    Kubernetes TLS Secret uses so the same flags work in and out of a cluster.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = new_ca(f"{common_name}-ca")
    leaf = new_cert(ca, common_name, dns_names=dns_names, ip_addresses=ip_addresses, server=True)
    ca_file, cert_file, key_file = out / "ca.crt", out / "tls.crt", out / "tls.key"
    ca_file.write_bytes(ca.cert_pem)
    cert_file.write_bytes(leaf.cert_pem)
    key_file.touch(mode=0o600, exist_ok=True)
    key_file.chmod(0o600)
    key_file.write_bytes(leaf.key_pem)
    return ServingFiles(cert_file=cert_file, key_file=key_file, ca_file=ca_file, ca_pem=ca.cert_pem)


def _text(pem: bytes | str) -> str:
    return pem.decode("ascii") if isinstance(pem, bytes) else pem


def server_context(cert_file: str | Path, key_file: str | Path, client_ca: bytes | str | None) -> ssl.SSLContext:
    """Server-side TLS context that verifies client certificates *when one is presented*.

    ``CERT_OPTIONAL`` rather than ``CERT_REQUIRED``: health probes come without a certificate, and so
    does Prometheus, which authenticates with its ServiceAccount token; the request-header
    authenticator then rejects front-proxy requests that carry no verified certificate.  Python
    only exposes ``peercert`` after the chain verified against ``client_ca``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if client_ca:
        ctx.load_verify_locations(cadata=_text(client_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(
    ca_pem: bytes | str, cert_file: str | Path | None = None, key_file: str | Path | None = None
) -> ssl.SSLContext:
    """Client-side TLS context trusting ``ca_pem``, optionally presenting a client certificate.

    Used by tests and local tooling that play kube-apiserver's front proxy.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=_text(ca_pem))
    if cert_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    return ctx
