"""The floor of a start-up: a new process that receives the same paged list a service's informer asks for,
and does nothing else (``python -m tests.startup_floor``; :func:`tests.bench_scale.startup_floor` runs it).

A service is Ready once its kind's informer has listed every backing object. No process can be Ready sooner
than kube-apiserver can hand it that list, so the bench times this process beside each start-up, from
quiet processes, on the same cluster: the service's start-up less this floor is what the service adds (its
import, decoding and keeping each object, serving). It asks for the pages the informer asks for (the same
path, label selector and page size, each page's continue token read from the page's tail as the service
reads it) over one kept-alive connection with the services' HTTP client, and decodes no item. It imports the
standard library and aiohttp only, and times itself from its first request to its last page.

Prints one JSON line: the pages and the bytes received.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import time

import aiohttp

#: The services' informers list their backing objects in pages of this size (``ObjectClient.list_all``).
PAGE_SIZE = 500


def continue_token(raw: bytes) -> str | None:
    """The list's ``metadata.continue``: kube-apiserver writes a custom resource's list with sorted keys, so the
    list's metadata closes it (a page is not decoded whole: the service does not either)."""
    at = raw.rfind(b',"metadata":', max(0, len(raw) - 8192))
    meta = json.loads(raw[at + len(b',"metadata":'):].rstrip()[:-1]) if at >= 0 else json.loads(raw)["metadata"]
    return meta.get("continue") or None


async def receive(session: aiohttp.ClientSession, url: str, selector: str) -> dict[str, float]:
    """Every page of the list at ``url`` with ``selector``, received and not decoded; with the seconds taken."""
    pages = size = 0
    token: str | None = ""
    started = time.perf_counter()
    while token is not None:
        query = {"labelSelector": selector, "limit": str(PAGE_SIZE)} | ({"continue": token} if token else {})
        async with session.get(url, params=query) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise SystemExit(f"GET {url}: {resp.status} {raw[:300]!r}")
        token = continue_token(raw)
        pages, size = pages + 1, size + len(raw)
    return {"pages": pages, "bytes": size, "seconds": time.perf_counter() - started}


async def run(args: argparse.Namespace) -> dict[str, float]:
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.load_cert_chain(args.cert, args.key)
    # As the services' own client asks: JSON, uncompressed, one kept-alive connection.
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    connector = aiohttp.TCPConnector(ssl=ctx, limit=1)
    async with aiohttp.ClientSession(connector=connector, headers=headers, auto_decompress=False) as session:
        return await receive(session, f"https://127.0.0.1:{args.port}{args.path}", args.selector)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, required=True, help="kube-apiserver's port on 127.0.0.1")
    parser.add_argument("--path", required=True, help="the backing resource's collection, e.g. /apis/g/v/plural")
    parser.add_argument("--selector", required=True, help="the informer's label selector")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    print(json.dumps(asyncio.run(run(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
