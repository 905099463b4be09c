"""How a cache keeps an object, and the two things it reads from every one: its key and its revision.

Ordering resourceVersions.  The API treats resourceVersions as opaque strings, and the cache compares
them for equality wherever that suffices (e.g. "did this object change?").  It must also *order* them:
to replay history after a client's RV, to detect an RV older than the retained history, and to assign
RVs to synthetic DELETED events.  For one resource served by kube-apiserver, resourceVersions are etcd
revisions -- one global, strictly increasing integer per etcd cluster -- so comparing them as integers
is exact.
"""

from __future__ import annotations

from shared.bodies import JSON, clone, dumps, loads

#: (namespace, name) of a cached object; namespace is "" for cluster-scoped objects.
Key = tuple[str, str]

#: A cached object as the cache keeps it: its JSON encoding (see :func:`pack`).
Packed = bytes


def pack(obj: JSON) -> Packed:
    """An object as the cache keeps it: its compact JSON encoding.

    Decoded JSON costs 3-4 times its encoded size in Python objects (a dict of a few keys is a few
    hundred bytes); a cache of 10 000 backing objects is mostly that.  Every read decodes a fresh
    copy (orjson, a few microseconds an object), which also frees readers from the "do not mutate"
    rule a shared dict would impose.
    """
    # orjson's bytes keep the buffer it grew while writing (4 KiB for a 1.4 KB object): the cache
    # keeps an exact-size copy.
    return bytes(memoryview(dumps(obj)))


def unpacked(obj: Packed | JSON) -> JSON:
    """What a reader receives: its own copy of a packed object (or of a bookmark, kept as a dict)."""
    copy: JSON = loads(obj) if isinstance(obj, bytes) else clone(obj)
    return copy


def metadata(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def key_of(obj: JSON) -> Key:
    meta = metadata(obj)
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def rv_text(obj: JSON) -> str:
    return str(metadata(obj).get("resourceVersion") or "")


def parse_rv(rv: str) -> int:
    """The integer behind a kube resourceVersion (an etcd revision); ValueError if it is not one."""
    value = int(rv)
    if value < 0 or not rv.isdigit():
        raise ValueError(f"invalid resource version {rv!r}")
    return value


def rv_or_zero(obj: JSON) -> int:
    """An object's revision for ordering; 0 when it has none a list could be ordered by."""
    try:
        return parse_rv(rv_text(obj))
    except ValueError:
        return 0
