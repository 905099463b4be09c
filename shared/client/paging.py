"""A paged list's continue token, read from a page before the page is decoded.

A paged list is a conversation: each page's answer names the next (``metadata.continue``).  Decoding a page
of 500 objects takes the service about as long as kube-apiserver takes to encode the next one, so asking for
the next page only after decoding this one makes the two processes take turns on a two-core machine.  Read
the token first and the next page is on its way while this one is decoded.

kube-apiserver writes a custom resource's list with sorted keys (``apiVersion``, ``items``, ``kind``,
``metadata``): the list's own metadata, a few short fields, closes the answer.  :func:`continue_token`
decodes only that tail; anything else (a built-in kind's list, which writes ``metadata`` before ``items``; a
tail that is not the list metadata) gives :data:`UNKNOWN` and the caller decodes the page first.  Written by
hand: no JSON library reads the last member of a document without the rest (streaming parsers like ijson
read all of it, at Python speed).
"""

from __future__ import annotations

from typing import Final

from shared.bodies import loads

#: The list metadata's fields (ListMeta); a tail with any other key is not the list's metadata.
LIST_META_FIELDS = frozenset({"continue", "remainingItemCount", "resourceVersion", "selfLink"})
#: How far from the end the list metadata may start: a continue token is a few hundred bytes.
TAIL = 8192
MEMBER = b',"metadata":'


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


#: The tail could not be read: decode the page to know its token.
UNKNOWN: Final = _Unknown()


def continue_token(raw: bytes) -> str | _Unknown | None:
    """The ``metadata.continue`` of a list answer (None: the last page), or :data:`UNKNOWN`."""
    start = raw.rfind(MEMBER, max(0, len(raw) - TAIL))
    body = raw.rstrip()
    if start < 0 or not body.endswith(b"}"):
        return UNKNOWN
    try:
        meta = loads(body[start + len(MEMBER):-1])
    except ValueError:
        return UNKNOWN
    if not isinstance(meta, dict) or not LIST_META_FIELDS.issuperset(meta):
        return UNKNOWN
    token = meta.get("continue")
    return token if isinstance(token, str) and token else None
