"""Admission webhooks on the served kinds: the cluster's webhook configurations, kept live, and the HTTPS calls.

kube-apiserver does not run admission for what it proxies to an aggregated server, so a webhook whose
rules match a user kind would be silently bypassed; :class:`WebhookAdmission` calls it here instead.
The Mutating- and ValidatingWebhookConfigurations are kept by one informer each (a new configuration
applies within a watch event, without a restart), each compiled once per version; what to call and
what to make of the answers is :mod:`shared.admission.webhooks`'s. This module does the I/O:

* ``clientConfig.url`` is posted to as written; ``clientConfig.service`` is resolved as kube-apiserver
  resolves it (the Service is read: an ``ExternalName`` goes to its external name, a ClusterIP service
  to its cluster IP and port), and its certificate must be valid for ``<service>.<namespace>.svc``;
* ``caBundle`` is the only trust for that webhook (the system roots without one), as in kube-apiserver;
* ``timeoutSeconds`` bounds the whole call and is sent as ``?timeout=<n>s``;
* a failed call is described as kube-apiserver (Go's HTTP client) describes it for the usual causes:
  ``Post "<url>": dial tcp <addr>: connect: connection refused``, ``context deadline exceeded``, a TLS
  verification failure; rarer transport errors keep Python's wording.
"""

from __future__ import annotations

import base64
import errno
import json
import logging
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client as kclient
from yarl import URL

from shared.admission import AdmissionRequest
from shared.admission import webhooks as hooks
from shared.admission.webhooks import CallFailed, Outcome, Webhook
from shared.api import errors
from shared.bodies import JSON
from shared.client.kube import GVR, ObjectClient
from shared.client.liveset import LiveSet

log = logging.getLogger(__name__)

MUTATING = GVR("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
VALIDATING = GVR("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
SERVICES = GVR("", "v1", "services")
NAMESPACES = GVR("", "v1", "namespaces")


@dataclass(frozen=True)
class _Endpoint:
    #: The URL kube-apiserver names in its messages (the service's DNS name for a service).
    shown: URL
    #: Where to connect.
    target: URL
    #: The name the certificate must carry (and SNI), when it is not the target's host.
    server_hostname: str | None = None


class HttpTransport:
    """:data:`shared.admission.webhooks.Transport` over HTTPS, one connection pool for every webhook."""

    def __init__(self, services: ObjectClient) -> None:
        self._services = services
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _ssl(self, ca_bundle: str) -> ssl.SSLContext:
        """A client context trusting only ``caBundle`` (base64 PEM), or the system roots without one."""
        context = self._contexts.get(ca_bundle)
        if context is None:
            if ca_bundle:
                pem = base64.b64decode(ca_bundle).decode()
                context = ssl.create_default_context(cadata=pem)
            else:
                context = ssl.create_default_context()
            self._contexts[ca_bundle] = context
        return context

    async def _endpoint(self, webhook: Webhook) -> _Endpoint:
        config = webhook.client_config
        timeout = {"timeout": f"{webhook.timeout_seconds}s"}
        service = config.get("service")
        if not service:
            if not config.get("url"):
                raise CallFailed("webhook configuration must have either service or URL")
            url = URL(str(config["url"])).with_query(timeout)
            return _Endpoint(url, url)
        name, namespace = str(service.get("name", "")), str(service.get("namespace", ""))
        port = int(service.get("port") or 443)
        path = str(service.get("path") or "/")
        server_name = f"{name}.{namespace}.svc"
        shown = URL.build(scheme="https", host=server_name, port=port, path=path, query=timeout)
        host, port = await self._resolve(shown, namespace, name, port)
        target = URL.build(scheme="https", host=host, port=port, path=path, query=timeout)
        return _Endpoint(shown, target, server_name)

    async def _resolve(self, shown: URL, namespace: str, name: str, port: int) -> tuple[str, int]:
        """Where kube-apiserver's service resolver sends a call to ``namespace/name:port``."""
        try:
            service = await self._services.get(namespace, name)
        except errors.ApiError as exc:
            raise CallFailed(f'failed to call webhook: Post "{shown}": {exc.message}') from None
        spec = service.get("spec") or {}
        kind = spec.get("type") or "ClusterIP"
        if kind == "ExternalName":
            return str(spec.get("externalName", "")), port
        if kind == "ClusterIP" and spec.get("clusterIP") == "None":
            reason = 'cannot route to service with ClusterIP "None"'
        elif kind in ("ClusterIP", "LoadBalancer", "NodePort"):
            if any(p.get("port") == port for p in spec.get("ports") or []):
                return str(spec.get("clusterIP", "")), port
            reason = f'no service port {port} found for service "{name}"'
        else:
            reason = f'unsupported service type "{kind}"'
        raise CallFailed(f'failed to call webhook: Post "{shown}": {reason}')

    async def __call__(self, webhook: Webhook, review: JSON) -> JSON:
        endpoint = await self._endpoint(webhook)
        if self._session is None:
            self._session = aiohttp.ClientSession(json_serialize=json.dumps)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if endpoint.server_hostname:
            headers["Host"] = f"{endpoint.shown.host}:{endpoint.shown.port}"
        sslcontext = self._ssl(str(webhook.client_config.get("caBundle") or ""))
        try:
            async with self._session.post(
                    endpoint.target, data=json.dumps(review).encode(), headers=headers, ssl=sslcontext,
                    server_hostname=endpoint.server_hostname,
                    timeout=aiohttp.ClientTimeout(total=webhook.timeout_seconds)) as response:
                body = await response.read()
                status = response.status
        except TimeoutError:
            raise CallFailed(f'failed to call webhook: Post "{endpoint.shown}": context deadline exceeded') from None
        except aiohttp.ClientError as exc:
            raise CallFailed(f'failed to call webhook: Post "{endpoint.shown}": {_describe(exc)}') from None
        if not 200 <= status < 300:
            raise CallFailed(f"failed to call webhook: {_http_error(status, body)}")
        try:
            answer: Any = json.loads(body)
        except ValueError as exc:
            raise CallFailed(f"failed to call webhook: {exc}") from None
        if not isinstance(answer, dict):
            raise CallFailed("received invalid webhook response: webhook response was absent")
        return answer


def _describe(exc: aiohttp.ClientError) -> str:
    """A transport error in the words of Go's HTTP client, for the causes people meet."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        why = getattr(exc.certificate_error, "verify_message", "") or str(exc.certificate_error)
        return f"tls: failed to verify certificate: x509: {why}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        address = f"[{exc.host}]:{exc.port}" if ":" in exc.host else f"{exc.host}:{exc.port}"
        if exc.os_error.errno == errno.ECONNREFUSED:
            return f"dial tcp {address}: connect: connection refused"
        return f"dial tcp {address}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return "context deadline exceeded"
    return str(exc) or type(exc).__name__


def _http_error(status: int, body: bytes) -> str:
    """A non-2xx answer: its Status message when it sent one, as client-go reports it."""
    try:
        sent = json.loads(body)
    except ValueError:
        sent = None
    if isinstance(sent, dict) and sent.get("kind") == "Status" and sent.get("message"):
        return str(sent["message"])
    text = body.decode(errors="replace").strip()
    return f'an error on the server ("{text}") has prevented the request from succeeding'


class WebhookAdmission:
    """The cluster's admission webhooks, called for the requests of the kinds their rules match."""

    def __init__(self, api: kclient.ApiClient, *, sync_wait: float) -> None:
        self._mutating: LiveSet[tuple[Webhook, ...]] = LiveSet(
            ObjectClient(api, MUTATING), lambda config: hooks.compile_configuration(config, mutating=True))
        self._validating: LiveSet[tuple[Webhook, ...]] = LiveSet(
            ObjectClient(api, VALIDATING), lambda config: hooks.compile_configuration(config, mutating=False))
        self._namespaces = ObjectClient(api, NAMESPACES)
        self._transport = HttpTransport(ObjectClient(api, SERVICES))
        self._sync_wait = sync_wait

    def start(self) -> None:
        self._mutating.informer.start()
        self._validating.informer.start()

    async def stop(self) -> None:
        await self._mutating.informer.stop()
        await self._validating.informer.stop()
        await self._transport.close()

    async def _webhooks(self, live: LiveSet[tuple[Webhook, ...]]) -> list[Webhook]:
        await live.informer.require_synced(self._sync_wait)
        return hooks.ordered(live.items)

    async def _namespace(self, request: AdmissionRequest) -> JSON | None:
        return await self._namespaces.get(None, request.namespace) if request.namespace else None

    async def mutate(self, request: AdmissionRequest, outcome: Outcome) -> None:
        """The mutating webhooks: ``outcome`` gets the object to go on with, warnings and audit annotations."""
        outcome.object = request.object
        webhooks = await self._webhooks(self._mutating)
        if webhooks:
            await hooks.mutate(webhooks, request, await self._namespace(request), self._transport, outcome)

    async def validate(self, request: AdmissionRequest, outcome: Outcome) -> None:
        """The validating webhooks: raises the refusal; ``outcome`` gets warnings and audit annotations."""
        webhooks = await self._webhooks(self._validating)
        if webhooks:
            await hooks.validate(webhooks, request, await self._namespace(request), self._transport, outcome)
