"""Trust and identity that change while serving: the serving certificate and the front-proxy CA.

kube-apiserver's own servers pick up a rotated serving certificate and a changed
``extension-apiserver-authentication`` ConfigMap without a restart; cert-manager renews a Secret
in place and a control-plane upgrade can replace the front-proxy CA or its allowed names, so an
aggregated server that read them once would start refusing kube-apiserver (or trusting a retired
CA) until somebody restarted it.

How a change reaches new connections: aiohttp listens with one ``SSLContext`` for its lifetime,
so that context is only an entry point whose SNI callback (called for every ClientHello, with or
without a server name) moves each new connection onto the *current* context.  Replacing the
current context replaces everything at once -- certificate chain, key and trusted client CAs --
whereas loading a new chain into a live context would keep a key of another type next to it and
could only ever add CAs.  Connections already open keep the context they started with.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.client.informer import Informer
from shared.client.kube import GVR, ObjectClient
from shared.security import tls
from shared.security.authn import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE, RequestHeaderConfig

log = logging.getLogger(__name__)

#: How often the serving certificate files are compared with what is being served, in seconds.
FILE_CHECK_INTERVAL = 5.0
CONFIGMAPS = GVR("", "v1", "configmaps")


def _context(cert_pem: bytes, key_pem: bytes, client_ca: str | None) -> ssl.SSLContext:
    """A server context from PEM bytes (``ssl`` loads chains from files only, so they go through a
    private temporary directory that is gone when this returns)."""
    with tempfile.TemporaryDirectory(prefix="agl-tls-") as scratch:
        cert_file, key_file = Path(scratch, "tls.crt"), Path(scratch, "tls.key")
        cert_file.write_bytes(cert_pem)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        return tls.server_context(cert_file, key_file, client_ca)


class ServingTLS:
    """The serving certificate and key from files, and the client CAs to verify, each replaceable.

    ``context`` is what the server listens with; :meth:`reload_files` and :meth:`set_client_ca`
    change what the next handshake gets.  A certificate that does not load (a half-written
    rotation, a key that does not match) is logged and the last good one stays in use.
    """

    def __init__(self, cert_file: str | Path, key_file: str | Path, client_ca: str | None) -> None:
        self._cert_file, self._key_file = Path(cert_file), Path(key_file)
        self._cert_pem, self._key_pem = self._read()
        self._client_ca = client_ca
        self._current = _context(self._cert_pem, self._key_pem, client_ca)
        self.context = _context(self._cert_pem, self._key_pem, client_ca)
        # The verify mode is fixed per connection when it is created from this entry context, so
        # it asks for a client certificate even if no CA is known yet; the current context's
        # CAs are the ones a certificate is verified against.
        self.context.verify_mode = ssl.CERT_OPTIONAL
        self.context.sni_callback = self._select

    def _select(self, connection: Any, server_name: str | None, entry: ssl.SSLContext) -> None:
        connection.context = self._current

    def _read(self) -> tuple[bytes, bytes]:
        return self._cert_file.read_bytes(), self._key_file.read_bytes()

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate PEM being served (what the logs name a rotation by)."""
        return hashlib.sha256(self._cert_pem).hexdigest()[:16]

    def set_client_ca(self, client_ca: str | None) -> None:
        """Verify client certificates against ``client_ca`` from the next handshake on."""
        if client_ca == self._client_ca:
            return
        self._current = _context(self._cert_pem, self._key_pem, client_ca)
        self._client_ca = client_ca
        log.info("client certificate authorities replaced")

    def reload_files(self) -> bool:
        """Serve the files' certificate and key if they changed and load; True if they were swapped in."""
        try:
            cert_pem, key_pem = self._read()
        except OSError as exc:
            log.warning("serving certificate files unreadable; keeping the current ones",
                        extra={"error": repr(exc)})
            return False
        if (cert_pem, key_pem) == (self._cert_pem, self._key_pem):
            return False
        try:
            current = _context(cert_pem, key_pem, self._client_ca)
        except (ssl.SSLError, ValueError, OSError) as exc:
            # Certificate and key are rarely replaced in one step; the next check sees both.
            log.warning("serving certificate files do not load (yet); keeping the current ones",
                        extra={"error": repr(exc)})
            return False
        self._current, self._cert_pem, self._key_pem = current, cert_pem, key_pem
        log.info("serving certificate reloaded", extra={"fingerprint": self.fingerprint})
        return True

    async def watch_files(self, interval: float = FILE_CHECK_INTERVAL) -> None:
        """Compare the files with what is served every ``interval`` seconds, forever.

        Polling the contents rather than watching inodes also sees a Secret volume's atomic
        symlink swap, and costs two small reads.
        """
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(self.reload_files)


class RequestHeaderWatch:
    """Keeps the front-proxy trust current with ``kube-system/extension-apiserver-authentication``.

    A list-and-watch of that one ConfigMap (an :class:`Informer`, so a broken watch re-lists with
    backoff); every version of it is handed to ``apply``.  A version that does not parse is
    logged and ignored: the last good trust stays.  A deleted ConfigMap changes nothing either,
    kube-apiserver writes it back.
    """

    def __init__(self, api: Any, apply: Callable[[RequestHeaderConfig], None]) -> None:
        self._client = ObjectClient(api, CONFIGMAPS)
        self._apply = apply
        self._selector = f"metadata.name={CONFIGMAP_NAME}"
        self._seen = ""
        self.informer = Informer(list_fn=self._list, watch_fn=self._watch, name="request-header")

    async def _list(self) -> JSON:
        page = await self._client.list(CONFIGMAP_NAMESPACE, field_selector=self._selector)
        for item in page.get("items") or []:
            self._update(item)
        return page

    async def _watch(self, resource_version: str) -> AsyncIterator[JSON]:
        async for event in self._client.watch(CONFIGMAP_NAMESPACE, "", resource_version,
                                              field_selector=self._selector):
            if event.get("type") in ("ADDED", "MODIFIED"):
                self._update(event.get("object") or {})
            yield event

    def _update(self, configmap: JSON) -> None:
        version = str((configmap.get("metadata") or {}).get("resourceVersion") or "")
        if version and version == self._seen:
            return
        try:
            config = RequestHeaderConfig.from_configmap_data(dict(configmap.get("data") or {}))
        except (ValueError, ApiError) as exc:
            log.error("the front-proxy configuration does not parse; keeping the current one",
                      extra={"error": str(exc)})
            return
        self._seen = version
        self._apply(config)
        log.info("front-proxy configuration loaded",
                 extra={"resourceVersion": version, "allowed_names": list(config.allowed_names)})

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
