"""The thread that lists while the service imports itself: its definitions, then each kind's backing objects.

It runs the same requests the kinds' informers send first (same path and label selector; any page size, since a
continue token carries the rest) and puts each page in :data:`.pages.PAGES`.  It decodes only the definitions
list and each page's closing metadata (:mod:`shared.client.paging`), so it takes little of the interpreter from
the imports it runs beside: most of its time is spent waiting for kube-apiserver, without the GIL.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from shared.client.paging import UNKNOWN, continue_token

from . import login as logins
from .pages import PAGES, Key, Pages

log = logging.getLogger(__name__)

#: What a service plans from its definitions (each a decoded object) and its own flags (``{"group": ...}``):
#: the ``(path, label selector)`` of each list its informers will send first.
Plan = Callable[[list[dict[str, Any]], Mapping[str, str | None]], list[Key]]
#: Items per page: the informers' own page size; any size would be taken, but this keeps the pages alike.
PAGE_SIZE = 500
#: How often a 429 is tried again, and the longest wait between tries (seconds).
RETRIES, RETRY_WAIT_MAX = 3, 1.0
#: Seconds one request may take before the lister gives its list up (the service's own client's default).
REQUEST_TIMEOUT = 60.0


class Lister:
    """List ``definitions`` and then what ``plan`` makes of them, into ``pages``; ``outcome`` says what happened."""

    def __init__(self, connect: Callable[[], logins.Login], definitions: str, plan: Plan,
                 flags: Mapping[str, str | None], pages: Pages = PAGES, page_size: int = PAGE_SIZE) -> None:
        self._connect, self._definitions, self._plan, self._flags = connect, definitions, plan, flags
        self.pages, self.page_size = pages, page_size
        self.outcome = "listing"
        self.done = threading.Event()
        self._told = threading.Lock()
        self._logging = False

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="list ahead", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        started = time.monotonic()
        try:
            self._list_all()
            self.outcome = f"listed ahead in {time.monotonic() - started:.2f} s"
        except logins.Unsupported as exc:
            self.outcome = f"not listing ahead: {exc}"
        except Exception as exc:  # anything at all: the service lists for itself, so this may only be reported
            self.outcome = f"listing ahead stopped: {type(exc).__name__}: {exc}"
        finally:
            with self._told:
                self.done.set()
                if self._logging:
                    log.info(self.outcome)
            self.pages.close()

    def report(self) -> None:
        """Log the outcome once logging is set up: now if the lister is done, else when it is."""
        with self._told:
            self._logging = True
            if self.done.is_set():
                log.info(self.outcome)

    def _list_all(self) -> None:
        login = self._connect()
        conn = login.connect(REQUEST_TIMEOUT)
        try:
            definitions: list[dict[str, Any]] = []
            for _, raw, _ in _pages(conn, login, self._definitions, "", self.page_size):
                definitions.extend(json.loads(raw).get("items") or [])
            for key in self.pages.plan(self._plan(definitions, self._flags)):
                if not self.pages.begin(key):
                    continue
                try:
                    for token, raw, next_token in _pages(conn, login, *key, self.page_size):
                        if not self.pages.put(key, token, raw, next_token):
                            break
                finally:
                    self.pages.end(key)
        finally:
            conn.close()


def _pages(conn: Any, login: logins.Login, path: str, label_selector: str,
           page_size: int) -> Iterable[tuple[str | None, bytes, str | None]]:
    """Each page of one list: the token that asked for it, the page, and the token of the next (None: the last)."""
    token: str | None = None
    while True:
        query = [("labelSelector", label_selector)] if label_selector else []
        query.append(("limit", str(page_size)))
        if token:
            query.append(("continue", token))
        raw = _get(conn, login, f"{login.prefix}{path}?{urlencode(query)}")
        found = continue_token(raw)
        if found is UNKNOWN:
            found = (json.loads(raw).get("metadata") or {}).get("continue") or None
        next_token = found if isinstance(found, str) else None
        yield token, raw, next_token
        if next_token is None:
            return
        token = next_token


def _get(conn: Any, login: logins.Login, target: str) -> bytes:
    """One answer of 200; a 429 (kube-apiserver starting, or a CRD's storage being initialized) is tried again
    after the wait it asks for, a few times."""
    for attempt in range(RETRIES + 1):
        conn.request("GET", target,
                     headers={**login.headers, "Accept": "application/json", "Accept-Encoding": "identity"})
        answer = conn.getresponse()
        raw: bytes = answer.read()
        if answer.status == 200:
            return raw
        if answer.status != 429 or attempt == RETRIES:
            break
        time.sleep(min(float(answer.getheader("Retry-After") or 1), RETRY_WAIT_MAX))
    raise RuntimeError(f"GET {target.partition('?')[0]} answered {answer.status}: {raw[:200]!r}")


def start(argv: Sequence[str] | None, definitions: str, plan: Plan, flags: Sequence[str] = ()) -> Lister | None:
    """Start listing ahead for a service run with ``argv`` (its own flags named in ``flags`` go to ``plan``).

    Called first thing by the entry point.  A command line this cannot read is left to the service's parser."""
    parser = _Flags(add_help=False, allow_abbrev=False)
    parser.add_argument("--kubeconfig")
    for flag in flags:
        parser.add_argument(flag)
    try:
        known, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, ValueError):
        return None
    values = vars(known)
    kubeconfig = values.pop("kubeconfig")
    lister = Lister(lambda: logins.load(kubeconfig), definitions, plan, values)
    lister.start()
    return lister


class _Flags(argparse.ArgumentParser):
    """A parser that raises where argparse would print usage and exit: the service's own parser reports it."""

    def error(self, message: str) -> Any:
        raise ValueError(message)
