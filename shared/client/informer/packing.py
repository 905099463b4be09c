"""How a cache keeps an object, and the two things it reads from every one: its key and its revision.

Ordering resourceVersions.  The API treats resourceVersions as opaque strings, and the cache compares
them for equality wherever that suffices (e.g. "did this object change?").  It must also *order* them:
to replay history after a client's RV, to detect an RV older than the retained history, and to assign
RVs to synthetic DELETED events.  For one resource served by kube-apiserver, resourceVersions are etcd
revisions -- one global, strictly increasing integer per etcd cluster -- so comparing them as integers
is exact.
"""

from __future__ import annotations

import zstandard

from shared.bodies import JSON, clone, dumps, loads

#: (namespace, name) of a cached object; namespace is "" for cluster-scoped objects.
Key = tuple[str, str]

#: A cached object as the cache keeps it: its JSON encoding compressed by the cache's :class:`Packer` (or the plain
#: encoding, which a packer also reads).
Packed = bytes
#: zstd's lowest level: a 2.7 KB Terraform against a dictionary of its kind packs into about 100 bytes in 2-3 µs.
_LEVEL = 1
#: The first byte of an object's JSON encoding ("{"); a zstd frame starts with 0x28.
_JSON_OBJECT = 0x7B


class Packer:
    """How one cache keeps its objects: compressed with zstd, against a dictionary that is the first object it packs.

    Encoded, not decoded: decoded JSON costs 3-4 times its encoded size in Python objects, and every read decoding
    a fresh copy frees readers from the "do not mutate" rule a shared dict would impose.
    The objects of one resource are nearly alike: the same keys, labels, defaults and module paths, differing in
    names, uids and a few values.  With one of them as a raw-content dictionary, zstd keeps a 1.4 KB cached
    Terraform in about 80 bytes, packing it in 2-3 µs and unpacking it in under 1 µs (a decode with orjson takes
    5-6 µs), where the JSON encoding alone was most of a cache of 50 000 (issue 26, round 14 of the performance
    notes).  An object unlike the first still round-trips exactly; it only compresses less.  Plain JSON (an
    object's encoding, which starts with ``{``) is also accepted by :meth:`unpack_encoded`, so readers need not
    know which form they hold.  One packer per cache, used from its event loop only (zstd contexts are not
    shared between threads); each holds about 200 KiB of zstd state.
    """

    def __init__(self) -> None:
        self._compressor: zstandard.ZstdCompressor | None = None
        self._decompressor: zstandard.ZstdDecompressor | None = None

    def pack(self, obj: JSON) -> Packed:
        return self.pack_encoded(dumps(obj))

    def pack_encoded(self, raw: bytes) -> Packed:
        """``raw``, a JSON encoding, as this packer keeps it (the first one becomes the dictionary)."""
        if self._compressor is None:
            dictionary = zstandard.ZstdCompressionDict(raw, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            dictionary.precompute_compress(level=_LEVEL)
            self._compressor = zstandard.ZstdCompressor(level=_LEVEL, dict_data=dictionary, write_checksum=False,
                                                        write_content_size=True, write_dict_id=False)
            self._decompressor = zstandard.ZstdDecompressor(dict_data=dictionary)
        # zstd's bytes keep the buffer sized for the worst case (the input's size and more): the cache keeps an
        # exact-size copy.
        return bytes(memoryview(self._compressor.compress(raw)))

    def unpack(self, packed: Packed) -> JSON:
        """A fresh decoded copy of a packed object, which the caller may mutate."""
        obj: JSON = loads(self.unpack_encoded(packed))
        return obj

    def unpack_encoded(self, packed: Packed) -> bytes:
        """The JSON encoding of a packed object."""
        if self._decompressor is None or packed[0] == _JSON_OBJECT:
            return packed
        return self._decompressor.decompress(packed)

    def unpacked(self, obj: Packed | JSON) -> JSON:
        """What a reader receives: its own copy of a packed object (or of a bookmark, kept as a dict)."""
        copy: JSON = self.unpack(obj) if isinstance(obj, bytes) else clone(obj)
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
    return parsed_rv_or_zero(rv_text(obj))


def parsed_rv_or_zero(rv: str) -> int:
    """:func:`parse_rv`, or 0 when ``rv`` is no revision a list could be ordered by."""
    try:
        return parse_rv(rv)
    except ValueError:
        return 0
