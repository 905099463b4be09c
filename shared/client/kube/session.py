"""The services' ``ApiClient``: kubernetes_asyncio's credentials and TLS, with an environment read once.

The transport stays kubernetes_asyncio's rather than our own: its ``Configuration`` is where the
credentials live and are renewed (token files re-read, exec plugins run again,
:mod:`shared.client.credentials`), and kopf's login shares it.  We use only its public surface: the
``ApiClient``'s ``rest_client`` (its aiohttp session, proxy settings and TLS server name),
``default_headers``, ``configuration.host`` and ``update_params_for_auth``, the per-request hook that
applies a refreshed token.
"""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client as kclient
from yarl import URL

from shared.client import credentials

#: The read buffer of the session: watch events of large objects exceed aiohttp's default (the
#: etcd default request limit is 1.5 MiB), as kubernetes_asyncio's own session allows for.
READ_BUFFER = 2**21


async def api_client(kubeconfig: str | None) -> kclient.ApiClient:
    """An ``ApiClient`` from a kubeconfig path, or from the pod's service account when None
    (:mod:`shared.client.credentials` loads and refreshes the credentials)."""
    return client_for(await credentials.load(kubeconfig))


def client_for(login: credentials.Credentials) -> kclient.ApiClient:
    """The one way the services build an ``ApiClient``: from loaded credentials, environment settled."""
    return settle_environment(kclient.ApiClient(configuration=login.configuration))


def settle_environment(api: kclient.ApiClient) -> kclient.ApiClient:
    """Read the proxy variables once, instead of on every request.

    kubernetes_asyncio's aiohttp session trusts the environment, so aiohttp looks up ``~/.netrc`` and
    the proxy variables for each request, each in a thread of the default executor: two thread
    hand-offs per kube call, a third of a rollout's CPU samples.  The proxy for kube-apiserver's URL is
    resolved here once (``HTTPS_PROXY``/``NO_PROXY`` are honoured, as client-go does); ``.netrc``
    never applied (kube credentials are certificates and tokens).  aiohttp offers no setter for an
    existing session's ``trust_env``, so the session is replaced by one that does not trust the
    environment, on the same connector (its TLS context and connection pool): the old session lets go
    of the connector (``detach``) without closing it.
    """
    rest = api.rest_client
    if not rest.proxy:
        try:
            proxy, proxy_auth = aiohttp.helpers.get_env_proxy_for_url(URL(api.configuration.host or ""))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": proxy_auth.encode()}
    trusting: aiohttp.ClientSession = rest.pool_manager
    if trusting.trust_env:
        connector = trusting.connector
        trusting.detach()
        rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFFER)
    return api
