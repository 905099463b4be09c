"""Front-proxy ("request-header") authentication, as aggregated API servers must do it.

kube-apiserver authenticates the end user itself and forwards the identity in ``X-Remote-*``
headers over a TLS connection on which it presents its front-proxy client certificate.  Those
headers are only trustworthy when that certificate verified against the request-header CA and,
when kube-apiserver publishes a list of allowed names, its CN is one of them; anybody else could
simply write the headers.  The CA, the allowed names and the header names are published in
ConfigMap ``kube-system/extension-apiserver-authentication``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from shared.api import errors
from shared.api.rest import User
from shared.security.tokens import TokenAuthenticator, bearer_token

log = logging.getLogger(__name__)

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"

#: How many client certificates' issuer checks a config remembers (kube-apiserver presents one or two).
VERDICTS_KEPT = 16

#: A certificate as ``ssl.SSLSocket.getpeercert()`` returns it (the parsed, verified form).
PeerCert = Mapping[str, Any]


def _json_list(data: Mapping[str, str], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = data.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{key} in {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} is not a JSON list: {exc}") from exc
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} in {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} must be a JSON list of strings")
    return tuple(value)


def common_name(peercert: PeerCert) -> str | None:
    """The subject CN of a ``getpeercert()`` dict (subject is a tuple of RDNs of (key, value) pairs)."""
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@lru_cache(maxsize=256)
def _extra_key(encoded: str) -> str:
    """An extra's key as the front proxy sent it in a header name (percent-encoded, any case), decoded: the
    same few keys come with every request."""
    return unquote(encoded).lower()


def _header_items(headers: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    # multidict's items() yields every occurrence of a repeated header, a plain dict one each.
    return headers.items()


@dataclass(frozen=True)
class RequestHeaderConfig:
    """What the front proxy is and which headers carry the identity."""

    client_ca: str | None
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    #: kube-apiserver's own ``client-ca-file``.  It is trusted by the TLS layer only, so that a
    #: user certificate presented straight to our port completes the handshake and is answered
    #: with a 401 Status, as kube's servers do, instead of a bare handshake failure.  It never
    #: authenticates anybody: :meth:`authenticate` insists on the request-header CA.
    cluster_client_ca: str | None = None

    @cached_property
    def _front_proxy_cas(self) -> tuple[x509.Certificate, ...]:
        if not self.client_ca:
            return ()
        try:
            return tuple(x509.load_pem_x509_certificates(self.client_ca.encode()))
        except ValueError:
            log.error("requestheader-client-ca-file holds no usable PEM certificate: rejecting every request")
            return ()

    @cached_property
    def _username_keys(self) -> tuple[str, ...]:
        return tuple(h.lower() for h in self.username_headers)

    @cached_property
    def _group_keys(self) -> frozenset[str]:
        return frozenset(h.lower() for h in self.group_headers)

    @cached_property
    def _extra_prefixes(self) -> tuple[str, ...]:
        return tuple(p.lower() for p in self.extra_headers_prefixes)

    def tls_client_cas(self) -> str | None:
        """The CA bundle for the TLS layer: the request-header CA plus the cluster's client CA."""
        parts = [p.strip() for p in (self.client_ca, self.cluster_client_ca) if p and p.strip()]
        return "\n".join(parts) + "\n" if parts else None

    def signed_by_request_header_ca(self, der: bytes) -> bool:
        """Whether a DER client certificate was issued by a certificate of the request-header CA bundle.

        The TLS layer verified the chain against :meth:`tls_client_cas`, which is wider than the
        request-header CA, so the issuer must be checked again here.  Python 3.11 exposes only
        the leaf, so the issuer must itself be in the bundle (kube's front-proxy certs are
        issued directly by it).

        The verdict is remembered per certificate: kube-apiserver presents the same one on every
        request, and a signature check per request was 6 % of a get's CPU.  The memory lives and
        dies with this config, which a CA rotation replaces.
        """
        verdicts = self._issuer_verdicts
        verdict = verdicts.get(der)
        if verdict is None:
            if len(verdicts) >= VERDICTS_KEPT:
                verdicts.clear()
            verdict = verdicts[der] = self._issued_by_front_proxy_ca(der)
        return verdict

    @cached_property
    def _issuer_verdicts(self) -> dict[bytes, bool]:
        return {}

    def _issued_by_front_proxy_ca(self, der: bytes) -> bool:
        try:
            leaf = x509.load_der_x509_certificate(der)
        except ValueError:
            return False
        for ca in self._front_proxy_cas:
            try:
                leaf.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return True
        return False

    @classmethod
    def from_configmap_data(cls, data: Mapping[str, str]) -> RequestHeaderConfig:
        """Build the config from the ConfigMap's ``data``; list values are JSON-encoded strings."""
        ca = data.get("requestheader-client-ca-file") or None
        return cls(
            client_ca=ca,
            cluster_client_ca=data.get("client-ca-file") or None,
            allowed_names=_json_list(data, "requestheader-allowed-names", ()),
            username_headers=_json_list(data, "requestheader-username-headers", ("X-Remote-User",)),
            group_headers=_json_list(data, "requestheader-group-headers", ("X-Remote-Group",)),
            extra_headers_prefixes=_json_list(data, "requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
        )

    def authenticate(
        self, peercert: PeerCert | None, headers: Mapping[str, str], peer_der: bytes | None = None
    ) -> User:
        """Return the asserted user, or raise 401 if the request did not come from the front proxy.

        ``peercert`` must be the *verified* certificate (``transport.get_extra_info("peercert")``):
        Python returns ``None`` without a certificate and an empty dict for an unverified one.
        ``peer_der`` is the same certificate in DER form; its issuer is checked against the
        request-header CA (required when the TLS layer also trusts ``cluster_client_ca``).
        """
        if not self.client_ca:
            raise errors.unauthorized("request-header authentication is not configured (no client CA)")
        if not peercert:
            raise errors.unauthorized("no verified front-proxy client certificate")
        if peer_der is None and self.cluster_client_ca:
            raise errors.unauthorized("the client certificate could not be checked against the front-proxy CA")
        if peer_der is not None and not self.signed_by_request_header_ca(peer_der):
            raise errors.unauthorized("the client certificate is not signed by the front-proxy (request-header) CA")
        if self.allowed_names:
            cn = common_name(peercert)
            if cn not in self.allowed_names:
                raise errors.unauthorized(f"client certificate CN {cn!r} is not an allowed front-proxy name")
        # Each header name lowered once (a request carries a dozen headers, each compared with several names).
        items = [(key.lower(), key, value) for key, value in _header_items(headers)]
        username = ""
        for wanted in self._username_keys:
            username = next((v.strip() for lowered, _, v in items if lowered == wanted and v.strip()), "")
            if username:
                break
        if not username:
            raise errors.unauthorized("the front proxy did not send a user name")
        group_keys = self._group_keys
        groups = tuple(v for lowered, _, v in items if lowered in group_keys and v != "")
        prefixes = self._extra_prefixes
        extra: dict[str, list[str]] = {}
        for lowered, key, value in items:
            for prefix in prefixes:
                if lowered.startswith(prefix) and len(lowered) > len(prefix):
                    # Keys are percent-encoded by the proxy because header names are restricted.
                    extra.setdefault(_extra_key(key[len(prefix) :]), []).append(value)
                    break
        return User(name=username, groups=groups, extra={k: tuple(v) for k, v in extra.items()})


class FrontProxyAuthenticator:
    """The authenticator :class:`shared.server.apiserver.ApiServer` calls for each request.

    ``config`` may be replaced at any time (e.g. after re-reading the ConfigMap); requests that
    start afterwards use the new one.
    """

    def __init__(self, config: RequestHeaderConfig) -> None:
        self.config = config

    def __call__(self, request: web.Request) -> User:
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None and peercert else None
        return self.config.authenticate(peercert, request.headers, der)


class DelegatingAuthenticator:
    """Who is asking, as a Go aggregated server's delegated authentication decides it.

    A request that presents a verified client certificate is the front proxy's, and is judged as
    such (the certificate, the allowed names, the identity headers).  A request without one that
    carries ``Authorization: Bearer`` is a direct caller (Prometheus scraping ``/metrics``), whose
    token kube-apiserver authenticates.  Anything else is 401.
    """

    def __init__(self, front_proxy: FrontProxyAuthenticator, tokens: TokenAuthenticator | None) -> None:
        self.front_proxy = front_proxy
        self.tokens = tokens

    async def __call__(self, request: web.Request) -> User:
        transport = request.transport
        has_certificate = bool(transport.get_extra_info("peercert")) if transport is not None else False
        token = bearer_token(request.headers.get("Authorization"))
        if has_certificate or token is None or self.tokens is None:
            return self.front_proxy(request)
        return await self.tokens.authenticate(token)


async def load_request_header_config(api_client: Any) -> RequestHeaderConfig:
    """Read ``kube-system/extension-apiserver-authentication`` with the service's own identity.

    Needs the ``extension-apiserver-authentication-reader`` Role in kube-system.
    """
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    cm = await core.read_namespaced_config_map(CONFIGMAP_NAME, CONFIGMAP_NAMESPACE)
    data: dict[str, str] = dict(cm.data or {})
    config = RequestHeaderConfig.from_configmap_data(data)
    if not config.client_ca:
        log.warning(
            "no requestheader-client-ca-file in %s/%s: every request will be rejected",
            CONFIGMAP_NAMESPACE,
            CONFIGMAP_NAME,
        )
    return config
