"""Lists sent while the service is still importing itself, handed to its informers when they ask.

A start spends over a second importing (kopf, kubernetes_asyncio, pydantic, the models) before its event loop runs;
only then does it learn its kinds and list their backing objects, the longest step of a start at scale, spent
waiting for kube-apiserver to write the pages.  So the entry point first starts a thread (:mod:`.lister`) that lists
the definitions and then each kind's backing objects with the standard library alone (:mod:`.login`), and keeps
the pages (:mod:`.pages`).  A kind's first list takes them instead of asking again: a list at the resourceVersion
of that earlier moment, from which its informer then watches, so nothing changed since is missed.
"""

from __future__ import annotations

from .lister import Lister, Plan, start
from .pages import PAGES, Pages

__all__ = ["PAGES", "Lister", "Pages", "Plan", "start"]
